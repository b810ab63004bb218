"""IAM documents more than one package needs (pure, no Pulumi import)."""

from __future__ import annotations

from typing import Any


def pod_identity_trust_policy() -> dict[str, Any]:
    """Trust for EKS Pod Identity (EKS user guide, pod-id-role): the agent assumes and tags the session."""
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"Service": "pods.eks.amazonaws.com"},
                "Action": ["sts:AssumeRole", "sts:TagSession"],
            }
        ],
    }
