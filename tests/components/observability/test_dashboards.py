"""Tests for llm_serving/observability/dashboards.py, and one walk over every PromQL expression
the serving modules emit.

Dashboards must be valid JSON with unique panel ids and a query on every panel; their ConfigMaps must
carry the Grafana sidecar's label. Every trigger, adapter series query, alert and panel must parse
and name only vLLM 0.33.0 series, DCGM fields our counters file exports, or kube-state-metrics series.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import re
from pathlib import Path

import pytest

from llm_serving.edge import ENVOY_METRIC_TYPES
from llm_serving.gpu.counters import COUNTERS, exported_metric_names
from llm_serving.observability import dashboards
from llm_serving.observability.dashboards import dashboard_configmap, gpu_dashboard, panel_queries, serving_dashboard
from llm_serving.observability.serving_alerts import (
    CONTAINER_METRICS,
    KUBE_STATE_METRICS,
    ModelSlo,
    serving_rule_groups,
)
from llm_serving.routing import PICKER_METRIC_TYPES, Admission, RoutedModel, picker_alert_groups
from llm_serving.routing.alerts import PICKER_KUBE_STATE_METRICS
from llm_serving.scaling.objects import kv_query, prometheus_adapter_values, queue_query, scaled_object
from tests.components.scaling.test_objects import PROD
from tests.support import promql
from tests.support.reference import (
    helm_value_errors,
    kubernetes_object_errors,
    vllm_metric_labels,
    vllm_metrics,
    vllm_series_names,
)

GPU_METRICS = exported_metric_names()
DASHBOARDS = {"serving": serving_dashboard(), "gpu": gpu_dashboard(GPU_METRICS)}
EXPORTED_DCGM = {c.field: c.prom_type for c in COUNTERS if c.prom_type != "label"}
# Labels that Prometheus target labels add to vLLM series (PodMonitor: namespace, pod; our relabel: node).
TARGET_LABELS = {"namespace", "pod", "node"}
KSM_LABELS = {
    "kube_deployment_spec_replicas": {"namespace", "deployment"},
    "kube_deployment_status_replicas": {"namespace", "deployment"},
    "kube_deployment_status_replicas_available": {"namespace", "deployment"},
    "kube_pod_container_status_restarts_total": {"namespace", "pod", "container", "uid"},
    "kube_pod_status_ready": {"namespace", "pod", "uid", "condition"},
    # docs/metrics/workload/pod-metrics.md (STABLE): one series per container and resource, with its unit.
    "kube_pod_container_resource_limits": {"namespace", "pod", "container", "node", "resource", "unit", "uid"},
    # docs/metrics/policy/poddisruptionbudget-metrics.md (STABLE): the PDB's namespace and name.
    "kube_poddisruptionbudget_status_current_healthy": {"namespace", "poddisruptionbudget"},
    "kube_poddisruptionbudget_status_desired_healthy": {"namespace", "poddisruptionbudget"},
}
# Envoy's HTTP connection manager statistics as /stats/prometheus tags them (the listener's stat prefix,
# the response code class) and the PodMonitor's job.
ENVOY_LABELS = {"envoy_http_conn_manager_prefix", "envoy_response_code_class", "job"}
# Labels on DCGM series: the exporter's per-GPU labels (render_metrics.go), `xid` on the windowed
# Xid count, and `node` from our ServiceMonitor relabeling.
DCGM_LABELS = {"gpu", "UUID", "Hostname", "modelName", "xid", "window_size_in_ms", "node"}


def _panels(dashboard: dict) -> list[dict]:
    found: list[dict] = []
    for panel in dashboard["panels"]:
        found.append(panel)
        found.extend(panel.get("panels", []))
    return found


def _as_promql(expr: str) -> str:
    return promql.expand_grafana_macros(expr)


def _variable_selector(definition: str) -> str:
    """The series selector inside a Grafana `label_values(<selector>, <label>)` variable query."""
    match = re.fullmatch(r"label_values\((.+), *([A-Za-z_][A-Za-z0-9_]*)\)", definition)
    assert match, definition
    return match.group(1)


@pytest.mark.parametrize("name", DASHBOARDS)
def test_dashboard_is_json_with_the_expected_header(name: str) -> None:
    dashboard = DASHBOARDS[name]
    assert json.loads(json.dumps(dashboard)) == dashboard
    assert dashboard["schemaVersion"] == 39
    assert dashboard["uid"] == f"llm-serving-{'vllm' if name == 'serving' else 'gpu'}"
    assert dashboard["title"].startswith("LLM serving / ")
    assert dashboard["editable"] is False


@pytest.mark.parametrize("name", DASHBOARDS)
def test_panel_ids_are_unique_and_every_panel_has_a_query(name: str) -> None:
    panels = _panels(DASHBOARDS[name])
    ids = [panel["id"] for panel in panels]
    assert len(ids) == len(set(ids))
    for panel in panels:
        targets = panel["targets"]
        assert targets and all(target["expr"].strip() for target in targets), panel["title"]
        assert len({target["refId"] for target in targets}) == len(targets)
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert all(target["datasource"] == panel["datasource"] for target in targets)


@pytest.mark.parametrize("name", DASHBOARDS)
def test_panels_do_not_overlap(name: str) -> None:
    cells: set[tuple[int, int]] = set()
    for panel in _panels(DASHBOARDS[name]):
        pos = panel["gridPos"]
        assert 0 <= pos["x"] and pos["x"] + pos["w"] <= 24
        mine = {(x, y) for x in range(pos["x"], pos["x"] + pos["w"]) for y in range(pos["y"], pos["y"] + pos["h"])}
        assert not cells & mine, panel["title"]
        cells |= mine


def test_panel_queries_lists_every_target_in_order() -> None:
    dashboard = serving_dashboard()
    assert panel_queries(dashboard) == [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    nested = {"panels": [{"type": "row", "panels": [{"targets": [{"expr": "up"}]}]}]}
    assert panel_queries(nested) == ["up"]


def test_serving_dashboard_has_the_variables_and_panels_operators_need() -> None:
    dashboard = serving_dashboard()
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert list(variables) == ["datasource", "namespace", "model_name", "deployment", "edge_job"]
    assert variables["edge_job"]["definition"] == "label_values(envoy_http_downstream_rq_total, job)"
    assert variables["datasource"]["query"] == "prometheus"
    assert variables["namespace"]["definition"] == "label_values(vllm:num_requests_running, namespace)"
    assert "model_name)" in variables["model_name"]["definition"]
    assert [p["title"] for p in dashboard["panels"]] == [
        "Request rate by finish reason",
        "Running and waiting requests",
        "Time to first token",
        "Time to first token at the edge",
        "KV-cache usage per pod",
        "Inter-token latency",
        "Generation tokens per second",
        "Prompt tokens per second",
        "Replicas",
        "End-to-end request latency",
        "Prefix-cache hit rate",
        "Edge: requests per second by response class",
        "Edge: 5xx and resets",
        "Endpoint picker: requests per second",
        "Endpoint picker: scheduling latency",
        "Endpoint picker: replica chosen",
        "Endpoint picker: health",
        "Prefix-cache hits by tier",
        "LoRA: requests per second by adapter",
        "LoRA: adapters in the batch",
        "Idle and waking (scale to zero)",
    ]
    used = {name for query in panel_queries(dashboard) for name in promql.metric_names(_as_promql(query))}
    assert used == {
        "vllm:lora_requests_info",
        "vllm:request_success_total",
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:time_to_first_token_seconds_bucket",
        "vllm:inter_token_latency_seconds_bucket",
        "vllm:generation_tokens_total",
        "vllm:prefix_cache_hits_total",
        "vllm:prefix_cache_queries_total",
        "vllm:prompt_tokens_cached_by_source_total",
        "llm_d_epp_request_total",
        "llm_d_epp_request_error_total",
        "llm_d_epp_scheduler_e2e_duration_seconds_bucket",
        "llm_d_epp_scheduler_attempts_total",
        "vllm:prompt_tokens_total",
        "kube_deployment_spec_replicas",
        "kube_deployment_status_replicas_available",
        "vllm:e2e_request_latency_seconds_bucket",
        "llm_d_epp_request_ttft_seconds_bucket",
        "llm_d_epp_ready_endpoints",
        "envoy_http_downstream_rq_xx",
        "envoy_http_downstream_rq_total",
        "envoy_http_downstream_rq_tx_reset",
        "up",
        "kube_poddisruptionbudget_status_current_healthy",
        "kube_poddisruptionbudget_status_desired_healthy",
        "llm_d_epp_flow_control_queue_size",
    }


def test_latency_panels_show_the_agreed_percentiles() -> None:
    panels = {p["title"]: p for p in serving_dashboard()["panels"]}

    def quantiles(title: str) -> list[str]:
        return [re.match(r"histogram_quantile\(([0-9.]+),", t["expr"]).group(1) for t in panels[title]["targets"]]

    assert quantiles("Time to first token") == ["0.5", "0.95", "0.99"]
    # The edge's TTFT beside vLLM's, at the same percentiles and for the same models, streamed requests only.
    assert quantiles("Time to first token at the edge") == ["0.5", "0.95", "0.99"]
    titles = [p["title"] for p in serving_dashboard()["panels"]]
    vllm, edge = titles.index("Time to first token"), titles.index("Time to first token at the edge")
    assert (vllm % 2, edge) == (0, vllm + 1)  # left and right in one row
    for target in panels["Time to first token at the edge"]["targets"]:
        assert promql.label_matchers(_as_promql(target["expr"]))["llm_d_epp_request_ttft_seconds_bucket"] == {
            "namespace", "model_name", "streaming"}
        assert 'streaming="true"' in target["expr"]
    assert quantiles("Inter-token latency") == ["0.5", "0.95"]
    assert quantiles("End-to-end request latency") == ["0.5", "0.95", "0.99"]


def test_gpu_dashboard_uses_only_exported_dcgm_fields_and_covers_the_health_signals() -> None:
    queries = panel_queries(gpu_dashboard(GPU_METRICS))
    used = {name for query in queries for name in promql.metric_names(_as_promql(query))}
    assert used <= set(EXPORTED_DCGM)
    assert {
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_FB_FREE",
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_THERMAL_VIOLATION",
        "DCGM_FI_DEV_POWER_VIOLATION",
        "DCGM_EXP_XID_ERRORS_COUNT",
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
    } <= used


def test_gpu_dashboard_never_rates_the_windowed_xid_count() -> None:
    for query in panel_queries(gpu_dashboard(GPU_METRICS)):
        if "DCGM_EXP_XID_ERRORS_COUNT" in promql.metric_names(_as_promql(query)):
            assert promql.function_names(_as_promql(query)) & promql.COUNTER_ONLY_FUNCTIONS == set()


def test_configmap_carries_the_sidecar_label_and_validates() -> None:
    cm = dashboard_configmap(name="llm-serving-vllm", namespace="monitoring", dashboard=serving_dashboard())
    assert cm["metadata"] == {
        "name": "llm-serving-vllm",
        "namespace": "monitoring",
        "labels": {"grafana_dashboard": "1"},
    }
    assert list(cm["data"]) == ["llm-serving-vllm.json"]
    assert json.loads(cm["data"]["llm-serving-vllm.json"]) == serving_dashboard()
    assert kubernetes_object_errors(cm, "1.34") == []


def test_sidecar_label_is_a_key_of_the_pinned_chart() -> None:
    # kube-prometheus-stack 88.5.3 values.yaml sets grafana.sidecar.dashboards.label
    # `grafana_dashboard` and labelValue "1"; the fixture proves both keys exist as strings.
    assert (dashboards.SIDECAR_LABEL, dashboards.SIDECAR_LABEL_VALUE) == ("grafana_dashboard", "1")
    sidecar = {"label": dashboards.SIDECAR_LABEL, "labelValue": dashboards.SIDECAR_LABEL_VALUE}
    values = {"grafana": {"sidecar": {"dashboards": sidecar}}}
    assert helm_value_errors("kube-prometheus-stack", "88.5.3", values) == []


def test_configmap_keeps_extra_labels_but_not_over_the_sidecar_label() -> None:
    cm = dashboard_configmap(
        name="gpu",
        namespace="monitoring",
        dashboard=gpu_dashboard(GPU_METRICS),
        labels={"release": "kube-prometheus-stack", "grafana_dashboard": "0"},
    )
    assert cm["metadata"]["labels"] == {"release": "kube-prometheus-stack", "grafana_dashboard": "1"}


def test_configmap_rendering_is_deterministic() -> None:
    first = dashboard_configmap(name="gpu", namespace="monitoring", dashboard=gpu_dashboard(GPU_METRICS))
    assert dashboard_configmap(name="gpu", namespace="monitoring", dashboard=gpu_dashboard(GPU_METRICS)) == first


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"name": "Bad_Name"}, "name='Bad_Name'"),
        ({"namespace": ""}, "namespace=''"),
        ({"dashboard": {"title": "x"}}, "needs a uid and a title"),
    ],
)
def test_configmap_rejects_nonsense(kwargs: dict, message: str) -> None:
    base = {"name": "d", "namespace": "monitoring", "dashboard": serving_dashboard()}
    with pytest.raises(ValueError, match=re.escape(message)):
        dashboard_configmap(**{**base, **kwargs})


# --------------------------------------------------------------------------------------------
# Every PromQL expression the autoscaling, alert and dashboard modules emit.

_TARGET = PROD  # the prod-like target of the autoscaling tests
_SLO = ModelSlo("llama-70b", "llama-70b", "llm-serving", max_replicas=4, ttft_p95_seconds=2, itl_p95_seconds=0.1)


def _emitted() -> list[tuple[str, str]]:
    """(where, expression) for every PromQL expression; adapter metricsQuery templates excepted."""
    found = [("queue_query", queue_query(_TARGET)), ("kv_query", kv_query(_TARGET))]
    for trigger in scaled_object(_TARGET, prometheus_url="http://p:9090", name="x")["spec"]["triggers"]:
        found.append((f"trigger {trigger['name']}", trigger["metadata"]["query"]))
    for rule in prometheus_adapter_values()["rules"]["custom"]:
        found.append((f"adapter {rule['name']['as']} seriesQuery", rule["seriesQuery"]))
    for rule in serving_rule_groups([_SLO], runbook_base_url="https://r.example.com/x")[0]["rules"]:
        found.append((f"alert {rule['alert']}", rule["expr"]))
    group = dataclasses.replace(_SLO, group_size=2, group_ready_minutes=34)
    for rule in serving_rule_groups([group], runbook_base_url="https://r.example.com/x")[0]["rules"]:
        found.append((f"alert group {rule['alert']}", rule["expr"]))
    routed = RoutedModel("llama-70b", "llm-serving", {}, 8000, 1639,
                         admission=Admission(True, 2, 7, 1.0, 7, 2, scale_out_seconds=840))
    for rule in picker_alert_groups((routed,), 2, runbook_base_url="https://r.example.com/x")[0]["rules"]:
        found.append((f"alert {rule['alert']}", rule["expr"]))
    for name, dashboard in DASHBOARDS.items():
        for panel in _panels(dashboard):
            for target in panel["targets"]:
                found.append((f"{name} panel {panel['title']} {target['refId']}", _as_promql(target["expr"])))
        for variable in dashboard["templating"]["list"]:
            if variable["type"] == "query":
                found.append((f"{name} variable {variable['name']}", _variable_selector(variable["definition"])))
    return found


EMITTED = _emitted()


def _picker_series() -> dict[str, tuple[str, frozenset[str]]]:
    """The endpoint picker's series as Prometheus exposes them (histograms as _bucket, _sum, _count)."""
    series = {}
    for name, (kind, labels) in PICKER_METRIC_TYPES.items():
        suffixes = ("_bucket", "_sum", "_count") if kind == "histogram" else ("",)
        for suffix in suffixes:
            bucket = {"le"} if suffix == "_bucket" else set()
            series[name + suffix] = ("counter" if kind == "histogram" else kind, labels | bucket)
    # Prometheus's own per-target series, which the picker alerts count pickers with.
    series["up"] = ("gauge", frozenset())
    return series


