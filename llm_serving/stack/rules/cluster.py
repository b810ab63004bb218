"""Rules for `cluster.mode` (pure): what a created cluster needs from its config, what the looked-up
state of the account allows (a name taken by another cluster, a skipped minor), and the order a
control-plane upgrade runs in. rules/__init__.py runs `cluster_rules`; the program runs the others
with what it reads from the account before any resource is registered.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from llm_serving import cluster
from llm_serving.cluster import ClusterMode, NatGateways
from llm_serving.platform import versions
from llm_serving.platform.args import Environment
from llm_serving.platform.problems import Problem
from llm_serving.stack.args import ServingStackArgs
from llm_serving.stack.planning import creates_nodes

C = "cluster.create"
# Tag on the created control plane naming the Pulumi stack that owns it: a cluster of the same name
# without it was not created by this stack, and `create` must not adopt or replace it.
OWNER_TAG = "llm-serving/stack"


def _minor(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def nat_per_zone(config: ServingStackArgs) -> bool:
    assert config.cluster.create is not None
    choice = config.cluster.create.nat_gateways
    if choice is None:
        return config.environment is Environment.PROD
    return choice is NatGateways.PER_ZONE


def network_plan(config: ServingStackArgs) -> cluster.NetworkPlan:
    create = config.cluster.create
    assert create is not None  # guaranteed by cluster_rules
    return cluster.plan_network(create.vpc_cidr, create.zones, nat_per_zone(config))


def cluster_rules(config: ServingStackArgs) -> Iterator[Problem]:
    mode = config.cluster.mode
    create = config.cluster.create
    subnets = config.gpu_node_group.subnets
    if mode is ClusterMode.EXISTING:
        if create is not None:
            yield Problem("cluster.create", "only read with cluster.mode create", "set", "unset, or mode create")
        if not subnets and creates_nodes(config):
            yield Problem("gpuNodeGroup.subnets", "mode existing needs the cluster's private subnets", [],
                          "at least one {id, availabilityZone}")
        for i, subnet in enumerate(subnets):
            if subnet.id is None:
                yield Problem(f"gpuNodeGroup.subnets[{i}].id", "mode existing needs the subnet's id", None,
                              "subnet-...")
        return
    if create is None:
        yield Problem("cluster.create", "mode create needs the VPC to build", None,
                      "{zones: [<zone>, <zone>, <zone>]} (vpcCidr defaults to 10.40.0.0/16)")
        return
    yield from _version_rules(config.cluster.kubernetes_version)
    if len(config.cluster.name) > cluster.MAX_CLUSTER_NAME_LENGTH:
        yield Problem("cluster.name", "too long for the CPU node group's name prefix (`<name>-system-` plus the "
                      "provider's 26-character suffix must fit EKS's 63)", config.cluster.name,
                      f"at most {cluster.MAX_CLUSTER_NAME_LENGTH} characters")
    zones = create.zones
    if len(set(zones)) != len(zones):
        yield Problem(f"{C}.zones", "lists a zone twice", zones, "distinct zones")
    elif not 2 <= len(zones) <= cluster.MAX_ZONES:
        # EKS needs subnets in at least two zones for the control plane's network interfaces.
        yield Problem(f"{C}.zones", f"EKS needs two zones at least; this plan takes {cluster.MAX_ZONES} at most",
                      zones, f"2 to {cluster.MAX_ZONES} zones")
    regions = {z[:-1] for z in zones}
    if len(regions) > 1:
        yield Problem(f"{C}.zones", "zones of more than one region", zones, "zones of the stack's region")
    given = {"vpcCidr": create.vpc_cidr, "serviceCidr": create.service_cidr}
    for key, reason in cluster.cidr_problems(create.vpc_cidr, create.service_cidr):
        yield Problem(f"{C}.{key}", reason, given[key],
                      "a /16 to /20 in 10/8, 172.16/12 or 192.168/16" if key == "vpcCidr"
                      else "a /12 to /24 in a private range, apart from the VPC")
    if config.production_like and "0.0.0.0/0" in create.public_access_cidrs:
        # The API endpoint is public so `pulumi up` can reach it; in staging and prod, only from known networks.
        yield Problem(f"{C}.publicAccessCidrs", f"{config.environment.value} opens the API endpoint to the internet",
                      create.public_access_cidrs, "the CIDRs of your deployers and CI runners")
    nodes = create.system_nodes
    if not nodes.min_nodes <= nodes.desired_nodes <= nodes.max_nodes:
        yield Problem(f"{C}.systemNodes.desiredNodes", "must lie between minNodes and maxNodes", nodes.desired_nodes,
                      f"{nodes.min_nodes} to {nodes.max_nodes}")
    if not subnets:
        yield Problem("gpuNodeGroup.subnets", "name the zones of the GPU nodes", [],
                      "at least one {availabilityZone: <one of cluster.create.zones>}")
    for i, subnet in enumerate(subnets):
        if subnet.id is not None:
            yield Problem(f"gpuNodeGroup.subnets[{i}].id", "mode create makes the subnets; give only the zone",
                          subnet.id, "unset")
        if subnet.availability_zone not in zones:
            yield Problem(f"gpuNodeGroup.subnets[{i}].availabilityZone", "not a zone of the created VPC",
                          subnet.availability_zone, f"one of {', '.join(zones)}")


def _version_rules(minor: str) -> Iterator[Problem]:
    if minor not in versions.EKS_KUBERNETES_VERSIONS:
        yield Problem("cluster.kubernetesVersion", "EKS does not offer this version for a new cluster", minor,
                      ", ".join(versions.EKS_KUBERNETES_VERSIONS))
    elif minor not in cluster.pinned_minors():
        yield Problem("cluster.kubernetesVersion", "no add-on versions are pinned for it "
                      "(llm_serving/platform/versions.py ADDON_VERSIONS)", minor,
                      ", ".join(sorted(cluster.pinned_minors())))


@dataclass(frozen=True)
class FoundCluster:
    """A cluster of the stack's name, as the account reports it."""

    version: str
    owner: str | None  # the OWNER_TAG value, None when untagged


