"""The user-facing alerts against a simulated prod rollout: a normal rollout pages nobody, an outage does.

The rules are prod's rendered ones (the edge's availability and TTFT burn rates, the pickers'
disruption-budget, restart and up alerts), walked at Prometheus' 15 s evaluation step through
tests/support/promql_eval.py. The series: six hours of steady traffic, then prod's rollout as the timing
module plans it (a picker rollout, then two vLLM replicas replaced one at a time, ROLLOUT_STEP a step), with the
handful of 503s a replica swap can cost when a request races its endpoint's removal, and the slower first
tokens while a new picker rebuilds its prefix index and a new replica's prefix cache is empty.

The TTFT shares are modelled, not measured: 1 % of streamed requests above the 2 s objective in steady
state, 10 % for two minutes after the picker rollout, 25 % for three minutes after each replica swap.
"""

from __future__ import annotations

from typing import Any

import pytest

from llm_serving.edge.alerts import ENVOY_METRIC_TYPES
from llm_serving.routing.alerts import PICKER_KUBE_STATE_METRICS
from llm_serving.routing.metrics import PICKER_TTFT_BUCKETS
from llm_serving.stack import planning, timing
from stacks.config.files import PROJECT_DIR
from stacks.environment import load_stack_file
from tests.support import promql
from tests.support.promql_eval import Store, firing

STEP = 15
# Prod's planned figures: one rollout step (a replica swapped) and adding a replica on a new node.
_PROD = load_stack_file(PROJECT_DIR / "Pulumi.prod.yaml")[1]
_MODEL = _PROD.models[0]
ROLLOUT_STEP = timing.rollout_steps(_PROD, _MODEL)[1]
SCALE_OUT = planning.replica_add_seconds(_PROD, _MODEL, planning.model_plan(_PROD, _MODEL))
SWAPS = (ROLLOUT_STEP, 2 * ROLLOUT_STEP)
HISTORY = 6 * 3600  # the slow burn's long window is full before the rollout starts
END = 3 * 3600
EDGE_JOB = "envoy-gateway-system/llm-serving-envoy"
PICKER_JOB = "llm-serving/llama-70b-epp"
RPS = 22  # two prod replicas at about 11 requests/s each
STREAMED_PER_POD = RPS / 2 * 0.9  # nine in ten requests stream, spread over two pickers


def _rules(rendered) -> dict[str, dict[str, Any]]:
    rules = {}
    for manifest in rendered["prod"].manifests:
        if manifest["kind"] == "PrometheusRule" and manifest["metadata"]["name"] in ("edge-alerts",
                                                                                      "endpoint-picker-alerts"):
            for group in manifest["spec"]["groups"]:
                rules.update({r["alert"]: r for r in group["rules"]})
    return rules


def _counter(rate_at, start: int = -HISTORY, end: int = END) -> list[tuple[float, float]]:
    total, samples = 0.0, []
    for t in range(start, end + 1, STEP):
        total += rate_at(t) * STEP
        samples.append((float(t), total))
    return samples


def _gauge(value_at, start: int = -HISTORY, end: int = END) -> list[tuple[float, float]]:
    return [(float(t), float(value_at(t))) for t in range(start, end + 1, STEP)]


def _steady_ttft(t: int) -> float:
    return 0.01


def _rollout_ttft(t: int) -> float:
    """Share of streamed requests whose first token took longer than the 2 s objective."""
    if 0 <= t < 120:  # the new pickers start with an empty prefix index: some prompts miss their replica
        return 0.10
    if any(swap <= t < swap + 180 for swap in SWAPS):  # a new replica's prefix cache is empty
        return 0.25
    return 0.01


def _add_ttft(store: Store, slow_share_at) -> None:
    """The pickers' TTFT histograms, as Prometheus 3 stores them (le="2.0"): streamed requests split at the
    objective by `slow_share_at`, and non-streamed ones, whose TTFT is the whole answer (all slower)."""
    for pod in ("llama-70b-epp-6d9f7c-abcde", "llama-70b-epp-6d9f7c-fghij"):
        labels = {"job": PICKER_JOB, "namespace": "llm-serving", "pod": pod, "model_name": "llama-70b",
                  "target_model_name": "llama-70b", "fairness_id": "", "priority": ""}
        stream = {**labels, "streaming": "true"}
        store.add("llm_d_epp_request_ttft_seconds_count", stream, _counter(lambda t: STREAMED_PER_POD))
        store.add("llm_d_epp_request_ttft_seconds_bucket", {**stream, "le": "2.0"},
                  _counter(lambda t: STREAMED_PER_POD * (1 - slow_share_at(t))))
        store.add("llm_d_epp_request_ttft_seconds_bucket", {**stream, "le": "+Inf"},
                  _counter(lambda t: STREAMED_PER_POD))
        whole = {**labels, "streaming": "false"}
        store.add("llm_d_epp_request_ttft_seconds_count", whole, _counter(lambda t: RPS / 2 * 0.1))
        store.add("llm_d_epp_request_ttft_seconds_bucket", {**whole, "le": "2.0"}, _counter(lambda t: 0))