PICKER_SERIES = _picker_series()
KNOWN = (vllm_series_names() | set(EXPORTED_DCGM) | set(KUBE_STATE_METRICS) | set(PICKER_SERIES)
         | PICKER_KUBE_STATE_METRICS | set(ENVOY_METRIC_TYPES) | CONTAINER_METRICS)


def _metric_types() -> dict[str, str]:
    types = dict(EXPORTED_DCGM)
    types.update({name: "gauge" for name in KSM_LABELS})
    types["kube_pod_container_status_restarts_total"] = "counter"
    types.update({name: kind for name, (kind, _) in PICKER_SERIES.items()})
    types.update(ENVOY_METRIC_TYPES)
    for family in vllm_metrics().values():
        for series in family["exposed_series"]:
            types[series] = "counter" if family["type"] in ("counter", "histogram") else family["type"]
    return types


def test_the_walk_covers_every_module() -> None:
    kinds = {where.split(" ")[0] for where, _ in EMITTED}
    assert kinds == {"queue_query", "kv_query", "trigger", "adapter", "alert", "serving", "gpu"}
    assert len(EMITTED) > 40


@pytest.mark.parametrize(("where", "expr"), EMITTED, ids=[where for where, _ in EMITTED])
def test_every_emitted_expression_parses_and_names_only_known_metrics(where: str, expr: str) -> None:
    assert promql.unknown_metric_errors(expr, KNOWN) == []


