"""Tests for llm_serving/scaling/objects.py: KEDA ScaledObjects, adapter-mode HPAs and chart values.

They pin the exact prod-like manifests, validate them against the pinned CRDs, OpenAPI schemas and
chart values, and check the HPA arithmetic each trigger's metric type implies.
"""

from __future__ import annotations

import ast
import math
import re
from dataclasses import replace
from pathlib import Path

import promql_parser
import pytest

from llm_serving.scaling import objects as autoscaling
from llm_serving.scaling.objects import (
    ScalingTarget,
    horizontal_pod_autoscaler,
    hpa_behavior,
    keda_chart_values,
    kv_query,
    prometheus_adapter_values,
    queue_query,
    scaled_object,
    ttft_query,
)
from tests.support import promql
from tests.support.reference import (
    custom_resource_errors,
    helm_value_errors,
    kubernetes_object_errors,
    vllm_metric_labels,
    vllm_series_names,
)

PROMETHEUS = "http://prometheus-operated.monitoring.svc:9090"
# Prod's model (Pulumi.prod.yaml) with the config defaults for targets and windows.
PROD = ScalingTarget(
    deployment_name="llama-70b",
    namespace="llm-serving",
    served_model_name="llama-70b",
    min_replicas=2,
    max_replicas=4,
    waiting_per_replica_target=5,
    waiting_activation=1,
    kv_usage_target=0.8,
    kv_usage_activation=0.5,
    scale_down_window_seconds=900,
    scale_up_window_seconds=30,
    cooldown_seconds=1200,
    ttft_target_seconds=1.6,
)
SEL = 'namespace="llm-serving", model_name="llama-70b"'
QUEUE = f"sum(vllm:num_requests_waiting{{{SEL}}}) or vector(0)"
KV = f"avg(vllm:kv_cache_usage_perc{{{SEL}}}) or vector(0)"
TTFT = (f"(histogram_quantile(0.95, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket{{{SEL}}}[2m]))) >= 0)"
        " or vector(0)")

BEHAVIOR = {
    "scaleUp": {
        "stabilizationWindowSeconds": 30,
        "selectPolicy": "Max",
        "policies": [
            {"type": "Pods", "value": 2, "periodSeconds": 60},
            {"type": "Percent", "value": 100, "periodSeconds": 60},
        ],
    },
    "scaleDown": {
        "stabilizationWindowSeconds": 900,
        "selectPolicy": "Min",
        "policies": [{"type": "Pods", "value": 1, "periodSeconds": 120}],
    },
}

# Labels the PodMonitor's target labels add to every vLLM series (vLLM itself only has model_name
# and engine): namespace and pod from the Prometheus Operator, node from our relabeling.
TARGET_LABELS = {"namespace", "pod", "node"}


def test_prod_scaled_object_is_exactly_as_designed() -> None:
    assert scaled_object(PROD, prometheus_url=PROMETHEUS, name="llama-70b") == {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": "llama-70b", "namespace": "llm-serving"},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llama-70b"},
            "pollingInterval": 15,
            "cooldownPeriod": 1200,
            "minReplicaCount": 2,
            "maxReplicaCount": 4,
            # currentReplicas: a Prometheus outage neither starts nor stops a replica.
            "fallback": {"failureThreshold": 3, "replicas": 2, "behavior": "currentReplicas"},
            "advanced": {"horizontalPodAutoscalerConfig": {"behavior": BEHAVIOR}},
            "triggers": [
                {
                    "type": "prometheus",
                    "name": "queue_waiting",
                    "metricType": "AverageValue",
                    "metadata": {
                        "serverAddress": PROMETHEUS,
                        "query": QUEUE,
                        "threshold": "5",
                        "activationThreshold": "1",
                    },
                },
                {
                    "type": "prometheus",
                    "name": "kv_cache_usage",
                    "metricType": "Value",
                    "metadata": {
                        "serverAddress": PROMETHEUS,
                        "query": KV,
                        "threshold": "0.8",
                        "activationThreshold": "0.5",
                    },
                },
                {
                    "type": "prometheus",
                    "name": "ttft_p95",
                    "metricType": "Value",
                    "metadata": {
                        "serverAddress": PROMETHEUS,
                        "query": TTFT,
                        "threshold": "1.6",
                        "activationThreshold": "1.6",
                    },
                },
            ],
        },
    }


def test_scaled_object_validates_against_the_keda_crd() -> None:
    assert custom_resource_errors(scaled_object(PROD, prometheus_url=PROMETHEUS, name="llama-70b")) == []


