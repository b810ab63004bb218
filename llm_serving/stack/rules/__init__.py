"""A stack's rules: the relations between its args that their types cannot say, checked before anything is
created (by ServingStack, by a preview and by every command that loads a stack file).

`check(args)` runs every rule, grouped by concern; each returns problems, never raises.
"""

from collections.abc import Callable, Iterator

from llm_serving.platform.problems import Problem
from llm_serving.stack import admission, revisions, timing
from llm_serving.stack.args import ServingStackArgs
from llm_serving.stack.rules import cluster, edge, evals, idle, lora, models, platform, routing

__all__ = ["RULES", "SHAPE_RULES", "check"]

# What every planner reads first (the GPU nodes' shape): while these fail, the other rules are not asked.
SHAPE_RULES: tuple[Callable[[ServingStackArgs], Iterator[Problem]], ...] = (platform.gpu_nodes_rules,)

RULES: tuple[Callable[[ServingStackArgs], Iterator[Problem]], ...] = (
    models.scaling_rules,
    cluster.cluster_rules,
    platform.weights_storage_rules,
    platform.node_autoscaling_rules,
    platform.addon_version_rules,
    models.capacity_rules,
    models.instance_rules,
    models.observability_rules,
    models.models_rules,
    models.kv_offload_rules,
    lora.lora_rules,
    evals.eval_rules,
    edge.edge_rules,
    routing.routing_rules,
    idle.scale_to_zero_rules,
    admission.admission_rules,
    routing.multinode_rules,
    routing.compile_cache_rules,
    timing.timing_rules,
)


def check(args: ServingStackArgs) -> list[Problem]:
    """Every cross-field problem of structurally valid args: the revisions' first, then every rule on the args with
    each second revision a model of its own (revisions.expanded), so the capacity rules count its GPUs."""
    found = list(revisions.revision_rules(args))
    if found:
        return found
    args = revisions.expanded(args)
    shape = [problem for rule in SHAPE_RULES for problem in rule(args)]
    found = shape or [problem for rule in RULES for problem in rule(args)]
    # A second revision's problems under the keys the stack file holds.
    return revisions.as_written(args, found)