@pytest.mark.parametrize(("where", "expr"), EMITTED, ids=[where for where, _ in EMITTED])
def test_every_emitted_matcher_uses_a_label_its_series_has(where: str, expr: str) -> None:
    for series, labels in promql.label_matchers(expr).items():
        if series in KSM_LABELS:
            allowed = KSM_LABELS[series]
        elif series in EXPORTED_DCGM:
            allowed = DCGM_LABELS
        elif series in ENVOY_METRIC_TYPES:
            allowed = ENVOY_LABELS | TARGET_LABELS
        elif series in PICKER_SERIES:
            # The PodMonitor's target labels, and `job` (<namespace>/<PodMonitor>) the alerts select on.
            allowed = PICKER_SERIES[series][1] | TARGET_LABELS | {"job"}
        else:
            allowed = vllm_metric_labels(series) | TARGET_LABELS
        assert labels <= allowed, (where, series, labels - allowed)


@pytest.mark.parametrize(("where", "expr"), EMITTED, ids=[where for where, _ in EMITTED])
def test_every_emitted_rate_or_increase_is_on_a_counter(where: str, expr: str) -> None:
    assert promql.counter_function_errors(expr, _metric_types()) == []


def test_a_misspelt_vllm_metric_would_be_caught() -> None:
    broken = queue_query(_TARGET).replace("num_requests_waiting", "num_requests_queued")
    assert promql.unknown_metric_errors(broken, KNOWN) != []
    removed = "histogram_quantile(0.95, sum by (le) (rate(vllm:time_per_output_token_seconds_bucket[5m])))"
    assert promql.unknown_metric_errors(removed, KNOWN) != []  # removed in vLLM 0.13 (PR #32661)


def test_module_is_pure_data_without_pulumi() -> None:
    tree = ast.parse(Path(dashboards.__file__).read_text(encoding="utf-8"))
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert not any(name.split(".")[0] == "pulumi" for name in imported)