WAKE = 'sum(llm_d_epp_flow_control_queue_size{namespace="llm-serving", inference_pool="llama-70b"}) or vector(0)'


def test_scale_to_zero_wakes_on_the_pickers_held_requests_and_validates() -> None:
    dev = replace(PROD, min_replicas=0, max_replicas=1, polling_interval_seconds=30, cooldown_seconds=1800,
                  wake_query=WAKE, wake_on_waiting=2)
    obj = scaled_object(dev, prometheus_url=PROMETHEUS, name="llama-70b")
    assert (obj["spec"]["minReplicaCount"], obj["spec"]["cooldownPeriod"]) == (0, 1800)
    assert obj["spec"]["pollingInterval"] == 30
    (held,) = [t for t in obj["spec"]["triggers"] if t["name"] == "held_requests"]
    # The only trigger that exists at zero replicas; active once more than wake_on_waiting - 1 requests wait.
    assert held["metadata"]["query"] == WAKE and held["metadata"]["activationThreshold"] == "1"
    assert held["metricType"] == "AverageValue"
    assert custom_resource_errors(obj) == []
    ast_root = promql_parser.parse(WAKE)
    assert isinstance(ast_root.lhs, promql_parser.AggregateExpr) and ast_root.lhs.modifier is None
    # An awake-only model has no such trigger.
    assert "held_requests" not in {t["name"] for t in scaled_object(PROD, prometheus_url=PROMETHEUS,
                                                                    name="llama-70b")["spec"]["triggers"]}


def test_zero_replicas_without_a_wake_is_refused() -> None:
    with pytest.raises(ValueError, match="needs a wake query"):
        replace(PROD, min_replicas=0)


def test_queries_name_the_model_and_its_namespace() -> None:
    assert queue_query(PROD) == QUEUE
    assert kv_query(PROD) == KV
    assert ttft_query(PROD) == TTFT


@pytest.mark.parametrize("query", [QUEUE, KV], ids=["queue", "kv"])
def test_trigger_queries_return_a_single_value(query: str) -> None:
    # KEDA's Prometheus scaler needs a one-element result: an aggregation without `by`, or 0.
    ast_root = promql_parser.parse(query)
    assert isinstance(ast_root, promql_parser.BinaryExpr)
    assert isinstance(ast_root.lhs, promql_parser.AggregateExpr)
    assert ast_root.lhs.modifier is None
    assert str(ast_root.op) == "or"
    assert isinstance(ast_root.rhs, promql_parser.Call) and ast_root.rhs.func.name == "vector"


@pytest.mark.parametrize("query", [QUEUE, KV], ids=["queue", "kv"])
def test_trigger_queries_use_known_vllm_series_and_labels(query: str) -> None:
    assert promql.unknown_metric_errors(query, vllm_series_names()) == []
    for series, labels in promql.label_matchers(query).items():
        assert labels <= vllm_metric_labels(series) | TARGET_LABELS, series


# The HPA controller's replica rule for the two external metric types (Kubernetes HPA docs;
# keda.sh scaledobject-spec "metricType"): AverageValue divides the metric by the target and
# ignores the current count; Value scales the ready replicas by metric / target.
def _average_value_replicas(metric: float, target: float) -> int:
    return math.ceil(metric / target)


def _value_replicas(ready: int, metric: float, target: float) -> int:
    return math.ceil(ready * metric / target)


def test_queue_trigger_asks_for_total_waiting_over_target_replicas() -> None:
    waiting_per_pod = [12, 9, 9]  # sum() of the query
    assert _average_value_replicas(sum(waiting_per_pod), PROD.waiting_per_replica_target) == 6


def test_kv_trigger_applies_the_utilisation_rule_to_the_mean() -> None:
    usage = [0.95, 0.9, 0.85]  # avg() of the query is 0.9
    mean = sum(usage) / len(usage)
    # Value: 3 ready replicas at 0.9 against a 0.8 target want ceil(3 * 1.125) = 4.
    assert _value_replicas(len(usage), mean, PROD.kv_usage_target) == 4
    # The alternative the metric type rules out: AverageValue would divide the mean again and
    # ask for 2 replicas however many are full.
    assert _average_value_replicas(mean, PROD.kv_usage_target) == 2
    triggers = scaled_object(PROD, prometheus_url=PROMETHEUS, name="x")["spec"]["triggers"]
    assert [(t["name"], t["metricType"]) for t in triggers] == [
        ("queue_waiting", "AverageValue"),
        ("kv_cache_usage", "Value"),
        ("ttft_p95", "Value"),
    ]


