"""IAM documents more than one package needs (pure, no Pulumi import)."""

from __future__ import annotations

from typing import Any


def pod_identity_trust_policy(account_id: str, cluster_arn: str) -> dict[str, Any]:
    """Trust for EKS Pod Identity (EKS user guide, pod-id-role): the agent assumes and tags the session.

    The confused-deputy conditions the guide recommends for service principals: the EKS service may
    assume the role only on behalf of this account (aws:SourceAccount) and this cluster's Pod Identity
    associations (aws:SourceArn, the cluster ARN), not for another cluster that names the role.
    """
    if not account_id or not cluster_arn.startswith("arn:"):
        raise ValueError("a Pod Identity trust policy needs the account id and the cluster ARN")
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"Service": "pods.eks.amazonaws.com"},
                "Action": ["sts:AssumeRole", "sts:TagSession"],
                "Condition": {
                    "StringEquals": {"aws:SourceAccount": account_id},
                    "ArnEquals": {"aws:SourceArn": cluster_arn},
                },
            }
        ],
    }
