"""A stack's clock: its stream bounds, every drain that follows from them, and the timing rules (pure).

llm_serving/serving/timing.py holds the arithmetic; this reads a stack's config into it. The program
passes exactly these numbers to the components, `checks` refuses a rule that does not hold, and
`plan --stack` prints the same rows, so a preview, a deploy and the docs never disagree.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from llm_serving import serving
from llm_serving.edge import EdgeMode
from llm_serving.platform.problems import Problem
from llm_serving.serving import ModelArgs, RoutingMode
from llm_serving.stack.admission import model_admission
from llm_serving.stack.args import ServingStackArgs
from llm_serving.stack.planning import (
    MAX_SCALE_DOWN_WINDOW_SECONDS,
    NLB_IDLE_SECONDS,
    creates_nodes,
    footprint,
    model_plan,
    replica_add_seconds,
    replica_bounds,
    resolve_instance_type,
    rollout_strategies,
    routing_mode,
    scale_down_window,
    scales_to_zero,
    timing,
    wake,
)
from llm_serving.verification import EVAL_INSTALL_SECONDS


def stream_seconds(model: ModelArgs) -> int:
    """The longest request the edge admits for `model`: configured, or derived from its objectives."""
    if model.route.max_stream_seconds is not None:
        return model.route.max_stream_seconds
    return serving.derived_stream_seconds(model.max_model_len, model.slo.itl_p95_seconds, model.slo.ttft_p95_seconds)


def model_drains(config: ServingStackArgs, model: ModelArgs) -> serving.ModelDrains:
    return serving.model_drains(
        model.name, stream_seconds(model), vllm_shutdown_seconds=model.shutdown_timeout_seconds,
        multinode=model.pipeline_parallel_size > 1,
        routed=routing_mode(config, model) is RoutingMode.INFERENCE_POOL,
    )


def edge_drains(config: ServingStackArgs) -> serving.EdgeDrains:
    """The proxies and load balancer the stack runs: an existing Gateway's (edge.gateway) are its owner's, and
    their drains a prerequisite (stacks/checks/prerequisites.py `gateway`)."""
    mode = config.edge.mode
    own_envoy = mode is EdgeMode.GATEWAY and config.edge.gateway is None
    return serving.edge_drains([stream_seconds(m) for m in config.models], envoy=own_envoy,
                               load_balancer_targets=own_envoy or mode is EdgeMode.ALB)


def progress_deadline_seconds(config: ServingStackArgs, model: ModelArgs) -> int:
    """The Deployment's progressDeadlineSeconds (llm_serving/serving/deployment.py computes it the same way)."""
    t = timing(config)
    return serving.progress_deadline_seconds(model_plan(config, model).startup_budget_seconds,
                                             t.node_ready_seconds + t.image_pull_seconds)


def rollout_steps(config: ServingStackArgs, model: ModelArgs) -> tuple[int, int]:
    """(steps, seconds per step) of a pod-template rollout at the model's most replicas."""
    strategy = rollout_strategies(config)[model.name]
    plan = model_plan(config, model)
    one = serving.rollout_seconds(footprint(config, model, plan), strategy, 1, timing(config))
    if strategy.type == "Recreate":
        return 1, one
    batch = max(strategy.max_surge, strategy.max_unavailable, 1)
    return math.ceil(replica_bounds(model)[1] / batch), one


def group_rollout(config: ServingStackArgs, model: ModelArgs) -> serving.GroupRollout:
    """A multi-node model's LeaderWorkerSet rollout at its most replicas, every drain at its longest, its surge
    groups on new nodes (multinode.rollout_strategy maps a Recreate to every group unavailable at once)."""
    strategy = rollout_strategies(config)[model.name]
    plan = model_plan(config, model)
    groups = replica_bounds(model)[1]
    surge, unavailable = (0, groups) if strategy.type == "Recreate" else (strategy.max_surge, strategy.max_unavailable)
    dynamics = timing(config)
    return serving.group_rollout(
        groups, surge, unavailable, node_ready_seconds=dynamics.node_ready_seconds,
        image_pull_seconds=dynamics.image_pull_seconds,
        cold_start_seconds=footprint(config, model, plan).cold_start_seconds,
        leader_grace_seconds=model_drains(config, model).vllm_grace_seconds)


def group_rollout_timeline(config: ServingStackArgs, model: ModelArgs) -> list[tuple[str, str]]:
    """A multi-node model's rollout minute by minute (the docs print prod-405b's)."""
    return serving.group_rollout_timeline(model.name, group_rollout(config, model),
                                          rollout_await_seconds(config, model))


def rollout_await_seconds(config: ServingStackArgs, model: ModelArgs) -> int:
    """Pulumi's create/update timeout of the model's workload (a Deployment, or a multi-node LeaderWorkerSet)."""
    if model_plan(config, model).pipeline_parallel_size > 1:
        return serving.group_rollout_await_seconds(group_rollout(config, model))
    steps, step = rollout_steps(config, model)
    return serving.rollout_await_seconds(steps, step, progress_deadline_seconds(config, model))