def _store(errors_at, picker_healthy_at, restarts_at, slow_ttft_at=_steady_ttft) -> Store:
    store = Store()
    _add_ttft(store, slow_ttft_at)
    for pod in ("envoy-a", "envoy-b"):
        labels = {"job": EDGE_JOB, "pod": pod, "envoy_http_conn_manager_prefix": "https-443"}
        store.add("envoy_http_downstream_rq_total", labels, _counter(lambda t: RPS / 2))
        store.add("envoy_http_downstream_rq_xx", {**labels, "envoy_response_code_class": "5"},
                  _counter(lambda t: errors_at(t) / 2))
        store.add("envoy_http_downstream_rq_xx", {**labels, "envoy_response_code_class": "2"},
                  _counter(lambda t: RPS / 2 - errors_at(t) / 2))
        store.add("envoy_http_downstream_rq_tx_reset", labels, _counter(lambda t: 0))
    pdb = {"namespace": "llm-serving", "poddisruptionbudget": "llama-70b-epp"}
    store.add("kube_poddisruptionbudget_status_current_healthy", pdb, _gauge(picker_healthy_at))
    store.add("kube_poddisruptionbudget_status_desired_healthy", pdb, _gauge(lambda t: 1))
    for pod in ("llama-70b-epp-6d9f7c-abcde", "llama-70b-epp-6d9f7c-fghij"):
        store.add("kube_pod_container_status_restarts_total", {"namespace": "llm-serving", "pod": pod},
                  _gauge(restarts_at if pod.endswith("abcde") else (lambda t: 0)))
        store.add("up", {"job": PICKER_JOB, "pod": pod}, _gauge(lambda t: 1))
    return store


def _rollout_errors(t: int) -> float:
    # Three 503s in the 15 s around each replica swap (one and two rollout steps into the rollout).
    return 3 / STEP if t in SWAPS else 0.0


def _surge_then_back(t: int) -> int:
    # The picker rollout surges a third picker (maxUnavailable 0), then the old one leaves.
    return 3 if 0 <= t < 60 else 2


def test_the_walked_rules_use_only_series_the_store_models(rendered):
    rules = _rules(rendered)
    assert sorted(rules) == ["EdgeErrorBudgetBurnFast", "EdgeErrorBudgetBurnSlow", "EdgeTtftBudgetBurnFast",
                             "EdgeTtftBudgetBurnSlow",
                             "EndpointPickerBelowDisruptionBudget", "EndpointPickerDegraded", "EndpointPickerDown",
                             "EndpointPickerErrors", "EndpointPickerMetricsStale", "EndpointPickerRestarting",
                             "EndpointPickerSaturated", "InferencePoolNoReadyEndpoints", "ModelShedding"]
    # ModelShedding and EndpointPickerMetricsStale are walked in tests/components/routing/test_admission.py.
    walked = set(ENVOY_METRIC_TYPES) | PICKER_KUBE_STATE_METRICS | {"up"} | {
        "llm_d_epp_request_ttft_seconds_count", "llm_d_epp_request_ttft_seconds_bucket"}
    for name in WALKED:
        assert promql.metric_names(rules[name]["expr"]) <= walked, name


WALKED = ("EdgeErrorBudgetBurnFast", "EdgeErrorBudgetBurnSlow", "EdgeTtftBudgetBurnFast", "EdgeTtftBudgetBurnSlow",
          "EndpointPickerBelowDisruptionBudget", "EndpointPickerRestarting", "EndpointPickerDown",
          "EndpointPickerDegraded")


@pytest.fixture(scope="module")
def rollout_store() -> Store:
    return _store(_rollout_errors, _surge_then_back, lambda t: 0, _rollout_ttft)


@pytest.mark.parametrize("alert", WALKED)
def test_a_normal_prod_rollout_fires_no_alert(rendered, rollout_store, alert):
    assert firing(_rules(rendered)[alert], rollout_store, 0, END, STEP) == []


