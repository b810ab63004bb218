"""IAM documents more than one package needs (pure, no Pulumi import)."""

from __future__ import annotations

from typing import Any


def pod_identity_trust_policy(cluster_arn: str, namespace: str, service_account: str) -> dict[str, Any]:
    """Trust for EKS Pod Identity: the agent assumes the role and tags the session, for one service account of one
    cluster.

    The conditions are the session tags EKS Pod Identity sets on every assumption (EKS user guide, "Create IAM role
    with trust policy required by EKS Pod Identity", https://docs.aws.amazon.com/eks/latest/userguide/pod-id-role.html,
    and its list of session tags, pod-id-abac.html#pod-id-abac-tags): `eks-cluster-arn`, `kubernetes-namespace` and
    `kubernetes-service-account`, matched as `aws:RequestTag/...`. The guide documents no `aws:SourceArn` or
    `aws:SourceAccount` for pods.eks.amazonaws.com, so conditions on those might never match and the pods would get
    no credentials. The associations this project creates keep the session tags (`disableSessionTags` unset).
    """
    if not cluster_arn.startswith("arn:") or ":cluster/" not in cluster_arn or not namespace or not service_account:
        raise ValueError("a Pod Identity trust policy needs the cluster ARN, the namespace and the service account")
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"Service": "pods.eks.amazonaws.com"},
                "Action": ["sts:AssumeRole", "sts:TagSession"],
                "Condition": {
                    "StringEquals": {
                        "aws:RequestTag/eks-cluster-arn": cluster_arn,
                        "aws:RequestTag/kubernetes-namespace": namespace,
                        "aws:RequestTag/kubernetes-service-account": service_account,
                    },
                },
            }
        ],
    }