def test_ttft_trigger_scales_out_in_proportion_before_the_slo_breaks() -> None:
    # 2 replicas at p95 2.4 s against a 1.6 s target (0.8 x a 2 s SLO) want ceil(2 * 1.5) = 3.
    assert _value_replicas(2, 2.4, PROD.ttft_target_seconds) == 3
    # The HPA ignores a ratio within its 10 % tolerance (kube-controller-manager
    # --horizontal-pod-autoscaler-tolerance): at 1.7 s nothing changes and the 2 s SLO still holds.
    ratio = 1.7 / PROD.ttft_target_seconds
    assert abs(ratio - 1) <= 0.1
    # The trigger fires below the SLO itself: 1.1 x 1.6 s = 1.76 s < 2 s.
    assert PROD.ttft_target_seconds * 1.1 < 2.0


def test_behavior_follows_the_aws_eks_guide() -> None:
    behavior = hpa_behavior(PROD)
    assert behavior == BEHAVIOR
    # AWS EKS KEDA guide: scale up by 2 pods per 60 s (Max), down by 1 pod per 120 s (Min).
    assert {"type": "Pods", "value": 2, "periodSeconds": 60} in behavior["scaleUp"]["policies"]
    assert behavior["scaleDown"]["policies"] == [{"type": "Pods", "value": 1, "periodSeconds": 120}]
    assert (behavior["scaleUp"]["selectPolicy"], behavior["scaleDown"]["selectPolicy"]) == ("Max", "Min")


def test_prod_hpa_is_exactly_as_designed() -> None:
    assert horizontal_pod_autoscaler(PROD, name="llama-70b") == {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "llama-70b", "namespace": "llm-serving"},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llama-70b"},
            "minReplicas": 2,
            "maxReplicas": 4,
            "metrics": [
                {
                    "type": "Pods",
                    "pods": {
                        "metric": {"name": "vllm_num_requests_waiting"},
                        "target": {"type": "AverageValue", "averageValue": "5"},
                    },
                },
                {
                    "type": "Pods",
                    "pods": {
                        "metric": {"name": "vllm_kv_cache_usage_perc"},
                        "target": {"type": "AverageValue", "averageValue": "800m"},
                    },
                },
            ],
            "behavior": BEHAVIOR,
        },
    }


def test_hpa_validates_in_strict_mode() -> None:
    assert kubernetes_object_errors(horizontal_pod_autoscaler(PROD, name="llama-70b"), "1.34") == []


def test_hpa_quantities_keep_fractional_targets() -> None:
    odd = replace(PROD, waiting_per_replica_target=2.5, kv_usage_target=0.75)
    metrics = horizontal_pod_autoscaler(odd, name="x")["spec"]["metrics"]
    assert [m["pods"]["target"]["averageValue"] for m in metrics] == ["2500m", "750m"]
    assert kubernetes_object_errors(horizontal_pod_autoscaler(odd, name="x"), "1.34") == []


def test_hpa_refuses_scale_to_zero() -> None:
    with pytest.raises(ValueError, match="needs KEDA"):
        horizontal_pod_autoscaler(replace(PROD, min_replicas=0, wake_query=WAKE), name="x")


def test_hpa_metric_names_are_the_ones_the_adapter_exposes() -> None:
    exposed = {rule["name"]["as"] for rule in prometheus_adapter_values()["rules"]["custom"]}
    used = {m["pods"]["metric"]["name"] for m in horizontal_pod_autoscaler(PROD, name="x")["spec"]["metrics"]}
    assert used == exposed == {"vllm_num_requests_waiting", "vllm_kv_cache_usage_perc"}


def test_prometheus_adapter_values_are_exactly_as_designed() -> None:
    overrides = {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}
    assert prometheus_adapter_values() == {
        "rules": {
            "custom": [
                {
                    "seriesQuery": '{__name__="vllm:num_requests_waiting",namespace!="",pod!=""}',
                    "resources": {"overrides": overrides},
                    "name": {"matches": "^vllm:num_requests_waiting$", "as": "vllm_num_requests_waiting"},
                    "metricsQuery": "sum by (<<.GroupBy>>) (<<.Series>>{<<.LabelMatchers>>})",
                },
                {
                    "seriesQuery": '{__name__="vllm:kv_cache_usage_perc",namespace!="",pod!=""}',
                    "resources": {"overrides": overrides},
                    "name": {"matches": "^vllm:kv_cache_usage_perc$", "as": "vllm_kv_cache_usage_perc"},
                    "metricsQuery": "avg by (<<.GroupBy>>) (<<.Series>>{<<.LabelMatchers>>})",
                },
            ]
        }
    }


