"""Generated figures of the edge TTFT alerts' runbook sections (docs/runbooks.md): their thresholds and
how long a fully slow edge takes to fire them, read from the burn rates and the objective the rules use
(llm_serving/platform/prometheus.py BURN_RATES, llm_serving/routing/alerts.py TTFT_OBJECTIVE_SHARE)."""

from __future__ import annotations

from collections.abc import Callable

from llm_serving.platform import BURN_FOR_MINUTES, BURN_RATES
from llm_serving.routing import TTFT_OBJECTIVE_SHARE
from tools.doc_facts import Facts

_UNIT_MINUTES = {"m": 1, "h": 60}


def _window_minutes(window: str) -> int:
    return int(window[:-1]) * _UNIT_MINUTES[window[-1]]


def _threshold(name: str) -> float:
    (burn,) = [b for b in BURN_RATES if b.name == name]
    return burn.rate * (1 - TTFT_OBJECTIVE_SHARE)


def _share(name: str) -> str:
    return f"{round(_threshold(name) * 100)} %"


def _time_to_fire(name: str) -> str:
    """At 100 % slow from a clean start: the long window's share reaches the threshold after threshold x
    window minutes (the short window is past it long before), then the rule's `for:`."""
    (burn,) = [b for b in BURN_RATES if b.name == name]
    crossing = round(_threshold(name) * _window_minutes(burn.long_window))
    total = crossing + BURN_FOR_MINUTES
    hours, minutes = divmod(total, 60)
    spoken = f"{hours} hour{'s' if hours > 1 else ''} {minutes} minutes" if hours else f"{minutes} minutes"
    return (f"about {spoken} ({crossing} minutes for the last {burn.long_window} to pass {_share(name)}, then "
            f"`for: {BURN_FOR_MINUTES}m`)")


def prod_replica_add_new_node(facts: Facts) -> str:
    return f"{facts.stack_plan()['dynamics']['replica_add_seconds_new_node']:,} s"


GENERATORS: dict[str, Callable[[Facts], str]] = {
    "edge-ttft-fast-share": lambda facts: _share("Fast"),
    "edge-ttft-slow-share": lambda facts: _share("Slow"),
    "edge-ttft-fast-fires": lambda facts: _time_to_fire("Fast"),
    "edge-ttft-slow-fires": lambda facts: _time_to_fire("Slow"),
    "prod-replica-add-new-node": prod_replica_add_new_node,
}
