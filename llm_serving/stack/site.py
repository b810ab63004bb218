"""Where a stack lands: its cluster's network facts (looked up by name, or handed over by the program that
created the cluster in the same up) and the CPU nodes its staging Jobs run on.

ServingStack resolves this once, before any child, and every platform part reads it here.
"""

from dataclasses import dataclass

import pulumi

from llm_serving import gpu
from llm_serving.platform import EksCluster
from llm_serving.stack import planning
from llm_serving.stack.args import ServingStackArgs
from llm_serving.stack.rules import cluster as cluster_rules
from llm_serving.storage import StorageBackend


@dataclass(frozen=True)
class StagingNodes:
    """The CPU nodes the staging Jobs run on, as the weights storage admits and authorises them."""

    role_arn: pulumi.Input[str] | None  # the only writer in the file-system policy; None: no policy (dev)
    security_groups: tuple[tuple[str, pulumi.Input[str]], ...]  # (label, id) NFS is admitted from
    node_selector: dict[str, str]


@dataclass(frozen=True)
class Site:
    """The cluster facts the platform parts are built on."""

    vpc_id: pulumi.Input[str]
    cluster_security_group_id: pulumi.Input[str]
    region: pulumi.Input[str]
    # The GPU node group's subnets as (id, zone): the stack file's ids, or the created private subnets.
    subnets: list[tuple[pulumi.Input[str], str]]
    # What identifies created subnets in the node generation before their ids exist: zone=CIDR of each.
    subnet_keys: tuple[str, ...]
    staging: StagingNodes


def resolve(args: ServingStackArgs, looked_up: EksCluster | None, parent: pulumi.Resource | None = None) -> Site:
    """The given facts of a created cluster (`args.cluster_facts`), else those of the cluster looked up by name."""
    facts = args.cluster_facts
    efs = args.weights_storage.efs
    groups: tuple[tuple[str, pulumi.Input[str]], ...] = tuple(
        (f"staging-nodes-{sg}", sg) for sg in efs.staging_node_security_group_ids)
    role: pulumi.Input[str] | None = efs.staging_node_role_arn
    selector = dict(efs.staging_node_selector)
    if facts is not None:
        vpc_id, security_group, region = facts.vpc_id, facts.cluster_security_group_id, facts.region
        subnets = [(facts.gpu_subnet_ids[s.availability_zone], s.availability_zone)
                   for s in args.gpu_node_group.subnets]
        planned = {p.zone: p.cidr for p in cluster_rules.network_plan(args).private} if args.cluster.create else {}
        subnet_keys = tuple(f"{zone}={planned[zone]}" for _, zone in subnets if zone in planned)
        # A created cluster's CPU nodes stand in where the stack file is silent: the only untainted nodes
        # there, where the Jobs land anyway.
        role = role if role is not None else facts.staging_node_role_arn
        if not groups and facts.staging_node_security_group_id is not None:
            groups = (("staging-nodes", facts.staging_node_security_group_id),)
        selector = selector or dict(facts.staging_node_selector)
    else:
        assert looked_up is not None  # ServingStack looks the cluster up when no facts are given
        vpc_id, security_group, region = looked_up.vpc_id, looked_up.cluster_security_group_id, looked_up.region
        subnets = [(s.id, s.availability_zone) for s in args.gpu_node_group.subnets if s.id is not None]
        subnet_keys = ()
    if not groups:
        # Dev only (the rules refuse it elsewhere): the staging nodes are known by no group of their own.
        if args.weights_storage.backend is StorageBackend.EFS:
            pulumi.log.warn("weightsStorage.efs.stagingNodeSecurityGroupIds is empty: the mount targets admit NFS from "
                            "the cluster security group, i.e. from every node", resource=parent)
        groups = (("cluster-security-group", security_group),)
    return Site(vpc_id, security_group, region, subnets, subnet_keys, StagingNodes(role, groups, selector))


@dataclass(frozen=True)
class GpuNodes:
    """What the stack's workloads and add-ons need of the GPU nodes, whether the stack created them or not."""

    node_selector: pulumi.Output[dict[str, str]]
    tolerations: pulumi.Output[list[dict[str, str]]]
    gpus_per_node: pulumi.Output[int]
    max_gpus: pulumi.Output[int]
    # The add-ons' selector and tolerations on existing nodes (None: the created group's own labels).
    addon_node_selector: dict[str, str] | None = None
    addon_tolerations: list[dict[str, str]] | None = None
    # A created group only: what a Deployment waits for, the EFS identity, and the node update's drain barrier.
    node_group_name: pulumi.Output[str] | None = None
    node_role_arn: pulumi.Input[str] | None = None
    security_group_id: pulumi.Input[str] | None = None
    node_group: pulumi.Resource | None = None
    replaced_generation: str | None = None


def created_gpu_nodes(group: gpu.GpuNodeGroup) -> GpuNodes:
    return GpuNodes(group.node_selector, group.tolerations, group.gpus_per_node, group.max_gpus,
                    node_group_name=group.node_group_name, node_role_arn=group.node_role_arn,
                    security_group_id=group.security_group_id, node_group=group.node_group,
                    replaced_generation=group.replaced_generation)


def existing_gpu_nodes(args: ServingStackArgs, gpu_count: int) -> GpuNodes:
    """Existing nodes (gpuNodeGroup.mode existing), chosen by their labels and tolerated by their taints."""
    existing = args.gpu_node_group.existing
    assert existing is not None  # the rules require it with mode existing
    selector = planning.existing_node_selector(args)
    tolerations = [{k: v for k, v in (("key", t.key), ("operator", t.operator.value), ("value", t.value),
                                      ("effect", t.effect.value if t.effect else None)) if v is not None}
                   for t in existing.tolerations] or gpu.gpu_tolerations()
    return GpuNodes(pulumi.Output.from_input(selector), pulumi.Output.from_input(tolerations),
                    pulumi.Output.from_input(gpu_count), pulumi.Output.from_input(gpu_count * existing.max_nodes),
                    addon_node_selector=selector, addon_tolerations=tolerations,
                    node_role_arn=existing.node_role_arn, security_group_id=existing.security_group_id)