def test_the_ttft_rules_hold_prod_to_its_own_objective_at_a_bucket_boundary(rendered):
    rules = _rules(rendered)
    # prod's slo.ttftP95Seconds is 2 s, a boundary of the picker's TTFT histogram (llm-d-router v0.10.0).
    assert 2 in PICKER_TTFT_BUCKETS
    for name, threshold, windows in (("EdgeTtftBudgetBurnFast", "0.72", ("1h", "5m")),
                                     ("EdgeTtftBudgetBurnSlow", "0.3", ("6h", "30m"))):
        expr = rules[name]["expr"]
        assert expr.count(f"> {threshold}") == 2 and rules[name]["for"] == "2m"
        assert all(expr.count(f"[{w}]") == 3 for w in windows)
        assert expr.count('le=~"2(\\\\.0)?"') == 2 and expr.count('streaming="true"') == 6
        assert promql.counter_function_errors(expr, {n: "counter" for n in promql.metric_names(expr)}) == []
    assert rules["EdgeTtftBudgetBurnFast"]["labels"] == {"severity": "critical", "model": "llama-70b",
                                                         "namespace": "llm-serving"}


def test_a_scale_out_that_catches_up_in_the_planned_time_pages_nobody(rendered):
    # A surge: nine in ten streams wait over 2 s until KEDA's new replica is ready, as long after as the
    # planner gives adding one on a new node: the node (300 s), the image pull (300 s), the cold start with its
    # torch.compile loaded from the shared cache, and minReadySeconds (30 s). A rollout step has the image pull,
    # the whole cold start and minReadySeconds.
    plan = planning.model_plan(_PROD, _MODEL)
    assert ROLLOUT_STEP == 300 + plan.cold_start_seconds + 30
    assert SCALE_OUT == 300 + 300 + plan.cold_start_seconds - plan.compile_seconds + plan.compile_cached_seconds + 30
    store = _store(lambda t: 0, lambda t: 2, lambda t: 0, lambda t: 0.9 if 600 <= t < 600 + SCALE_OUT else 0.01)
    rules = _rules(rendered)
    assert firing(rules["EdgeTtftBudgetBurnFast"], store, 0, END, STEP) == []
    assert firing(rules["EdgeTtftBudgetBurnSlow"], store, 0, END, STEP) == []


def test_an_overloaded_pool_burns_the_ttft_budget_and_pages(rendered):
    # From 600 s the pool is saturated at its maximum replicas: 95 % of streams wait over 2 s.
    store = _store(lambda t: 0, lambda t: 2, lambda t: 0, lambda t: 0.95 if t >= 600 else 0.01)
    rules = _rules(rendered)
    fast = firing(rules["EdgeTtftBudgetBurnFast"], store, 0, END, STEP)
    # The hour's slow share passes 72 % (14.4 x the 5 % budget) after 45 minutes, then for: 2m.
    assert 600 + 45 * 60 + 120 <= fast[0] <= 600 + 46 * 60 + 120
    slow = firing(rules["EdgeTtftBudgetBurnSlow"], store, 0, END, STEP)
    # Six hours' share passes 30 % (6 x the budget) after 111 minutes, then for: 2m.
    assert 600 + 110 * 60 + 120 <= slow[0] <= 600 + 112 * 60 + 120


def test_a_crash_looping_picker_pages_within_minutes(rendered):
    # From 600 s the picker restarts every 2 minutes and half the requests get a 500 for 15 minutes.
    def errors(t: int) -> float:
        return 0.5 * RPS if 600 <= t < 1500 else 0.0

    def healthy(t: int) -> int:  # one picker crash-loops; for three minutes the other is out too
        return 2 if not 600 <= t < 1500 else 0 if 900 <= t < 1080 else 1

    store = _store(errors, healthy,
                   lambda t: max(0, (t - 600) // 120 + 1) if t < 1500 else 8)
    rules = _rules(rendered)
    fast = firing(rules["EdgeErrorBudgetBurnFast"], store, 0, END, STEP)
    # The hour's ratio passes 7.2 % (14.4 x the 0.5 % budget) after about 8.5 minutes of errors, then for: 2m.
    assert fast and 600 + 10 * 60 <= fast[0] <= 600 + 11 * 60
    assert rules["EdgeErrorBudgetBurnFast"]["labels"]["severity"] == "critical"
    below = firing(rules["EndpointPickerBelowDisruptionBudget"], store, 0, END, STEP)
    assert below == list(range(900 + 120, 1080, STEP))  # below the PDB's floor of 1 for 2 minutes
    assert firing(rules["EndpointPickerRestarting"], store, 0, END, STEP)[0] == 600  # the first restart
    # The short window stops the page soon after the errors stop.
    assert max(fast) < 1500 + 5 * 60