def test_prometheus_adapter_values_exist_in_the_chart() -> None:
    assert helm_value_errors("prometheus-adapter", "5.3.0", prometheus_adapter_values()) == []


def test_adapter_rules_rename_away_the_colon_and_match_their_series() -> None:
    for rule in prometheus_adapter_values()["rules"]["custom"]:
        assert ":" not in rule["name"]["as"]
        [series] = promql.metric_names(rule["seriesQuery"])
        assert re.fullmatch(rule["name"]["matches"], series)
        assert series in vllm_series_names()


def test_adapter_namespace_label_can_be_changed() -> None:
    [rule, _] = prometheus_adapter_values("kubernetes_namespace")["rules"]["custom"]
    assert rule["resources"]["overrides"]["kubernetes_namespace"] == {"resource": "namespace"}
    assert 'kubernetes_namespace!=""' in rule["seriesQuery"]
    assert promql.parse_errors(rule["seriesQuery"]) == []


@pytest.mark.parametrize("label", ["", "kubernetes-namespace", "pod", "1ns"])
def test_adapter_rejects_a_bad_namespace_label(label: str) -> None:
    with pytest.raises(ValueError, match="namespace_label="):
        prometheus_adapter_values(label)


def test_keda_chart_values_exist_in_the_chart() -> None:
    assert keda_chart_values() == {
        "crds": {"install": True, "additionalAnnotations": {"helm.sh/resource-policy": "keep"}}}
    assert helm_value_errors("keda", "2.20.2", keda_chart_values()) == []


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"min_replicas": 5}, "min_replicas=5 is above max_replicas=4"),
        ({"max_replicas": 0}, "max_replicas=0"),
        ({"min_replicas": -1}, "min_replicas=-1"),
        ({"kv_usage_target": 0}, "kv_usage_target=0"),
        ({"kv_usage_target": 1.5}, "kv_usage_target=1.5"),
        ({"kv_usage_target": float("nan")}, "kv_usage_target=nan"),
        ({"kv_usage_activation": 2}, "kv_usage_activation=2"),
        ({"waiting_per_replica_target": 0}, "waiting_per_replica_target=0"),
        ({"waiting_activation": -1}, "waiting_activation=-1"),
        ({"scale_down_window_seconds": 7200}, "scale_down_window_seconds=7200"),
        ({"scale_up_window_seconds": -1}, "scale_up_window_seconds=-1"),
        ({"ttft_target_seconds": 0}, "ttft_target_seconds=0: expected a number in (0, 600]"),
        ({"ttft_target_seconds": float("inf")}, "ttft_target_seconds=inf"),
        ({"polling_interval_seconds": 0}, "polling_interval_seconds=0"),
        ({"min_replicas": True}, "min_replicas=True"),
        ({"deployment_name": "Llama_70B"}, "deployment_name='Llama_70B'"),
        ({"namespace": ""}, "namespace=''"),
        ({"served_model_name": 'a"b'}, "served_model_name="),
        ({"served_model_name": ""}, "served_model_name=''"),
    ],
)
def test_scaling_target_rejects_nonsense(changes: dict, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        replace(PROD, **changes)


@pytest.mark.parametrize("url", ["", "prometheus:9090", "http://", "http://a b:9090"])
def test_scaled_object_rejects_a_bad_prometheus_url(url: str) -> None:
    with pytest.raises(ValueError, match="prometheus_url="):
        scaled_object(PROD, prometheus_url=url, name="x")


def test_module_is_pure_data_without_pulumi() -> None:
    tree = ast.parse(Path(autoscaling.__file__).read_text(encoding="utf-8"))
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert not any(name.split(".")[0] == "pulumi" for name in imported)


def test_the_queue_trigger_adds_the_requests_a_picker_holds() -> None:
    held = 'sum(llm_d_epp_flow_control_queue_size{namespace="llm-serving", inference_pool=~"(llm-serving/)?x"}) ' \
           "or vector(0)"
    query = queue_query(replace(PROD, held_query=held))
    assert query == f"(sum(vllm:num_requests_waiting{{{SEL}}}) or vector(0)) + ({held})"
    promql_parser.parse(query)
    # Without a picker (or without flow control) the query is vLLM's alone.
    assert queue_query(PROD) == QUEUE
    assert custom_resource_errors(scaled_object(replace(PROD, held_query=held), prometheus_url=PROMETHEUS,
                                                name="x")) == []