def planned_rollout_seconds(config: ServingStackArgs, model: ModelArgs) -> int:
    """A rollout at the most replicas whose first surge pod waits for a new node."""
    plan = model_plan(config, model)
    return serving.rollout_seconds(footprint(config, model, plan), rollout_strategies(config)[model.name],
                                   replica_bounds(model)[1], timing(config), needs_node=True)


def node_drain_wait_seconds(config: ServingStackArgs) -> int:
    """How long the old generation's drain barrier holds the old node group's deletion: the longest vLLM
    terminationGracePeriodSeconds of any model (llm_serving/gpu/drain.py)."""
    return max(model_drains(config, m).vllm_grace_seconds for m in config.models)


def node_update_steps(config: ServingStackArgs, model: ModelArgs) -> tuple[int, int]:
    """(steps, seconds per step) of the model's roll onto a new node group at its fewest replicas, as
    serving.node_update plans it (each replica more at the time adds its share of a step)."""
    strategy = rollout_strategies(config)[model.name]
    fp = footprint(config, model, model_plan(config, model))
    one = serving.rollout_seconds(fp, strategy, 1, timing(config))
    if strategy.type == "Recreate":
        return 1, one
    return math.ceil(fp.min_replicas / max(strategy.max_surge, strategy.max_unavailable, 1)), one


def node_update_timeline(config: ServingStackArgs) -> list[tuple[str, str]]:
    """The node update of the slowest-rolling single-node model, minute by minute (the docs print prod's)."""
    models = [m for m in config.models if m.pipeline_parallel_size == 1]
    slowest = max(models, key=lambda m: math.prod(node_update_steps(config, m)))
    steps, step = node_update_steps(config, slowest)
    return serving.node_update_timeline(
        timing(config).node_ready_seconds, steps, step, max(stream_seconds(m) for m in config.models),
        model_drains(config, slowest).vllm_grace_seconds, node_drain_wait_seconds(config),
        serving.OLD_GROUP_DELETE_SECONDS)


def lb_idle_seconds(config: ServingStackArgs) -> int | None:
    """The idle timeout of the load balancer in front of the first proxy we run (None: not ours)."""
    if config.edge.mode is EdgeMode.GATEWAY and config.edge.gateway is None:
        return config.edge.load_balancer_idle_timeout_seconds or NLB_IDLE_SECONDS
    return None


def relations(config: ServingStackArgs) -> list[serving.Relation]:
    """Every timing rule of the stack, in path order: per model, then the edge, then the dynamics."""
    rows: list[serving.Relation] = []
    for model in config.models:
        rows += serving.drain_relations(model_drains(config, model))
    rows += serving.edge_relations(edge_drains(config), config.edge.stream_idle_timeout_seconds,
                                   lb_idle_seconds(config))
    for model in config.models:
        rows += dynamics_relations(config, model)
    rows += admission_relations(config)
    if creates_nodes(config):  # existing nodes are updated by their owner, without our drain barrier
        rows.append(serving.node_update_relation(
            node_drain_wait_seconds(config), max(model_drains(config, m).vllm_grace_seconds for m in config.models)))
    return rows


def admission_relations(config: ServingStackArgs) -> list[serving.Relation]:
    """A request held in the picker sends nothing: Envoy's stream idle timeout must not answer before
    the picker's 429 does (it would answer with a bare 504, no Retry-After). A model at zero: the picker holds
    its first requests for the whole wake, so the hold must cover the wake, and Envoy's stream idle timeout (and,
    through the edge relations, the NLB's) must outlast the hold."""
    if not config.edge.inference_routing.overload.flow_control:
        return []
    rows = []
    idle = config.edge.stream_idle_timeout_seconds
    for m in config.models:
        if routing_mode(config, m) is not RoutingMode.INFERENCE_POOL:
            continue
        hold = math.ceil(model_admission(config, m).queue_wait_seconds)
        if scales_to_zero(m):
            rows += [
                serving.Relation(f"{m.name}: picker hold while waking", hold, ">=", wake(config, m).total_seconds,
                                 "planned wake from zero", "the first request after an idle spell gets a 503 "
                                 "before the model is up", "edge.inferenceRouting.overload.queueWaitSeconds"),
                serving.Relation("edge: Envoy stream idle timeout", idle, ">", hold,
                                 f"{m.name}'s picker hold while waking",
                                 "the first request after an idle spell is cut with a 504 while the model wakes",
                                 "edge.streamIdleTimeoutSeconds"),
            ]
        else:
            rows.append(serving.Relation(f"{m.name}: picker queue wait", hold, "<", idle, "Envoy stream idle timeout",
                                         "a request waiting for a replica is cut with a 504 instead of refused with "
                                         "429", "edge.inferenceRouting.overload.queueWaitSeconds"))
    return rows


