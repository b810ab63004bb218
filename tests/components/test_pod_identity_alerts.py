"""PodIdentityPodsRefused: an admission guard that keeps refusing pods pages, the seconds of refusals while a new
association comes into effect do not (llm_serving/platform/pod_identity.py).

The rule is walked over the API server's own counter as its controllers would drive it: each refused create of a
ReplicaSet (or StatefulSet) is retried after 5 ms, doubling to 1000 s (client-go util/workqueue/
default_rate_limiters.go, DefaultControllerRateLimiter), a Job's after 1 s, doubling to 60 s (pkg/controller/job/
job_controller.go); the refusals land on either of two API servers, each its own series, scraped every 30 s.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from llm_serving.platform.pod_identity import (
    ADMISSION_CHECKS_METRIC,
    REFUSED_ALERT,
    guard_name,
    refusal_alert_groups,
    refusals,
)
from stacks.config.files import PROJECT_DIR
from tests.conftest import STACK_FILES, render_file
from tests.support import promql, reference
from tests.support.admission import BINDING
from tests.support.promql_eval import Store, evaluate, firing

SCRAPE_SECONDS = 30
HOURS = 3 * 3600
(GROUP,) = refusal_alert_groups("https://runbooks.example.com/llm-serving")
(RULE,) = GROUP["rules"]
STACKS = [*STACK_FILES, *(PROJECT_DIR / "examples" / f"Pulumi.{name}.yaml" for name in ("prod-s3", "sandbox"))]


def retries(start: float, first: float, cap: float, until: float) -> Iterator[float]:
    """When a controller's creates are refused, from `start` to `until`: its next attempt after `first` seconds,
    the pause doubling up to `cap`."""
    t, pause = start, first
    while t <= until:
        yield t
        t, pause = t + pause, min(pause * 2, cap)


def replica_set(start: float, until: float) -> list[float]:
    return list(retries(start, 0.005, 1000, until))


def job(start: float, until: float) -> list[float]:
    return list(retries(start, 1, 60, until))


def scraped(store: Store, policy: str, refused: list[float], servers: int = 2) -> None:
    """The counters of `servers` API servers, refusals dealt between them in turn, as Prometheus scrapes them: a
    series exists from its first refusal on (it starts at 1)."""
    for server in range(servers):
        mine = refused[server::servers]
        if not mine:
            continue
        samples = []
        t = (mine[0] // SCRAPE_SECONDS + 1) * SCRAPE_SECONDS
        while t <= HOURS:
            samples.append((t, float(sum(1 for r in mine if r <= t))))
            t += SCRAPE_SECONDS
        store.add(ADMISSION_CHECKS_METRIC, {"policy": policy, "policy_binding": policy, "error_type": "no_error",
                                            "enforcement_action": "deny", "instance": f"10.0.0.{server}:443"},
                  samples)


def fired(store: Store) -> list[float]:
    return firing(RULE, store, 0, HOURS, step=SCRAPE_SECONDS)


AUTOSCALER = guard_name("kube-system", "cluster-autoscaler")
STAGING = guard_name("llm-serving", "llama-70b-stage")


@pytest.mark.parametrize("controller", [replica_set, job], ids=["replicaset", "job"])
def test_a_workload_refused_for_good_pages_about_half_an_hour_in_and_stays_paged(controller):
    store = Store()
    scraped(store, AUTOSCALER, controller(0, HOURS))
    times = fired(store)
    # Pending from the second scrape that sees a refusal, then `for: 30m`; the longest pause between two refusals
    # (1000 s) is shorter than the window, so it never resolves while the refusals go on.
    assert 30 * 60 <= times[0] <= 33 * 60
    assert times == [t for t in range(int(times[0]), HOURS + 1, SCRAPE_SECONDS)]
    assert set(evaluate(RULE["expr"], store, HOURS)) == {(("policy", AUTOSCALER),)}


def test_the_seconds_a_new_association_takes_never_page_even_for_several_guards_in_turn():
    # Each guard refuses its workload's first pods for half a minute (an association "may take several seconds to be
    # effective"), across a scrape so that Prometheus sees them: the autoscaler's at the first up, a model's staging
    # Job's a quarter of an hour later. Summed together their refusals would keep the expression true for 35
    # minutes and page; per guard each holds it for its window only.
    store = Store()
    scraped(store, AUTOSCALER, replica_set(25, 55))
    scraped(store, STAGING, job(15 * 60 + 25, 15 * 60 + 55))
    assert fired(store) == []
    # Both bursts were seen: only `for`, per guard, keeps them from paging.
    assert set(evaluate(RULE["expr"], store, 10 * 60)) == {(("policy", AUTOSCALER),)}
    assert set(evaluate(RULE["expr"], store, 20 * 60)) == {(("policy", AUTOSCALER),), (("policy", STAGING),)}


def test_only_the_guards_denials_are_counted():
    store = Store()
    for policy, action in ((AUTOSCALER, "deny"), (AUTOSCALER, "warn"), ("pod-identity-like", "deny"),
                           ("team.policy", "deny")):
        store.add(ADMISSION_CHECKS_METRIC, {"policy": policy, "enforcement_action": action},
                  [(0, 1), (600, 5)])
    assert evaluate(refusals(), store, 600) == {(("policy", AUTOSCALER),): 4}


@pytest.fixture(scope="module", params=STACKS, ids=lambda p: p.name.removeprefix("Pulumi.").removesuffix(".yaml"))
def render(request):
    return render_file(request.param)


def test_every_stack_alerts_on_each_of_its_guards_from_a_rule_its_prometheus_selects(render):
    rule = render.manifest("PrometheusRule", "pod-identity-alerts")
    assert reference.custom_resource_errors(rule) == []
    (group,) = rule["spec"]["groups"]
    (alert,) = group["rules"]
    assert (alert["alert"], alert["labels"]["severity"]) == (REFUSED_ALERT, "critical")
    assert promql.parse_errors(alert["expr"]) == []
    assert promql.metric_names(alert["expr"]) == {ADMISSION_CHECKS_METRIC}
    assert promql.counter_function_errors(alert["expr"], {ADMISSION_CHECKS_METRIC: "counter"}) == []
    # The labels an existing Prometheus selects rules by (observability.prometheus.monitorSelectorLabels), as the
    # serving rules carry them.
    selected_by = render.manifest("PrometheusRule", "vllm-serving")["metadata"]["labels"]
    assert selected_by.items() <= rule["metadata"]["labels"].items()
    # Every guard the stack creates is one the expression reads.
    policies = [r["inputs"]["spec"]["policyName"] for r in render.resources if r["type"].endswith(f":{BINDING}")]
    assert policies, f"{render.stack} has no guard"
    store = Store()
    for policy in policies:
        store.add(ADMISSION_CHECKS_METRIC, {"policy": policy, "enforcement_action": "deny"}, [(0, 1), (600, 2)])
    assert {labels[0][1] for labels in evaluate(alert["expr"], store, 600)} == set(policies)
