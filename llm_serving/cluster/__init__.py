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
    SYSTEM_ROOT_VOLUME_GIB,
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
from .node_disk import EKS_AMI_ROOT_GIB, allocatable_ephemeral_gib, disk_for_ephemeral_gib

__all__ = [
    "ADDONS",
    "ADMIN_POLICY",
    "AddonSpec",
    "EKS_AMI_ROOT_GIB",
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
    "SYSTEM_ROOT_VOLUME_GIB",
    "SubnetPlan",
    "SystemNodes",
    "SystemNodesArgs",
    "VPC_CNI_CONFIGURATION",
    "addon_plan",
    "allocatable_ephemeral_gib",
    "cidr_problems",
    "cluster_tag",
    "disk_for_ephemeral_gib",
    "pinned_minors",
    "plan_network",
]