def dynamics_relations(config: ServingStackArgs, model: ModelArgs) -> list[serving.Relation]:
    m = model.name
    plan = model_plan(config, model)
    rows = [
        serving.Relation(f"{m}: scale-down window", scale_down_window(config, model, plan), ">=",
                         min(replica_add_seconds(config, model, plan), MAX_SCALE_DOWN_WINDOW_SECONDS),
                         "adding a replica (a node, the image pull and the cold start)",
                         "a burst would pay for a replica and lose it before it served",
                         f"models[{m}].autoscaling.scaleDownWindowSeconds"),
    ]
    if plan.pipeline_parallel_size > 1:
        group = group_rollout(config, model)
        rows += [
            serving.Relation(f"{m}: Pulumi rollout await", rollout_await_seconds(config, model), ">=", group.seconds,
                             f"planned group rollout ({group.surge_groups} surge + {group.in_place_steps} in-place "
                             "steps, each drain at its longest)", "a healthy rollout fails the `up`"),
            serving.Relation(f"{m}: leader startup probe budget", plan.startup_budget_seconds, ">=",
                             serving.WORKER_EXIT_SECONDS + footprint(config, model, plan).cold_start_seconds,
                             "the old workers' exit + cold start",
                             "a recreated leader's startup probe runs out while the old ranks still hold the "
                             "group's names, and lws recreates the group again"),
        ]
    else:
        steps, step = rollout_steps(config, model)
        deadline = progress_deadline_seconds(config, model)
        rows += [
            serving.Relation(f"{m}: progressDeadlineSeconds", deadline, ">=", step + timing(config).node_ready_seconds,
                             "one rollout step with a new node", "Kubernetes fails a healthy rollout step"),
            serving.Relation(f"{m}: Pulumi rollout await", rollout_await_seconds(config, model), ">=",
                             planned_rollout_seconds(config, model), f"planned rollout ({steps} steps)",
                             "a healthy rollout fails the `up`"),
            serving.Relation(f"{m}: Pulumi rollout await", rollout_await_seconds(config, model), "<=",
                             (steps - 1) * step + deadline + serving.AWAIT_MARGIN_SECONDS,
                             "planned steps before the last + progress deadline + margin",
                             "a stuck rollout holds the stack lock long after Kubernetes gave up"),
        ]
    return rows


def timing_rules(config: ServingStackArgs) -> Iterator[Problem]:
    """One problem per timing rule that does not hold, naming the key to change where there is one; only
    once every model has a plan and the rollouts fit (the other rules report why not)."""
    try:
        if resolve_instance_type(config) is None:
            return
        rollout_strategies(config)
        for model in config.models:
            model_plan(config, model)
    except (serving.CapacityError, serving.RolloutError):
        return
    for r in serving.timing_problems(relations(config)):
        yield Problem(r.key or r.path, f"{r.path} must be {r.op} {r.right_label} ({r.right_seconds:,} s): {r.why}",
                      r.left_seconds, f"{r.op} {r.right_seconds}")


def producer_timeouts(config: ServingStackArgs, model: ModelArgs) -> serving.ProducerTimeouts:
    """The compile cache's producer Job: one cold start with a compile (the startup budget), after a node
    and an image pull at worst."""
    dynamics = timing(config)
    return serving.producer_timeouts(dynamics.node_ready_seconds + dynamics.image_pull_seconds,
                                     model_plan(config, model).startup_budget_seconds)


# The accuracy gate's clock (llm_serving/stack/evaluation.py). lm-evaluation-harness's default answer budget for a
# generate_until task without `max_gen_toks` (lm_eval/models/api_models.py TemplateAPI `_max_gen_toks = 256` at
# v0.4.13): the longest answer an eval request asks for.
EVAL_MAX_GEN_TOKENS = 256
# The eval's staging Job: a few task files of MBs and a few hundred MB of wheels, from the Hub and PyPI.
EVAL_STAGE_DEADLINE_SECONDS = 1800


def eval_request_seconds(model: ModelArgs) -> float:
    """One eval request at the model's objectives: its first token at the TTFT objective, then the longest answer the
    harness asks for at the ITL objective."""
    return model.slo.ttft_p95_seconds + EVAL_MAX_GEN_TOKENS * model.slo.itl_p95_seconds


def eval_deadline_seconds(model: ModelArgs, waves: int) -> int:
    """The eval Job's activeDeadlineSeconds: the harness's install, then `waves` rounds of requests, each one request
    at the objectives: a revision slower than its objectives fails the deploy gate already, and an eval that
    outlasts this fails instead of holding the up."""
    return EVAL_INSTALL_SECONDS + math.ceil(waves * eval_request_seconds(model))
