"""What a stack says about its EKS cluster: looked up by name, or created with its VPC, add-ons and CPU
nodes (`mode: create`, built by the `Cluster` component). Shapes and ranges only; relations are the
stack's rules (llm_serving.stack.rules)."""

from enum import StrEnum

from pydantic import Field

from llm_serving.platform import versions
from llm_serving.platform.args import (
    AVAILABILITY_ZONE,
    CIDR_BLOCK,
    IAM_ROLE_ARN,
    INSTANCE_TYPE_NAME,
    KUBERNETES_VERSION,
    args_type,
    check_each,
    check_in,
)

# The retention periods CloudWatch Logs accepts that a control plane's logs are kept for here
# (CloudWatch Logs API, PutRetentionPolicy retentionInDays).
LOG_RETENTION_DAYS = (1, 3, 5, 7, 14, 30, 60, 90, 180, 365)


class ControlPlaneLogType(StrEnum):
    """EKS control-plane log types (EKS API, LogSetup types)."""

    API = "api"
    AUDIT = "audit"
    AUTHENTICATOR = "authenticator"
    CONTROLLER_MANAGER = "controllerManager"
    SCHEDULER = "scheduler"


class ClusterMode(StrEnum):
    """Whether the stack attaches to a cluster that exists or builds its own."""

    EXISTING = "existing"
    CREATE = "create"


class NatGateways(StrEnum):
    """NAT gateways of a created VPC: one per zone survives a zone outage; one is a third of the cost."""

    PER_ZONE = "perZone"
    ONE = "one"


@args_type
class SystemNodesArgs:
    """The created cluster's on-demand CPU node group: controllers, pickers, Envoy, the staging Job."""

    instance_type: str = Field(default="m7i.xlarge", **INSTANCE_TYPE_NAME)
    """EC2 instance type (4 vCPU, 16 GiB by default)."""
    min_nodes: int = Field(default=2, ge=2, le=20)
    """Fewest nodes; two, so each of two zones keeps one."""
    max_nodes: int = Field(default=4, ge=2, le=20)
    """Most nodes."""
    desired_nodes: int = Field(default=2, ge=2, le=20)
    """Nodes at creation."""


@args_type
class CreateClusterArgs:
    """What `cluster.mode: create` builds in the stack's region."""

    vpc_cidr: str = Field(default="10.40.0.0/16", **CIDR_BLOCK)
    """VPC CIDR, a /16 to /20 in a private range: three quarters go to the private subnets."""
    service_cidr: str = Field(default="172.20.0.0/16", **CIDR_BLOCK)
    """Kubernetes Service CIDR; must not overlap the VPC."""
    zones: list[str] = Field(min_length=1)
    """Availability zones of the stack's region, two or three: one private and one public subnet each."""
    nat_gateways: NatGateways | None = None
    """`perZone` or `one`; unset: `perZone` in prod, `one` otherwise."""
    admin_role_arns: list[str] = Field(default_factory=list)
    """IAM roles given cluster admin access entries besides the role running `pulumi up`."""
    public_access_cidrs: list[str] = Field(min_length=1)
    """Source CIDRs allowed to reach the public API endpoint (the deployer runs outside the VPC): your deployers' and CI
    runners' egress ranges. Required, no default: EKS's own default is the whole internet (`0.0.0.0/0`), which
    prod and staging refuse and dev must spell out."""
    log_types: list[ControlPlaneLogType] = Field(default_factory=lambda: list(ControlPlaneLogType))
    """Control-plane log types sent to CloudWatch Logs."""
    log_retention_days: int = 30
    """Days CloudWatch keeps the control-plane logs: one of the retention periods CloudWatch Logs offers (1, 3, 5, 7,
    14, 30, 60, 90, 180 or 365 here)."""
    system_nodes: SystemNodesArgs = Field(default_factory=SystemNodesArgs)
    """The CPU node group over every zone."""
    _check_zones = check_each("zones", AVAILABILITY_ZONE)
    _check_admin_role_arns = check_each("admin_role_arns", IAM_ROLE_ARN)
    _check_public_access_cidrs = check_each("public_access_cidrs", CIDR_BLOCK)
    _check_log_retention_days = check_in("log_retention_days", LOG_RETENTION_DAYS)


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


@args_type
class ClusterArgs:
    """The EKS cluster this stack attaches GPU capacity and workloads to, looked up or created."""

    name: str = Field(pattern=r"^[0-9A-Za-z][A-Za-z0-9\-_]{0,99}$")
    """Name of the EKS cluster: looked up with mode `existing`, created with mode `create`."""
    network_policy_enforcement: NetworkPolicyEnforcement = NetworkPolicyEnforcement.VPC_CNI
    """`vpcCni`: a preview refuses the stack unless the `vpc-cni` add-on has `enableNetworkPolicy: "true"` (without it
    every NetworkPolicy here is ignored); `other`: another engine enforces them."""
    kubernetes_version: str = Field(default=versions.DEFAULT_KUBERNETES_VERSION, **KUBERNETES_VERSION)
    """Kubernetes minor version of the cluster, e.g. `1.34`; a preview fails when the looked-up cluster runs another.
    Objects are validated against this version's OpenAPI schema, the node group runs it, and Cluster Autoscaler's
    image follows it. With mode `create`, raising it by one minor upgrades the control plane, then the add-ons, then
    the node groups."""
    mode: ClusterMode = ClusterMode.EXISTING
    """`existing`: look the cluster up; `create`: build the VPC, cluster, add-ons and CPU nodes."""
    create: CreateClusterArgs | None = None
    """With mode `create`: what to build."""
    load_balancer_controller: LoadBalancerControllerMode | None = None
    """`install`: the program installs the AWS Load Balancer Controller in kube-system with its IAM policy through Pod
    Identity; `existing`: the cluster runs one (a prerequisite). Unset: `install` with mode `create`, `existing`
    with mode `existing` (a second controller would fight the first)."""