def existing_cluster_problems(config: ServingStackArgs, found: FoundCluster | None, stack: str) -> list[Problem]:
    """Create mode against what the account has: a cluster of another owner is refused; our own may
    move up by one minor at a time (EKS updates one minor per UpdateClusterVersion) and never down."""
    if found is None:
        return []
    name = config.cluster.name
    if found.owner != stack:
        owner = f"stack {found.owner}" if found.owner else "no llm-serving stack"
        return [Problem("cluster.name", f"a cluster of this name exists, created by {owner}; mode create will not "
                        "adopt it", name, "another name, or cluster.mode existing")]
    return upgrade_problems(found.version, config.cluster.kubernetes_version)


def upgrade_problems(current: str, target: str) -> list[Problem]:
    have, want = _minor(current), _minor(target)
    if want < have:
        return [Problem("cluster.kubernetesVersion", f"the cluster runs {current}; EKS cannot downgrade", target,
                        f"{current} or {have[0]}.{have[1] + 1}")]
    if want[1] - have[1] > 1:
        return [Problem("cluster.kubernetesVersion", f"the cluster runs {current}; a control plane moves one minor per "
                        "update, so this would skip a minor", target, f"{have[0]}.{have[1] + 1} first")]
    return []


def upgrade_steps(current: str, target: str) -> list[str]:
    """What `pulumi up` does for a one-minor upgrade, in the order the dependencies enforce."""
    if current == target:
        return []
    addons = cluster.addon_plan(target)
    return [
        f"control plane {current} -> {target} (UpdateClusterVersion, about 10 minutes)",
        "add-ons: " + ", ".join(f"{a.name} {a.version}" for a in addons if a.before_nodes),
        f"CPU system node group to {target}, one node at a time",
        "add-ons: " + ", ".join(f"{a.name} {a.version}" for a in addons if not a.before_nodes),
        f"GPU node group: a new generation at {target} beside the old one, then the old one is drained and deleted",
    ]


def zone_problems(config: ServingStackArgs, region: str, offered: Sequence[str]) -> list[Problem]:
    """The zones against the region the program runs in and the zones the account can use there."""
    create = config.cluster.create
    assert create is not None
    return [
        Problem(f"{C}.zones", f"not an available zone of region {region}", zone, ", ".join(offered))
        for zone in create.zones
        if zone not in offered
    ]
