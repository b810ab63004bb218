"""Preview-time checks of a stack: the relations between fields that pydantic cannot see, and the
planners' glue that turns a config into capacity plans, bounds and timings (planning.py).

`check(config)` runs every rule, grouped by concern; each returns problems, never raises.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from stacks.checks import admission, cluster, edge, platform, rules, serving, timing
from stacks.checks.edge import ALB_MAX_IDLE_TIMEOUT_SECONDS, NLB_IDLE_SECONDS
from stacks.checks.planning import edge_namespace, edge_timeout_floor, generation_seconds, route_host
from stacks.checks.platform import cluster_version_problem
from stacks.config import ServingStackArgs
from stacks.config.problems import Problem

__all__ = [
    "ALB_MAX_IDLE_TIMEOUT_SECONDS",
    "NLB_IDLE_SECONDS",
    "RULES",
    "check",
    "cluster_version_problem",
    "edge_namespace",
    "edge_timeout_floor",
    "generation_seconds",
    "route_host",
]

RULES: tuple[Callable[[ServingStackArgs], Iterator[Problem]], ...] = (
    rules.scaling_rules,
    cluster.cluster_rules,
    platform.weights_storage_rules,
    platform.node_autoscaling_rules,
    platform.addon_version_rules,
    rules.capacity_rules,
    rules.instance_rules,
    rules.observability_rules,
    rules.models_rules,
    edge.edge_rules,
    serving.routing_rules,
    admission.admission_rules,
    serving.multinode_rules,
    serving.compile_cache_rules,
    timing.timing_rules,
)


def check(config: ServingStackArgs) -> list[Problem]:
    """Every cross-field problem of a structurally valid config."""
    return [problem for rule in RULES for problem in rule(config)]
