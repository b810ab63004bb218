"""What a diff costs while `pulumi up` runs: the consequence lines the offline diff adds per workload.

From the planner's own timing model (llm_serving.serving rollout planner, llm_serving.stack.planning):
for every changed vLLM Deployment whose pod template changes, how many replicas roll with which
strategy, minutes per replica and in total, the GPUs or node the surge needs, and whether the
longest stream fits the drain; for a node group that is replaced or rolls its nodes, how long the
update takes and how many nodes run beside the old ones (the quota it needs meanwhile).
"""

from __future__ import annotations

import math
from typing import Any

from llm_serving import gpu, serving
from llm_serving.stack import planning
from llm_serving.stack import timing as stack_timing
from stacks.config import ServingStackArgs

DEPLOYMENT = "kubernetes:apps/v1:Deployment"
NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
DRAIN_BARRIER = gpu.drain_barrier_name("")  # every generation's barrier is named with this prefix
POD_TEMPLATE = "inputs.spec.template"
STRATEGY = "inputs.spec.strategy"


def _minutes(seconds: int) -> str:
    return f"{math.ceil(seconds / 60)} min"


def _single_node_footprints(config: ServingStackArgs) -> tuple[list[serving.Footprint], dict[str, Any]]:
    footprints = [planning.footprint(config, m, planning.model_plan(config, m)) for m in config.models]
    return footprints, {m.name: m for m in config.models}


def strategy_lines(config: ServingStackArgs, model_name: str) -> list[str]:
    """Why a model's Deployment strategy changed: the planner's reason, and the models that took its room."""
    strategy = planning.rollout_strategies(config).get(model_name)
    if strategy is None:
        return []
    crowded = planning.rollout_crowded_out(config).get(model_name)
    return [f"rollout strategy: now {serving.describe_strategy(strategy)}: {strategy.reason}",
            *([f"beside the other models: {crowded}"] if crowded else [])]


def rollout_lines(config: ServingStackArgs, model_name: str) -> list[str]:
    """The consequences of a pod-template change of one model's Deployment."""
    footprints, models = _single_node_footprints(config)
    model = models.get(model_name)
    if model is None:
        return []
    footprint = next(f for f in footprints if f.name == model_name)
    strategy = planning.rollout_strategies(config)[model_name]
    timing = planning.timing(config)
    supply = planning.supply(config)
    running = planning.node_counts(config).desired_nodes
    needs_node = serving.rollout_needs_node(footprints, footprint, supply.gpus_per_node, running)
    # One rollout step: a pod-template change may bring a new image or a new compile key, so the step pulls and
    # compiles (serving.rollout_seconds), unlike a replica added to a running node.
    per_replica = serving.rollout_seconds(footprint, serving.Strategy("Recreate"), 1, timing)
    ready = per_replica - timing.image_pull_seconds - footprint.cold_start_seconds  # minReadySeconds
    total = serving.rollout_seconds(footprint, strategy, footprint.min_replicas, timing, needs_node=needs_node)
    replicas = footprint.min_replicas
    lines = [f"rollout: {replicas} replica(s) roll ({serving.describe_strategy(strategy)}), about "
             f"{_minutes(per_replica)} each "
             f"(image pull {timing.image_pull_seconds} s + cold start {footprint.cold_start_seconds} s + "
             f"{ready} s available), about {_minutes(total)} in total"
             + (" (at minReplicas: each replica KEDA runs above it adds a step)"
                if footprint.max_replicas > replicas else "")]
    if strategy.type == "RollingUpdate" and strategy.max_surge:
        gpus = strategy.max_surge * footprint.tensor_parallel_size * footprint.nodes_per_replica
        where = (f"no running node has them, so a new {supply.instance_type} node first "
                 f"(+{_minutes(timing.node_ready_seconds)})" if needs_node
                 else f"they fit on the {running} running node(s)")
        lines.append(f"surge: {gpus} free GPUs for {strategy.max_surge} extra replica(s); {where}")
    # A replaced pod gets SIGTERM; vLLM lets requests run for --shutdown-timeout, then stops them. The
    # stream bound (llm_serving/stack/timing.py) is the longest request the edge admits.
    drains = stack_timing.model_drains(config, model)
    stream, drain = drains.stream_seconds, drains.vllm_shutdown_seconds
    if stream <= drain:
        lines.append(f"streams: every stream the edge admits ({stream} s at most) ends inside the {drain} s drain")
    else:
        lines.append(f"streams: AT RISK: a stream still running {drain} s (--shutdown-timeout) after its pod is "
                     f"replaced is cut; the edge admits streams of up to {stream} s")
    return lines


def outage_lines(config: ServingStackArgs, model_name: str) -> list[str]:
    """A Deployment replaced, not updated: it keeps its name, so pulumi-kubernetes deletes it first and waits for
    its pods to go, then creates the new one: no replica serves from the drain's start to the first cold start's
    end."""
    model = next((m for m in config.models if m.name == model_name), None)
    if model is None:
        return []
    plan = planning.model_plan(config, model)
    timing = planning.timing(config)
    grace = stack_timing.model_drains(config, model).vllm_grace_seconds
    start = timing.image_pull_seconds + plan.cold_start_seconds
    return [f"OUTAGE: deleted before its replacement (same name): every replica drains (up to {grace:,} s), then "
            f"the new ones start cold (image pull {timing.image_pull_seconds} s + cold start "
            f"{plan.cold_start_seconds} s): up to about {_minutes(grace + start)} with no replica serving"]


def node_group_lines(config: ServingStackArgs) -> list[str]:
    """The consequences of a node-group replacement (or a node roll, which this program does as one)."""
    footprints, _ = _single_node_footprints(config)
    strategies = planning.rollout_strategies(config)
    supply = planning.supply(config)
    running = planning.node_counts(config).desired_nodes
    update = serving.node_update(footprints, strategies, supply, running, planning.timing(config),
                                 drain_wait_seconds=stack_timing.node_drain_wait_seconds(config))
    peak = update.extra_nodes_at_peak + running
    return [
        f"node group update: about {_minutes(update.seconds)} ({'; '.join(update.steps)})",
        f"quota: {update.extra_nodes_at_peak} new {supply.instance_type} node(s) beside the {running} old one(s), "
        f"{peak} nodes and {peak * supply.gpus_per_node} GPUs at once until the old group is deleted",
    ]


def for_change(config: ServingStackArgs, change_type: str, name: str, action: str, paths: list[str],
               resource: dict[str, Any] | None) -> list[str]:
    """Consequence lines of one resource change ([] when it costs nothing worth a line)."""
    if change_type == DEPLOYMENT and action == "replace" and name.endswith("-deployment"):
        return outage_lines(config, name.removesuffix("-deployment"))
    if change_type == DEPLOYMENT and action == "update" and name.endswith("-deployment"):
        model = name.removesuffix("-deployment")
        lines = strategy_lines(config, model) if any(p.startswith(STRATEGY) for p in paths) else []
        if any(p.startswith(POD_TEMPLATE) for p in paths):
            lines += rollout_lines(config, model)
        return lines
    if change_type == NODE_GROUP and action == "replace":
        return node_group_lines(config)
    if change_type == DEPLOYMENT and action == "delete" and name.startswith(DRAIN_BARRIER):
        wait = stack_timing.node_drain_wait_seconds(config)
        return [f"drain barrier: deleted before the old node group, its pod takes {wait:,} s to go (the longest vLLM "
                "grace period), so no replaced pod is still draining when EKS terminates the old nodes"]
    return []
