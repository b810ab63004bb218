"""Configuration of the existing EKS cluster the stack deploys into and of who adds GPU nodes
(cluster autoscaler, Karpenter, or nothing). Feeds components/platform and components/gpu.
Shapes and ranges only; relations are checked in stacks/checks/.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import Field, StringConstraints

from components.platform import versions
from stacks.config.base import AvailabilityZone, ChartVersion, ConfigModel, KubernetesVersion, SubnetId


class NodeAutoscalingMode(StrEnum):
    """Who adds and removes GPU nodes."""

    CLUSTER_AUTOSCALER = "clusterAutoscaler"
    EXISTING = "existing"
    NONE = "none"


class ExistingAutoscaler(StrEnum):
    """The node autoscaler a cluster already runs."""

    CLUSTER_AUTOSCALER = "cluster-autoscaler"
    KARPENTER = "karpenter"


class NodeAutoscalingConfig(ConfigModel):
    """Node autoscaling of the GPU node group."""

    mode: NodeAutoscalingMode = Field(
        default=NodeAutoscalingMode.CLUSTER_AUTOSCALER,
        description=(
            "`clusterAutoscaler` installs Cluster Autoscaler for this program's GPU node groups; `existing`: "
            "the cluster already runs one (name it in `existing`); `none`: fixed capacity, `desiredNodes`."
        ),
    )
    existing: ExistingAutoscaler | None = Field(
        default=None, description="With mode `existing`: which autoscaler runs (`cluster-autoscaler`)."
    )
    chart_version: ChartVersion = Field(
        default=versions.CLUSTER_AUTOSCALER.version, description="cluster-autoscaler chart version."
    )


class NetworkPolicyEnforcement(StrEnum):
    """Who enforces the NetworkPolicies that fence the models: the VPC CNI (checked at preview), or
    another CNI or policy engine the operator vouches for (Calico, Cilium; not checked)."""

    VPC_CNI = "vpcCni"
    OTHER = "other"


class ClusterConfig(ConfigModel):
    """The existing EKS cluster this stack attaches GPU capacity and workloads to."""

    name: Annotated[str, StringConstraints(pattern=r"^[0-9A-Za-z][A-Za-z0-9\-_]{0,99}$")] = Field(
        description="Name of the existing EKS cluster (looked up, never created, by this program)."
    )
    network_policy_enforcement: NetworkPolicyEnforcement = Field(
        default=NetworkPolicyEnforcement.VPC_CNI,
        description=(
            "`vpcCni`: a preview refuses the stack unless the `vpc-cni` add-on has `enableNetworkPolicy: \"true\"` "
            "(without it every NetworkPolicy here is ignored); `other`: another engine enforces them."
        ),
    )
    kubernetes_version: KubernetesVersion = Field(
        default=versions.DEFAULT_KUBERNETES_VERSION,
        description=(
            "Kubernetes minor version of the cluster, e.g. `1.34`; a preview fails when the looked-up "
            "cluster runs another. Objects are validated against this version's OpenAPI schema, the node "
            "group runs it, and Cluster Autoscaler's image follows it."
        ),
    )


class Subnet(ConfigModel):
    """One private subnet the GPU nodes may be placed in."""

    id: SubnetId = Field(description="Subnet id, e.g. `subnet-0123456789abcdef0`.")
    availability_zone: AvailabilityZone = Field(
        description="Availability zone of the subnet; capacity blocks need every subnet in one zone."
    )
