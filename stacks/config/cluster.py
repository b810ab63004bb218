"""Configuration of the EKS cluster the stack deploys into (looked up, or created with its VPC and
add-ons) and of who adds GPU nodes (cluster autoscaler, Karpenter, or nothing). Feeds
components/platform, components/cluster and components/gpu.
Shapes and ranges only; relations are checked in stacks/checks/.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import Field, StringConstraints

from components.platform import versions
from stacks.config.base import (
    AvailabilityZone,
    ChartVersion,
    ConfigModel,
    IamRoleArn,
    InstanceTypeName,
    KubernetesVersion,
    SubnetId,
)


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


class ClusterMode(StrEnum):
    """Whether the stack attaches to a cluster that exists or builds its own."""

    EXISTING = "existing"
    CREATE = "create"


class NatGateways(StrEnum):
    """NAT gateways of a created VPC: one per zone survives a zone outage; one is a third of the cost."""

    PER_ZONE = "perZone"
    ONE = "one"


CidrBlock = Annotated[str, StringConstraints(pattern=r"^\d{1,3}(\.\d{1,3}){3}/\d{1,2}$")]
ControlPlaneLogType = Literal["api", "audit", "authenticator", "controllerManager", "scheduler"]


class SystemNodesConfig(ConfigModel):
    """The created cluster's on-demand CPU node group: controllers, pickers, Envoy, the staging Job."""

    instance_type: InstanceTypeName = Field(
        default="m7i.xlarge", description="EC2 instance type (4 vCPU, 16 GiB by default)."
    )
    min_nodes: int = Field(default=2, ge=2, le=20, description="Fewest nodes; two, so each of two zones keeps one.")
    max_nodes: int = Field(default=4, ge=2, le=20, description="Most nodes.")
    desired_nodes: int = Field(default=2, ge=2, le=20, description="Nodes at creation.")


class CreateClusterConfig(ConfigModel):
    """What `cluster.mode: create` builds in the stack's region."""

    vpc_cidr: CidrBlock = Field(
        default="10.40.0.0/16",
        description="VPC CIDR, a /16 to /20 in a private range: three quarters go to the private subnets.",
    )
    service_cidr: CidrBlock = Field(
        default="172.20.0.0/16", description="Kubernetes Service CIDR; must not overlap the VPC."
    )
    zones: list[AvailabilityZone] = Field(
        min_length=1,
        description="Availability zones of the stack's region, two or three: one private and one public subnet each.",
    )
    nat_gateways: NatGateways | None = Field(
        default=None, description="`perZone` or `one`; unset: `perZone` in prod, `one` otherwise."
    )
    admin_role_arns: list[IamRoleArn] = Field(
        default_factory=list,
        description="IAM roles given cluster admin access entries besides the role running `pulumi up`.",
    )
    public_access_cidrs: list[CidrBlock] = Field(
        default_factory=lambda: ["0.0.0.0/0"], min_length=1,
        description="Source CIDRs allowed to reach the public API endpoint (the deployer runs outside the VPC).",
    )
    log_types: list[ControlPlaneLogType] = Field(
        default_factory=lambda: ["api", "audit", "authenticator", "controllerManager", "scheduler"],
        description="Control-plane log types sent to CloudWatch Logs.",
    )
    log_retention_days: Literal[1, 3, 5, 7, 14, 30, 60, 90, 180, 365] = Field(
        default=30, description="Days CloudWatch keeps the control-plane logs."
    )
    system_nodes: SystemNodesConfig = Field(
        default_factory=SystemNodesConfig, description="The CPU node group over every zone."
    )


class NetworkPolicyEnforcement(StrEnum):
    """Who enforces the NetworkPolicies that fence the models: the VPC CNI (checked at preview), or
    another CNI or policy engine the operator vouches for (Calico, Cilium; not checked)."""

    VPC_CNI = "vpcCni"
    OTHER = "other"


class LoadBalancerControllerMode(StrEnum):
    """Who runs the AWS Load Balancer Controller, which turns the edge's Service into an NLB (and alb
    mode's Ingresses into an ALB): the program, from its chart, or the cluster already."""

    INSTALL = "install"
    EXISTING = "existing"


class ClusterConfig(ConfigModel):
    """The EKS cluster this stack attaches GPU capacity and workloads to, looked up or created."""

    name: Annotated[str, StringConstraints(pattern=r"^[0-9A-Za-z][A-Za-z0-9\-_]{0,99}$")] = Field(
        description="Name of the EKS cluster: looked up with mode `existing`, created with mode `create`."
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
            "group runs it, and Cluster Autoscaler's image follows it. With mode `create`, raising it by one "
            "minor upgrades the control plane, then the add-ons, then the node groups."
        ),
    )
    mode: ClusterMode = Field(
        default=ClusterMode.EXISTING,
        description="`existing`: look the cluster up; `create`: build the VPC, cluster, add-ons and CPU nodes.",
    )
    create: CreateClusterConfig | None = Field(default=None, description="With mode `create`: what to build.")
    load_balancer_controller: LoadBalancerControllerMode | None = Field(
        default=None,
        description=(
            "`install`: the program installs the AWS Load Balancer Controller in kube-system with its IAM "
            "policy through Pod Identity; `existing`: the cluster runs one (a prerequisite). Unset: `install` "
            "with mode `create`, `existing` with mode `existing` (a second controller would fight the first)."
        ),
    )


class Subnet(ConfigModel):
    """One private subnet the GPU nodes may be placed in."""

    id: SubnetId | None = Field(
        default=None,
        description=(
            "Subnet id, e.g. `subnet-0123456789abcdef0`; required with cluster mode `existing`, unset with "
            "`create` (the created private subnet of the zone)."
        ),
    )
    availability_zone: AvailabilityZone = Field(
        description="Availability zone of the subnet; capacity blocks need every subnet in one zone."
    )
