"""Each routed model's time to first token at the edge: the picker's histogram as llm-d-router v0.10.0
registers it (the cited fixture tests/fixtures/upstream/llm-d-router-v0.10.0-metrics.json), the bucket the
objective is read at, and the burn-rate windows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llm_serving.routing import PICKER_METRIC_TYPES, RoutedModel, picker_alert_groups
from llm_serving.routing.alerts import slow_ttft_ratio, ttft_boundary
from llm_serving.routing.metrics import PICKER_TTFT_BUCKETS
from tests.support import promql
from tests.support.promql_eval import Store, evaluate

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "upstream" / "llm-d-router-v0.10.0-metrics.json"
UPSTREAM = json.loads(FIXTURE.read_text(encoding="utf-8"))["metrics"]
MODEL = RoutedModel("llama-70b", "llm-serving", {}, 8000, 1639, ttft_objective_seconds=2.0)


def test_every_picker_series_the_stack_reads_is_one_llm_d_router_registers_with_its_labels():
    assert set(PICKER_METRIC_TYPES) <= set(UPSTREAM)
    for name, (kind, labels) in PICKER_METRIC_TYPES.items():
        assert (kind, labels) == (UPSTREAM[name]["type"], frozenset(UPSTREAM[name]["labels"])), name


def test_the_ttft_buckets_are_the_pickers_own():
    assert list(PICKER_TTFT_BUCKETS) == UPSTREAM["llm_d_epp_request_ttft_seconds"]["buckets"]


@pytest.mark.parametrize(("objective", "boundary"), [(2.0, 2), (2.4, 2), (1.3, 1.25), (120, 120), (600, 120),
                                                      (0.005, 0.005)])
def test_the_objective_is_read_at_the_largest_boundary_not_above_it(objective, boundary):
    assert ttft_boundary(objective) == boundary


def test_an_objective_below_the_smallest_bucket_is_refused():
    with pytest.raises(ValueError, match=r"ttft objective 0.001 s is below the picker's smallest TTFT bucket"):
        ttft_boundary(0.001)


def test_the_ttft_rules_read_only_the_pickers_histogram_of_streamed_requests():
    (_, ttft) = picker_alert_groups((MODEL,), 2, "https://r.example.com/x")
    series = {f"llm_d_epp_request_ttft_seconds{s}" for s in ("_bucket", "_count")}
    for rule in ttft["rules"]:
        assert promql.parse_errors(rule["expr"]) == []
        assert promql.metric_names(rule["expr"]) == series
        labels = promql.label_matchers(rule["expr"])
        assert labels["llm_d_epp_request_ttft_seconds_count"] == {"job", "streaming"}
        assert labels["llm_d_epp_request_ttft_seconds_bucket"] == {"job", "streaming", "le"}
        assert labels["llm_d_epp_request_ttft_seconds_bucket"] <= set(UPSTREAM["llm_d_epp_request_ttft_seconds"]
                                                                       ["labels"]) | {"job", "le"}
    assert [r["alert"] for r in ttft["rules"]] == ["EdgeTtftBudgetBurnFast", "EdgeTtftBudgetBurnSlow"]


def test_a_model_without_an_objective_gets_no_ttft_rules():
    plain = RoutedModel("llama-70b", "llm-serving", {}, 8000, 1639)
    assert [g["name"] for g in picker_alert_groups((plain,), 2, "https://r.example.com/x")] == [
        "endpoint-picker-llama-70b"]


@pytest.mark.parametrize("le", ["2", "2.0"])
def test_the_slow_share_counts_the_bucket_whichever_way_prometheus_spells_its_bound(le):
    # client_golang exposes le="2"; Prometheus 3 stores it as le="2.0".
    store, labels = Store(), {"job": "llm-serving/llama-70b-epp", "streaming": "true"}
    store.add("llm_d_epp_request_ttft_seconds_count", labels, [(10, 0), (300, 100)])
    store.add("llm_d_epp_request_ttft_seconds_bucket", {**labels, "le": le}, [(10, 0), (300, 90)])
    store.add("llm_d_epp_request_ttft_seconds_bucket", {**labels, "le": "20"}, [(10, 0), (300, 100)])
    ratio = evaluate(slow_ttft_ratio("llm-serving/llama-70b-epp", 2, "5m"), store, 300)
    assert ratio == {(): pytest.approx(0.1)}


def test_a_fractional_boundary_is_matched_exactly():
    assert 'le="1.25"' in slow_ttft_ratio("llm-serving/llama-70b-epp", 1.25, "5m")
