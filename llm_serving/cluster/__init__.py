"""The cluster a stack creates when `cluster.mode` is `create`: VPC, EKS control plane, access
entries, add-ons at pinned versions and a CPU node group; the pure address and add-on plans."""

from .addons import ADDONS, VPC_CNI_CONFIGURATION, AddonSpec, addon_plan, pinned_minors
from .args import (
    ClusterArgs,
    ClusterMode,
    ControlPlaneLogType,
    CreateClusterArgs,
    LoadBalancerControllerMode,
    NatGateways,
    NetworkPolicyEnforcement,
    SystemNodesArgs,
)
from .cluster import (
    ADMIN_POLICY,
    MAX_CLUSTER_NAME_LENGTH,
    SYSTEM_NODE_LABEL,
    Cluster,
    ClusterSpec,
    SystemNodes,
)
from .network import (
    INTERNAL_ELB_TAG,
    MAX_ZONES,
    PUBLIC_ELB_TAG,
    NetworkPlan,
    SubnetPlan,
    cidr_problems,
    cluster_tag,
    plan_network,
)

__all__ = [
    "ADDONS",
    "ADMIN_POLICY",
    "AddonSpec",
    "Cluster",
    "ClusterArgs",
    "ClusterMode",
    "ClusterSpec",
    "ControlPlaneLogType",
    "CreateClusterArgs",
    "INTERNAL_ELB_TAG",
    "LoadBalancerControllerMode",
    "MAX_CLUSTER_NAME_LENGTH",
    "MAX_ZONES",
    "NatGateways",
    "NetworkPlan",
    "NetworkPolicyEnforcement",
    "PUBLIC_ELB_TAG",
    "SYSTEM_NODE_LABEL",
    "SubnetPlan",
    "SystemNodes",
    "SystemNodesArgs",
    "VPC_CNI_CONFIGURATION",
    "addon_plan",
    "cidr_problems",
    "cluster_tag",
    "pinned_minors",
    "plan_network",
]
