"""Tests for llm_serving/observability/serving_alerts.py: the per-model vLLM serving PrometheusRule groups.

They pin every alert's expression, duration and severity for a prod-like model, prove each expression
uses only vLLM 0.33.0 and kube-state-metrics series with labels those series have, and validate the rule.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from dataclasses import replace
from pathlib import Path

import pytest

from llm_serving.observability import serving_alerts
from llm_serving.observability.serving_alerts import (
    CONTAINER_METRICS,
    KUBE_STATE_METRICS,
    ModelSlo,
    serving_rule_groups,
)
from tests.support import promql
from tests.support.reference import custom_resource_errors, vllm_metric_labels, vllm_metrics, vllm_series_names

RUNBOOKS = "https://runbooks.example.com/llm-serving"
PROD = ModelSlo(
    served_model_name="llama-70b",
    deployment_name="llama-70b",
    namespace="llm-serving",
    max_replicas=4,
    ttft_p95_seconds=2,
    itl_p95_seconds=0.1,
)
GROUPS = serving_rule_groups([PROD], runbook_base_url=RUNBOOKS)
RULES = [rule for group in GROUPS for rule in group["rules"]]
BY_NAME = {rule["alert"]: rule for rule in RULES}

V = 'namespace="llm-serving", model_name="llama-70b"'
D = 'namespace="llm-serving", deployment="llama-70b"'
RAND = "[bcdfghjklmnpqrstvwxz2456789]"
P = f'namespace="llm-serving", pod=~"llama-70b-{RAND}{{1,10}}-{RAND}{{5}}"'
BY = "namespace, model_name"

EXPECTED = [
    ("VllmQueueDepthHigh", f"sum by ({BY}) (vllm:num_requests_waiting{{{V}}}) > 10", "10m", "warning"),
    ("VllmKvCacheNearlyFull", f"max by ({BY}, pod) (vllm:kv_cache_usage_perc{{{V}}}) > 0.9", "15m", "warning"),
    (
        "VllmTtftP95AboveSlo",
        f"histogram_quantile(0.95, sum by ({BY}, le) (rate(vllm:time_to_first_token_seconds_bucket{{{V}}}[5m]))) > 2",
        "10m",
        "warning",
    ),
    (
        "VllmItlP95AboveSlo",
        f"histogram_quantile(0.95, sum by ({BY}, le) (rate(vllm:inter_token_latency_seconds_bucket{{{V}}}[5m]))) > 0.1",
        "10m",
        "warning",
    ),
    (
        "VllmNoReadyReplica",
        f"(kube_deployment_status_replicas_available{{{D}}} == 0)"
        f" and on (namespace, deployment) (kube_deployment_spec_replicas{{{D}}} > 0)",
        "5m",
        "critical",
    ),
    ("VllmReplicasAtMax", f"kube_deployment_spec_replicas{{{D}}} >= 4", "30m", "warning"),
    (
        "VllmPodRestarting",
        f"increase(kube_pod_container_status_restarts_total{{{P}}}[15m]) > 0",
        "0m",
        "warning",
    ),
    (
        "VllmMetricsMissing",
        f"(kube_deployment_status_replicas_available{{{D}}} > 0) unless on () vllm:num_requests_waiting{{{V}}}",
        "10m",
        "warning",
    ),
]

# Independent of the module: the series our alerts may name, and their Prometheus types.
KNOWN = vllm_series_names() | {
    "kube_deployment_spec_replicas",
    "kube_deployment_status_replicas_available",
    "kube_pod_container_status_restarts_total",
}
# Labels the PodMonitor adds to vLLM series (vLLM itself only has model_name and engine).
TARGET_LABELS = {"namespace", "pod", "node"}
# kube-state-metrics docs: every deployment series has namespace and deployment; the restart counter
# has namespace, pod, container and uid.
KSM_LABELS = {
    "kube_deployment_spec_replicas": {"namespace", "deployment"},
    "kube_deployment_status_replicas_available": {"namespace", "deployment"},
    "kube_pod_container_status_restarts_total": {"namespace", "pod", "container", "uid"},
    # kube-state-metrics docs/metrics/workload/pod-metrics.md (STABLE): condition true, false or unknown.
    "kube_pod_status_ready": {"namespace", "pod", "uid", "condition"},
    # kube-state-metrics docs/metrics/workload/pod-metrics.md (STABLE): one series per container and resource,
    # with the resource's unit (memory: byte).
    "kube_pod_container_resource_limits": {"namespace", "pod", "container", "node", "resource", "unit", "uid"},
}


def metric_types() -> dict[str, str]:
    types = {name: "gauge" for name in KSM_LABELS}
    types["kube_pod_container_status_restarts_total"] = "counter"
    for family in vllm_metrics().values():
        for series in family["exposed_series"]:
            # Histogram buckets, sums and counts are counters as far as rate() is concerned.
            types[series] = "counter" if family["type"] in ("counter", "histogram") else family["type"]
    return types


def test_alert_table_is_exactly_as_designed() -> None:
    actual = [(r["alert"], r["expr"], r["for"], r["labels"]["severity"]) for r in RULES]
    assert actual == EXPECTED


def test_one_group_per_model_with_a_stable_name() -> None:
    assert [group["name"] for group in GROUPS] == ["llm-serving-llm-serving-llama-70b"]
    assert serving_alerts.alert_names(GROUPS) == [name for name, _, _, _ in EXPECTED]


# Llama 3.1 405B as TP 8 x PP 2: each replica a LeaderWorkerSet group of 2 pods.
GROUP = dataclasses.replace(PROD, served_model_name="llama-405b", deployment_name="llama-405b", max_replicas=2,
                            group_size=2, group_ready_minutes=34)
GROUP_RULES = {r["alert"]: r for r in serving_rule_groups([GROUP], runbook_base_url=RUNBOOKS)[0]["rules"]}


def test_kube_state_metrics_list_is_exactly_what_the_rules_use() -> None:
    # A model with a CPU KV tier adds the rules that read its pods' memory limit (and cAdvisor's working set).
    tiered = serving_rule_groups([replace(PROD, kv_offload_gib=428)], runbook_base_url=RUNBOOKS)[0]["rules"]
    rules = [*RULES, *GROUP_RULES.values(), *tiered]
    used = {name for rule in rules for name in promql.metric_names(rule["expr"])}
    assert used - vllm_series_names() == KUBE_STATE_METRICS | CONTAINER_METRICS
    assert KUBE_STATE_METRICS == set(KSM_LABELS)


def test_a_group_alerts_on_pod_readiness_and_a_missing_rank() -> None:
    leaders = ('sum by (namespace) (kube_pod_status_ready{namespace="llm-serving", pod=~"llama-405b-[0-9]+", '
               'condition="true"})')
    assert GROUP_RULES["VllmNoReadyReplica"]["expr"] == f"{leaders} == 0"
    assert "VllmReplicasAtMax" not in GROUP_RULES  # no kube-state-metrics series holds an LWS's replicas
    incomplete = GROUP_RULES["VllmGroupIncomplete"]
    assert incomplete["expr"] == (
        'count(kube_pod_status_ready{namespace="llm-serving", pod=~"llama-405b-[0-9]+(-[0-9]+)?", '
        'condition="true"} == 0) > 0')
    assert (incomplete["for"], incomplete["labels"]["severity"]) == ("34m", "warning")
    assert GROUP_RULES["VllmPodRestarting"]["expr"] == (
        'increase(kube_pod_container_status_restarts_total{namespace="llm-serving", '
        'pod=~"llama-405b-[0-9]+(-[0-9]+)?"}[15m]) > 0')
    for rule in GROUP_RULES.values():
        assert promql.parse_errors(rule["expr"]) == [], rule["alert"]
        for series, labels in promql.label_matchers(rule["expr"]).items():
            allowed = KSM_LABELS[series] if series in KSM_LABELS else vllm_metric_labels(series) | TARGET_LABELS
            assert labels <= allowed, (rule["alert"], series, labels - allowed)


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r["alert"])
def test_expression_parses_and_uses_known_metrics(rule: dict) -> None:
    assert promql.unknown_metric_errors(rule["expr"], KNOWN) == []


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r["alert"])
def test_matchers_use_labels_the_series_have(rule: dict) -> None:
    for series, labels in promql.label_matchers(rule["expr"]).items():
        allowed = KSM_LABELS[series] if series in KSM_LABELS else vllm_metric_labels(series) | TARGET_LABELS
        assert labels <= allowed, (rule["alert"], series, labels - allowed)


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r["alert"])
def test_rate_and_increase_only_touch_counters(rule: dict) -> None:
    assert promql.counter_function_errors(rule["expr"], metric_types()) == []


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r["alert"])
def test_every_alert_has_severity_model_summary_and_runbook(rule: dict) -> None:
    assert rule["labels"] == {"severity": rule["labels"]["severity"], "model_name": "llama-70b"}
    assert rule["labels"]["severity"] in {"critical", "warning"}
    annotations = rule["annotations"]
    assert set(annotations) == {"summary", "description", "runbook_url"}
    assert "model llama-70b in namespace llm-serving" in annotations["summary"].lower()
    assert annotations["description"].strip()
    assert annotations["runbook_url"] == f"{RUNBOOKS}#{rule['alert'].lower()}"


def test_the_only_page_is_a_model_with_no_replica() -> None:
    assert [r["alert"] for r in RULES if r["labels"]["severity"] == "critical"] == ["VllmNoReadyReplica"]


def test_groups_form_a_valid_prometheus_rule() -> None:
    second = ModelSlo("qwen-7b", "qwen-7b", "llm-serving", max_replicas=2, ttft_p95_seconds=1, itl_p95_seconds=0.05)
    rule = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "vllm-serving", "namespace": "llm-serving"},
        "spec": {"groups": serving_rule_groups([PROD, second], runbook_base_url=RUNBOOKS)},
    }
    assert custom_resource_errors(rule) == []


def test_slo_and_threshold_parameters_reach_the_rules() -> None:
    slo = replace(PROD, ttft_p95_seconds=1.5, itl_p95_seconds=0.05, queue_alert_threshold=25, max_replicas=8)
    rules = {r["alert"]: r for r in serving_rule_groups([slo], runbook_base_url=RUNBOOKS)[0]["rules"]}
    assert rules["VllmTtftP95AboveSlo"]["expr"].endswith(" > 1.5")
    assert rules["VllmItlP95AboveSlo"]["expr"].endswith(" > 0.05")
    assert rules["VllmQueueDepthHigh"]["expr"].endswith(" > 25")
    assert rules["VllmReplicasAtMax"]["expr"].endswith(" >= 8")
    assert "1.5 s SLO" in rules["VllmTtftP95AboveSlo"]["annotations"]["summary"]


def test_a_model_that_cannot_scale_has_no_pinned_at_max_alert() -> None:
    fixed = replace(PROD, min_replicas=4)
    names = serving_alerts.alert_names(serving_rule_groups([fixed], runbook_base_url=RUNBOOKS))
    assert "VllmReplicasAtMax" not in names
    assert len(names) == len(EXPECTED) - 1
    scaling = replace(PROD, min_replicas=2)
    assert "VllmReplicasAtMax" in serving_alerts.alert_names(serving_rule_groups([scaling], runbook_base_url=RUNBOOKS))


def test_served_name_and_deployment_name_are_used_where_each_belongs() -> None:
    other = ModelSlo("meta-llama/Llama-3.1-8B", "llama-8b", "serving", 2, 1, 0.05)
    for rule in serving_rule_groups([other], runbook_base_url=RUNBOOKS)[0]["rules"]:
        for selector in promql.selectors(rule["expr"]):
            if selector.name in KSM_LABELS:
                assert ("model_name", "=", "meta-llama/Llama-3.1-8B") not in selector.matchers
            else:
                assert ("model_name", "=", "meta-llama/Llama-3.1-8B") in selector.matchers
            assert ("namespace", "=", "serving") in selector.matchers


def test_pod_regex_matches_the_deployments_pods_only() -> None:
    [selector] = promql.selectors(BY_NAME["VllmPodRestarting"]["expr"])
    [pattern] = [value for label, op, value in selector.matchers if label == "pod" and op == "=~"]
    # Prometheus anchors regex matchers (RE2); fullmatch is the Python equivalent for this pattern.
    assert re.fullmatch(pattern, "llama-70b-7d4f9c8b6-x2x9z")
    assert not re.fullmatch(pattern, "llama-70b-guard-7d4f9c8b6-x2x9z")
    assert not re.fullmatch(pattern, "llama-70b-prestage-bcd12")  # 'a', 'e' and '1' are not generated
    assert not re.fullmatch(pattern, "llama-70b-stage-0a1b2c3d4e-x2x9z")  # the weights Job's pod
    assert not re.fullmatch(pattern, "llama-7-7d4f9c8b6-x2x9z")


def test_duplicate_models_are_rejected() -> None:
    with pytest.raises(ValueError, match="deployment llm-serving/llama-70b is listed twice"):
        serving_rule_groups([PROD, PROD], runbook_base_url=RUNBOOKS)
    with pytest.raises(ValueError, match="served model 'llama-70b' is listed twice"):
        serving_rule_groups([PROD, replace(PROD, deployment_name="other")], runbook_base_url=RUNBOOKS)


def test_no_models_means_no_groups() -> None:
    assert serving_rule_groups([], runbook_base_url=RUNBOOKS) == []


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"max_replicas": 0}, "max_replicas=0"),
        ({"min_replicas": 5}, "min_replicas=5"),
        ({"ttft_p95_seconds": 0}, "ttft_p95_seconds=0"),
        ({"itl_p95_seconds": -1}, "itl_p95_seconds=-1"),
        ({"queue_alert_threshold": True}, "queue_alert_threshold=True"),
        ({"served_model_name": "{{ $labels.x }}"}, "served_model_name="),
        ({"deployment_name": "Llama"}, "deployment_name='Llama'"),
        ({"namespace": "a.b"}, "namespace='a.b'"),
    ],
)
def test_model_slo_rejects_nonsense(changes: dict, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        replace(PROD, **changes)


@pytest.mark.parametrize("url", ["", "https://x/y#a", "https://x/ y"])
def test_rejects_a_bad_runbook_url(url: str) -> None:
    with pytest.raises(ValueError, match="runbook_base_url="):
        serving_rule_groups([PROD], runbook_base_url=url)


def test_module_is_pure_data_without_pulumi() -> None:
    tree = ast.parse(Path(serving_alerts.__file__).read_text(encoding="utf-8"))
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert not any(name.split(".")[0] == "pulumi" for name in imported)
