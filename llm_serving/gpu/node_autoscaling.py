"""Cluster Autoscaler for this program's GPU node groups: chart values and IAM (pure, no Pulumi import).

Facts: kubernetes/autoscaler cluster-autoscaler 1.34.5 (cloudprovider/aws/README.md, FAQ.md) and
chart 9.53.0 values (charts/cluster-autoscaler/values.yaml @ cluster-autoscaler-chart-9.53.0).
"""

from __future__ import annotations

from typing import Any

from llm_serving.platform import check_dns_label

NAMESPACE = "kube-system"
SERVICE_ACCOUNT = "cluster-autoscaler"
# Our own Auto Scaling group tag: discovery and the write permissions are scoped to groups carrying
# it, so this autoscaler never resizes a node group another team owns in the same cluster. EKS adds
# the two standard k8s.io/cluster-autoscaler tags to every managed node group's ASG on its own.
DISCOVERY_TAG = "llm-serving/node-autoscaling"

# vLLM pods carry this annotation: Cluster Autoscaler never drains a node to consolidate a replica
# that is loading or serving (a move costs a full cold start); a GPU node is removed only once the
# pod autoscaler has removed its replicas (FAQ "What types of pods can prevent CA from removing a node").
SAFE_TO_EVICT_ANNOTATION = "cluster-autoscaler.kubernetes.io/safe-to-evict"
# Karpenter's (and EKS Auto Mode's) equivalent on existing nodes: a node running such a pod is not
# consolidated nor replaced for drift (karpenter.sh docs, concepts/disruption "Pod-Level Controls"); the
# node empties when the pod autoscaler removes its replicas, or its owner drains it.
DO_NOT_DISRUPT_ANNOTATION = "karpenter.sh/do-not-disrupt"

# Priority of this program's GPU groups for the priority expander (expander/priority/readme.md):
# least-waste, the default, scores only CPU and memory waste, never GPUs (expander/waste/waste.go).
# Groups are ranked by regex on their ASG names; an unmatched group is never expanded, hence ".*".
GPU_GROUP_PRIORITY = 50
OTHER_GROUP_PRIORITY = 1

# A GPU node takes longer than a CPU node to become schedulable (instance launch, NVMe RAID,
# driver and device plugin start). Past --max-node-provision-time CA treats the scale-up as failed
# and backs off the group; the default is 15 minutes (FAQ.md), kept: a p5 that needs longer is sick.
MAX_NODE_PROVISION_TIME = "15m"


def image_tag_for(kubernetes_minor: str, tags: dict[str, str]) -> str:
    """The Cluster Autoscaler release for the cluster's minor; its README asks for the same minor."""
    if kubernetes_minor not in tags:
        raise ValueError(
            f"no Cluster Autoscaler image is pinned for Kubernetes {kubernetes_minor} (pinned: "
            f"{', '.join(sorted(tags))}); add the matching release to llm_serving/platform/versions.py"
        )
    return tags[kubernetes_minor]


def discovery_tags(cluster_name: str) -> list[str]:
    """--node-group-auto-discovery tags: EKS's two standard keys plus ours with a value.

    With `key=value` only groups whose tag has that value match (cloudprovider/aws README, auto-discovery).
    """
    return [
        "k8s.io/cluster-autoscaler/enabled",
        f"k8s.io/cluster-autoscaler/{cluster_name}",
        f"{DISCOVERY_TAG}={cluster_name}",
    ]


def chart_values(*, cluster_name: str, region: str, image_tag: str, node_group_name: str) -> dict[str, Any]:
    """cluster-autoscaler 9.53.0 values for this program's GPU node groups."""
    check_dns_label("node_group_name", node_group_name)
    return {
        "cloudProvider": "aws",
        "awsRegion": region,
        "autoDiscovery": {"clusterName": cluster_name, "tags": discovery_tags(cluster_name)},
        "image": {"tag": image_tag},
        # Fixed names: the Pod Identity association binds this service account.
        "fullnameOverride": "cluster-autoscaler",
        "rbac": {"serviceAccount": {"create": True, "name": SERVICE_ACCOUNT}},
        "extraArgs": {
            "expander": "priority,least-waste",
            "max-node-provision-time": MAX_NODE_PROVISION_TIME,
            # Spread replicas' nodes over the group's zones when several groups look alike.
            "balance-similar-node-groups": True,
        },
        # MNG ASG names are eks-<node group name>-<uuid>.
        "expanderPriorities": {
            str(GPU_GROUP_PRIORITY): [f"^eks-{node_group_name}-.*"],
            str(OTHER_GROUP_PRIORITY): [".*"],
        },
        "priorityClassName": "system-cluster-critical",
        "podDisruptionBudget": {"maxUnavailable": 1},
        # Twice the chart's commented example (300Mi): CA caches every node and pod of the cluster,
        # not only ours, and an OOM-killed autoscaler stops all scale-ups.
        "resources": {"requests": {"cpu": "100m", "memory": "600Mi"}, "limits": {"memory": "600Mi"}},
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": 65534,
            "runAsGroup": 65534,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containerSecurityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
    }


def iam_policy(*, cluster_name: str, partition: str, region: str, account_id: str) -> dict[str, Any]:
    """The AWS provider README's "full features" policy, narrowed.

    Describe calls cannot be scoped to a resource; eks:DescribeNodegroup (labels and taints of a group
    at zero nodes) is limited to this cluster's node groups; resizing and terminating only to ASGs
    carrying our discovery tag with this cluster's name.
    """
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "Discover",
                "Effect": "Allow",
                "Action": [
                    "autoscaling:DescribeAutoScalingGroups",
                    "autoscaling:DescribeAutoScalingInstances",
                    "autoscaling:DescribeLaunchConfigurations",
                    "autoscaling:DescribeScalingActivities",
                    "ec2:DescribeImages",
                    "ec2:DescribeInstanceTypes",
                    "ec2:DescribeLaunchTemplateVersions",
                    "ec2:GetInstanceTypesFromInstanceRequirements",
                ],
                "Resource": "*",
            },
            {
                "Sid": "ReadNodeGroups",
                "Effect": "Allow",
                "Action": "eks:DescribeNodegroup",
                "Resource": f"arn:{partition}:eks:{region}:{account_id}:nodegroup/{cluster_name}/*",
            },
            {
                "Sid": "ResizeOwnGroups",
                "Effect": "Allow",
                "Action": ["autoscaling:SetDesiredCapacity", "autoscaling:TerminateInstanceInAutoScalingGroup"],
                "Resource": "*",
                "Condition": {"StringEquals": {f"aws:ResourceTag/{DISCOVERY_TAG}": cluster_name}},
            },
        ],
    }
