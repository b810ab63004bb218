"""Each reference checker accepts valid input and rejects invalid input with a precise message.

The component tests trust these checkers to catch wrong CRD fields, Helm keys and vLLM flags, so
every rule gets a passing and a failing case here, plus a check that the fixtures are current.

Length: a passing and a failing case for every checker rule, as tables.
"""

from __future__ import annotations

import copy
import filecmp
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tests.support import reference
from tests.support.reference import (
    chart_info,
    custom_resource_errors,
    dcgm_fields,
    helm_value_errors,
    is_custom_kind,
    kubernetes_object_errors,
    pinned_versions,
    vllm_flag_errors,
    vllm_metric_labels,
    vllm_metrics,
    vllm_series_names,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
SHARED_REFERENCE = REPO_ROOT.parent / "shared" / "reference"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def service_monitor() -> dict[str, Any]:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": {"name": "vllm", "namespace": "llm"},
        "spec": {
            "selector": {"matchLabels": {"app.kubernetes.io/name": "vllm"}},
            "namespaceSelector": {"matchNames": ["llm"]},
            "endpoints": [{"port": "http", "path": "/metrics", "interval": "15s", "scrapeTimeout": "10s"}],
        },
    }


def prometheus_rule() -> dict[str, Any]:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "vllm-alerts", "namespace": "llm"},
        "spec": {
            "groups": [
                {
                    "name": "vllm",
                    "rules": [
                        {
                            "alert": "VllmQueueBacklog",
                            "expr": "sum by (model_name) (vllm:num_requests_waiting) > 10",
                            "for": "5m",
                            "labels": {"severity": "warning"},
                            "annotations": {"summary": "requests are queueing"},
                        },
                        {
                            "record": "llm:ttft_seconds:p95",
                            "expr": "histogram_quantile(0.95, sum by (le) "
                            "(rate(vllm:time_to_first_token_seconds_bucket[5m])))",
                        },
                    ],
                }
            ]
        },
    }


def gateway_class() -> dict[str, Any]:
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "GatewayClass",
        "metadata": {"name": "envoy"},
        "spec": {"controllerName": "gateway.envoyproxy.io/gatewayclass-controller"},
    }


def scaled_object() -> dict[str, Any]:
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": "vllm", "namespace": "llm"},
        "spec": {
            "scaleTargetRef": {"name": "vllm"},
            "minReplicaCount": 1,
            "maxReplicaCount": 4,
            "triggers": [
                {
                    "type": "prometheus",
                    "metadata": {
                        "serverAddress": "http://prometheus.monitoring:9090",
                        "query": "sum(vllm:num_requests_waiting)",
                        "threshold": "5",
                    },
                }
            ],
        },
    }


def deployment() -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "vllm", "namespace": "llm"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "vllm"}},
            "template": {
                "metadata": {"labels": {"app": "vllm"}},
                "spec": {
                    "containers": [
                        {
                            "name": "vllm",
                            "image": "vllm/vllm-openai:v0.33.0",
                            "args": [MODEL],
                            "resources": {"limits": {"nvidia.com/gpu": 1}},
                        }
                    ]
                },
            },
        },
    }


# ---------------------------------------------------------------------------------------------
# Custom resources


@pytest.mark.parametrize(("relative", "version"), reference.crd_versions())
def test_every_crd_version_converts_to_a_valid_draft7_schema(relative: str, version: str) -> None:
    jsonschema.Draft7Validator.check_schema(reference.crd_schema(relative, version))


def test_accepts_valid_servicemonitor() -> None:
    assert custom_resource_errors(service_monitor()) == []


def test_rejects_unknown_spec_field_in_servicemonitor() -> None:
    obj = service_monitor()
    obj["spec"]["namespaceSelecter"] = obj["spec"].pop("namespaceSelector")
    assert custom_resource_errors(obj) == [
        "ServiceMonitor llm/vllm: spec.namespaceSelecter: unknown field (not in the schema; the API server "
        "would prune it silently); did you mean namespaceSelector?"
    ]


def test_rejects_unknown_field_in_servicemonitor_endpoint_list_item() -> None:
    obj = service_monitor()
    obj["spec"]["endpoints"][0]["scrapeInterval"] = "15s"
    errors = custom_resource_errors(obj)
    assert len(errors) == 1
    assert errors[0].startswith("ServiceMonitor llm/vllm: spec.endpoints[0].scrapeInterval: unknown field")


def test_rejects_unknown_top_level_field_next_to_spec() -> None:
    obj = service_monitor()
    obj["specs"] = {}
    assert custom_resource_errors(obj)[0].startswith("ServiceMonitor llm/vllm: specs: unknown field")


def test_rejects_bool_for_int_or_string_field() -> None:
    obj = service_monitor()
    obj["spec"]["endpoints"][0]["targetPort"] = True
    assert custom_resource_errors(obj) == [
        "ServiceMonitor llm/vllm: spec.endpoints[0].targetPort: True is not of type 'integer', 'string'"
    ]


@pytest.mark.parametrize("port", [8000, "http"])
def test_accepts_int_or_string_field_as_either(port: int | str) -> None:
    obj = service_monitor()
    obj["spec"]["endpoints"][0]["targetPort"] = port
    assert custom_resource_errors(obj) == []


def test_accepts_known_prometheusrule() -> None:
    assert custom_resource_errors(prometheus_rule()) == []


def test_rejects_prometheusrule_with_non_duration_for() -> None:
    obj = prometheus_rule()
    obj["spec"]["groups"][0]["rules"][0]["for"] = "5 minutes"
    errors = custom_resource_errors(obj)
    assert len(errors) == 1
    assert errors[0].startswith(
        "PrometheusRule llm/vllm-alerts: spec.groups[0].rules[0].for: '5 minutes' does not match"
    )


def test_translates_go_inline_regex_flags_in_crd_patterns() -> None:
    # prometheus-operator writes `^(?i)(abort|warn)?$`, which Python rejects unless the flag moves.
    obj = prometheus_rule()
    obj["spec"]["groups"][0]["partial_response_strategy"] = "WARN"
    assert custom_resource_errors(obj) == []
    obj["spec"]["groups"][0]["partial_response_strategy"] = "ignore"
    assert custom_resource_errors(obj) == [
        "PrometheusRule llm/vllm-alerts: spec.groups[0].partial_response_strategy: "
        "'ignore' does not match '(?i)^(abort|warn)?$'"
    ]


def test_rejects_missing_required_field() -> None:
    obj = prometheus_rule()
    del obj["spec"]["groups"][0]["rules"][0]["expr"]
    assert custom_resource_errors(obj) == [
        "PrometheusRule llm/vllm-alerts: spec.groups[0].rules[0]: 'expr' is a required property"
    ]


def test_accepts_valid_scaledobject() -> None:
    assert custom_resource_errors(scaled_object()) == []


def test_rejects_string_replica_count_in_scaledobject() -> None:
    obj = scaled_object()
    obj["spec"]["minReplicaCount"] = "1"
    assert custom_resource_errors(obj) == [
        "ScaledObject llm/vllm: spec.minReplicaCount: '1' is not of type 'integer'"
    ]


def test_rejects_namespaced_crd_without_namespace() -> None:
    obj = scaled_object()
    del obj["metadata"]["namespace"]
    assert custom_resource_errors(obj) == [
        "ScaledObject vllm: ScaledObject is namespaced but metadata.namespace is not set"
    ]


def test_accepts_cluster_scoped_gatewayclass_without_namespace() -> None:
    assert custom_resource_errors(gateway_class()) == []


def test_rejects_namespace_on_cluster_scoped_gatewayclass() -> None:
    obj = gateway_class()
    obj["metadata"]["namespace"] = "gateway"
    assert custom_resource_errors(obj) == [
        "GatewayClass gateway/envoy: GatewayClass is cluster-scoped but metadata.namespace "
        "is set to 'gateway'"
    ]


def test_accepts_still_served_older_version() -> None:
    obj = gateway_class()
    obj["apiVersion"] = "gateway.networking.k8s.io/v1beta1"
    assert custom_resource_errors(obj) == []


def test_rejects_version_the_crd_does_not_serve() -> None:
    obj = gateway_class()
    obj["apiVersion"] = "gateway.networking.k8s.io/v1alpha2"
    assert custom_resource_errors(obj) == [
        "GatewayClass envoy: gateway.networking.k8s.io/v1alpha2 is not a served version of GatewayClass "
        "(served: v1, v1beta1)"
    ]


def test_rejects_unknown_kind_in_known_group_with_suggestion() -> None:
    obj = gateway_class()
    obj["kind"] = "GatewayClasses"
    assert custom_resource_errors(obj) == [
        "GatewayClasses envoy: unknown custom resource kind GatewayClasses in gateway.networking.k8s.io/v1; "
        "did you mean GatewayClass, Gateway?"
    ]


def test_rejects_kind_from_group_without_reference_crd() -> None:
    obj = gateway_class()
    obj["apiVersion"] = "example.com/v1"
    assert custom_resource_errors(obj) == [
        "GatewayClass envoy: unknown custom resource kind GatewayClass in example.com/v1 "
        "(no reference CRD for group 'example.com')"
    ]


def test_rejects_field_inside_object_declared_without_properties() -> None:
    # `http3: {}` is a presence switch; the API server would prune anything put inside it.
    policy = {
        "apiVersion": "gateway.envoyproxy.io/v1alpha1",
        "kind": "ClientTrafficPolicy",
        "metadata": {"name": "streaming", "namespace": "gateway"},
        "spec": {
            "targetRefs": [{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "llm"}],
            "http3": {},
        },
    }
    assert custom_resource_errors(policy) == []
    policy["spec"]["http3"] = {"enabled": True}
    assert custom_resource_errors(policy) == [
        "ClientTrafficPolicy gateway/streaming: spec.http3.enabled: unknown field (not in the schema; "
        "the API server would prune it silently)"
    ]


def test_accepts_anything_below_preserve_unknown_fields() -> None:
    envoy_proxy = {
        "apiVersion": "gateway.envoyproxy.io/v1alpha1",
        "kind": "EnvoyProxy",
        "metadata": {"name": "llm", "namespace": "gateway"},
        "spec": {
            "provider": {
                "type": "Kubernetes",
                "kubernetes": {
                    "envoyDeployment": {
                        "replicas": 2,
                        "patch": {"value": {"spec": {"template": {"anything": {"goes": 1}}}}},
                    }
                },
            }
        },
    }
    assert custom_resource_errors(envoy_proxy) == []


def test_validation_does_not_mutate_the_cached_schema() -> None:
    before = copy.deepcopy(reference._load("crds/monitoring.coreos.com_servicemonitors.json"))
    custom_resource_errors(service_monitor())
    assert reference._load("crds/monitoring.coreos.com_servicemonitors.json") == before
    assert "additionalProperties" not in before["versions"]["v1"]["schema"]


def test_converts_structural_schema_keywords_to_draft7() -> None:
    schema = {
        "type": "object",
        "properties": {
            "port": {"x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}, {"type": "string"}]},
            "mode": {"type": "string", "enum": ["a", "b"], "nullable": True},
            "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True, "properties": {}},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        },
        "x-kubernetes-validations": [{"rule": "true"}],
    }
    assert reference._to_draft7(schema) == {
        "type": "object",
        "properties": {
            "port": {"type": ["integer", "string"]},
            "mode": {"type": ["string", "null"], "enum": ["a", "b", None]},
            "free": {"type": "object", "properties": {}},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        },
        "additionalProperties": False,
    }


def test_is_custom_kind_knows_reference_crds_only() -> None:
    assert is_custom_kind("monitoring.coreos.com/v1", "ServiceMonitor")
    assert is_custom_kind("gateway.networking.k8s.io/v1beta1", "HTTPRoute")
    assert not is_custom_kind("apps/v1", "Deployment")
    assert not is_custom_kind("monitoring.coreos.com/v1", "Alertmanager")


# ---------------------------------------------------------------------------------------------
# Built-in Kubernetes objects


@pytest.mark.parametrize("version", ["1.34", "v1.34", "1.34.2"])
def test_accepts_valid_deployment(version: str) -> None:
    assert kubernetes_object_errors(deployment(), version) == []


def test_rejects_unknown_container_field_in_strict_mode() -> None:
    obj = deployment()
    obj["spec"]["template"]["spec"]["containers"][0]["gpus"] = 1
    assert kubernetes_object_errors(obj, "1.34") == [
        "Deployment llm/vllm: spec.template.spec.containers[0]: Additional properties are not allowed "
        "('gpus' was unexpected) (Kubernetes 1.34 strict schema)"
    ]


def test_rejects_wrong_type_in_builtin_object() -> None:
    obj = deployment()
    obj["spec"]["replicas"] = "2"
    assert kubernetes_object_errors(obj, "1.34") == [
        "Deployment llm/vllm: spec.replicas: '2' is not of type 'integer', 'null' "
        "(Kubernetes 1.34 strict schema)"
    ]


def test_rejects_unknown_builtin_kind() -> None:
    obj = deployment()
    obj["kind"] = "Deploymnet"
    assert kubernetes_object_errors(obj, "1.34") == [
        "Deploymnet llm/vllm: Couldn't find schema for kind Deploymnet with api version apps/v1 "
        "for kubernetes version 1.34"
    ]


def test_rejects_kubernetes_version_without_schemas() -> None:
    assert kubernetes_object_errors(deployment(), "1.24") == [
        "Deployment llm/vllm: kubernetes-validate 1.37.0 has no schemas for Kubernetes 1.24 "
        "(it ships 1.25 to 1.37)"
    ]


def test_delegates_custom_kinds_to_crd_schemas() -> None:
    obj = service_monitor()
    assert kubernetes_object_errors(obj, "1.34") == []
    obj["spec"]["endpoint"] = obj["spec"].pop("endpoints")
    assert kubernetes_object_errors(obj, "1.34")[0].startswith(
        "ServiceMonitor llm/vllm: spec.endpoint: unknown field"
    )


# ---------------------------------------------------------------------------------------------
# Helm values


def test_accepts_known_device_plugin_values() -> None:
    values = {
        "devicePlugin": {"enabled": True},
        "gfd": {"enabled": False},
        "image": {"tag": "v0.20.0"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "priorityClassName": "system-node-critical",
    }
    assert helm_value_errors("nvidia-device-plugin", "0.20.0", values) == []


def test_rejects_unknown_key_under_device_plugin_with_suggestion() -> None:
    assert helm_value_errors("nvidia-device-plugin", "0.20.0", {"devicePlugin": {"enable": True}}) == [
        "nvidia-device-plugin 0.20.0: unknown value key devicePlugin.enable; did you mean enabled?"
    ]


def test_rejects_unknown_top_level_key() -> None:
    assert helm_value_errors("nvidia-device-plugin", "0.20.0", {"nodeSelectors": {}}) == [
        "nvidia-device-plugin 0.20.0: unknown value key nodeSelectors; did you mean nodeSelector?"
    ]


def test_accepts_any_key_under_empty_default_map() -> None:
    values = {"nodeSelector": {"foo": "bar"}, "podAnnotations": {"a/b": "c"}}
    assert helm_value_errors("nvidia-device-plugin", "0.20.0", values) == []


def test_accepts_keys_below_subchart_the_parent_does_not_list() -> None:
    values = {"nfd": {"worker": {"tolerations": [], "nodeSelector": {"x": "y"}}, "gc": {"enable": False}}}
    assert helm_value_errors("nvidia-device-plugin", "0.20.0", values) == []


def test_still_type_checks_subchart_keys_the_parent_lists() -> None:
    assert helm_value_errors("nvidia-device-plugin", "0.20.0", {"nfd": {"worker": {"tolerations": {}}}}) == [
        "nvidia-device-plugin 0.20.0: nfd.worker.tolerations: override is map but the default is list"
    ]


def test_accepts_unlisted_keys_below_kube_prometheus_stack_subcharts() -> None:
    values = {
        "grafana": {"sidecar": {"dashboards": {"enabled": True, "searchNamespace": "ALL"}}},
        "kube-state-metrics": {"madeUpKey": 1},
        "crds": {"enabled": True},
    }
    assert helm_value_errors("kube-prometheus-stack", "88.5.3", values) == []


def test_rejects_override_that_changes_list_to_map() -> None:
    assert helm_value_errors("nvidia-device-plugin", "0.20.0", {"tolerations": {"key": "x"}}) == [
        "nvidia-device-plugin 0.20.0: tolerations: override is map but the default is list"
    ]


def test_rejects_override_that_changes_scalar_type() -> None:
    assert helm_value_errors("nvidia-device-plugin", "0.20.0", {"devicePlugin": {"enabled": "true"}}) == [
        "nvidia-device-plugin 0.20.0: devicePlugin.enabled: override is string but the default is bool"
    ]


def test_accepts_any_value_where_default_is_null() -> None:
    values = {"migStrategy": "single", "cdi": {"featureFlags": ["a"]}, "runtimeClassName": "nvidia"}
    assert helm_value_errors("nvidia-device-plugin", "0.20.0", values) == []


def test_accepts_null_override_that_removes_a_default() -> None:
    assert helm_value_errors("nvidia-device-plugin", "0.20.0", {"affinity": None}) == []


def test_int_may_replace_float_but_not_the_reverse() -> None:
    # None of the pinned charts has a float default, so the rule is checked directly.
    assert reference._kind_error("float", "int") is None
    assert reference._kind_error("int", "float") == "override is float but the default is int"


def test_rejects_chart_version_without_reference() -> None:
    assert helm_value_errors("nvidia-device-plugin", "0.19.0", {}) == [
        "nvidia-device-plugin 0.19.0: no reference values for this chart version (have: 0.20.0)"
    ]


def test_chart_info_uses_published_version_over_git_placeholder() -> None:
    assert chart_info("gateway-helm", "1.9.0") == {
        "name": "gateway-helm",
        "version": "v1.9.0",
        "appVersion": "latest",
        "kubeVersion": None,
        "repository": "oci://docker.io/envoyproxy/gateway-helm",
        "dependencies": [{"name": "crds", "alias": None}],
    }
    assert chart_info("lws", "0.10.0")["version"] == "v0.10.0"
    assert chart_info("nvidia-device-plugin", "0.20.0")["dependencies"] == [
        {"name": "node-feature-discovery", "alias": "nfd"}
    ]


def test_chart_info_returns_a_copy() -> None:
    chart_info("keda", "2.20.2")["version"] = "changed"
    assert chart_info("keda", "2.20.2")["version"] == "2.20.2"


# ---------------------------------------------------------------------------------------------
# vLLM flags


def test_accepts_typical_serve_args() -> None:
    args = [
        MODEL,
        "--served-model-name", "llama", "llama-8b",
        "--port", "8000",
        "--max-model-len=8192",
        "-tp", "1",
        "--gpu-memory-utilization", "0.9",
        "--dtype", "bfloat16",
        "--kv-cache-dtype", "fp8",
        "--quantization", "awq",
        "--enable-prefix-caching",
        "--no-enable-log-requests",
        "--compilation-config.mode", "3",
        "-O3",
        "--seed", "-1",
        "--uvicorn-log-level", "warning",
    ]  # fmt: skip
    assert vllm_flag_errors(args) == []


def test_rejects_value_flag_without_value() -> None:
    assert vllm_flag_errors([MODEL, "--max-model-len"]) == [
        "--max-model-len expects a value but none follows"
    ]
    assert vllm_flag_errors([MODEL, "--max-model-len", "--port", "8000"]) == [
        "--max-model-len expects a value but none follows"
    ]


def test_rejects_value_after_boolean_flag() -> None:
    assert vllm_flag_errors([MODEL, "--enable-prefix-caching", "true"]) == [
        "--enable-prefix-caching is a switch and takes no value, but is followed by 'true'; "
        "write --enable-prefix-caching or --disable-prefix-caching"
    ]
    assert vllm_flag_errors([MODEL, "--enable-prefix-caching=false"]) == [
        "--enable-prefix-caching is a switch and takes no value, but was given '=false'; "
        "write --enable-prefix-caching or --disable-prefix-caching"
    ]


def test_rejects_value_after_store_true_switch() -> None:
    assert vllm_flag_errors([MODEL, "--disable-log-stats", "1"]) == [
        "--disable-log-stats is a switch and takes no value, but is followed by '1'"
    ]


def test_rejects_unknown_option_with_close_matches() -> None:
    assert vllm_flag_errors([MODEL, "--max-model-length", "8192"]) == [
        "unknown vllm serve option --max-model-length (vLLM 0.33.0); "
        "did you mean --max-model-len, --max-log-len, --model-impl?"
    ]


def test_rejects_underscore_spelling() -> None:
    assert vllm_flag_errors([MODEL, "--max_num_seqs", "64"]) == [
        "--max_num_seqs must be written --max-num-seqs"
    ]


def test_rejects_args_that_do_not_start_with_the_model() -> None:
    assert vllm_flag_errors(["--model", MODEL]) == [
        "the first argument must be the model (positional), got '--model'"
    ]
    assert vllm_flag_errors([]) == ["vllm serve args are empty: the first argument must be the model"]


def test_rejects_stray_positional_argument() -> None:
    assert vllm_flag_errors([MODEL, "--port", "8000", "9000"]) == [
        "unexpected positional argument '9000' (only the model is positional)"
    ]


def test_rejects_value_outside_choices() -> None:
    assert vllm_flag_errors([MODEL, "--dtype", "bf16"]) == [
        "--dtype 'bf16' is not one of its choices: auto, bfloat16, float, float16, float32, half"
    ]


def test_compares_integer_choices_as_text() -> None:
    assert vllm_flag_errors([MODEL, "--max-lora-rank", "64"]) == []
    assert vllm_flag_errors([MODEL, "--max-lora-rank", "63"])[0].startswith(
        "--max-lora-rank '63' is not one of its choices: 1, 8, 16"
    )


def test_rejects_unknown_kv_cache_dtype() -> None:
    errors = vllm_flag_errors([MODEL, "--kv-cache-dtype", "fp4"])
    assert len(errors) == 1
    assert errors[0].startswith("--kv-cache-dtype 'fp4' is not a known value in vLLM 0.33.0: auto, bfloat16")


def test_rejects_quantization_vllm_rejects_after_parsing() -> None:
    errors = vllm_flag_errors([MODEL, "-q", "awq4"])
    assert len(errors) == 1
    assert errors[0].startswith(
        "-q 'awq4' is rejected by vLLM 0.33.0 after parsing; known: auto_awq, auto_gptq"
    )


def test_accepts_none_literal_where_flag_allows_it() -> None:
    assert vllm_flag_errors([MODEL, "--quantization", "None"]) == []


def test_requires_one_or_more_values_for_nargs_plus() -> None:
    assert vllm_flag_errors([MODEL, "--api-key", "k1", "k2"]) == []
    assert vllm_flag_errors([MODEL, "--served-model-name", "--port", "8000"]) == [
        "--served-model-name expects one or more values but none follows"
    ]


def test_rejects_deprecated_flag() -> None:
    assert vllm_flag_errors([MODEL, "--disable-cascade-attn"]) == [
        "--disable-cascade-attn is deprecated in vLLM 0.33.0"
    ]


def test_rejects_flag_given_twice_under_two_spellings() -> None:
    assert vllm_flag_errors([MODEL, "-tp", "2", "--tensor-parallel-size", "4"]) == [
        "--tensor-parallel-size is given more than once (also as -tp); argparse keeps only the last"
    ]


def test_allows_repeating_a_repeatable_flag() -> None:
    assert vllm_flag_errors([MODEL, "--middleware", "a.B", "--middleware", "c.D"]) == []


def test_rejects_unpinned_vllm_version() -> None:
    assert vllm_flag_errors([MODEL], version="0.1.0") == ["no vLLM 0.1.0 flag reference (have: 0.33.0)"]


# ---------------------------------------------------------------------------------------------
# vLLM metrics


def test_series_names_include_histogram_counter_gauge_and_http_series() -> None:
    names = vllm_series_names()
    assert {
        "vllm:time_to_first_token_seconds_bucket",
        "vllm:time_to_first_token_seconds_sum",
        "vllm:time_to_first_token_seconds_count",
        "vllm:prompt_tokens_total",
        "vllm:num_requests_waiting",
        "http_requests_total",
        "http_request_duration_seconds_bucket",
    } <= names
    assert "vllm:time_to_first_token_seconds" not in names
    assert "vllm:prompt_tokens" not in names


def test_metrics_are_keyed_by_family_name() -> None:
    metrics = vllm_metrics()
    assert metrics["vllm:num_requests_waiting"]["type"] == "gauge"
    assert metrics["vllm:prompt_tokens"]["name"] == "vllm:prompt_tokens_total"
    assert metrics["vllm:time_to_first_token_seconds"]["type"] == "histogram"
    assert metrics["http_requests"]["labels"] == ["handler", "method", "status"]


def test_metric_labels_add_le_to_histogram_buckets() -> None:
    assert vllm_metric_labels("vllm:num_requests_waiting") == {"model_name", "engine"}
    assert vllm_metric_labels("vllm:time_to_first_token_seconds_bucket") == {"model_name", "engine", "le"}
    assert vllm_metric_labels("vllm:time_to_first_token_seconds_sum") == {"model_name", "engine"}


def test_metric_labels_reject_unknown_series_with_suggestion() -> None:
    with pytest.raises(
        KeyError,
        match="unknown vLLM 0.33.0 series 'vllm:num_request_waiting'; did you mean vllm:num_requests_waiting",
    ):
        vllm_metric_labels("vllm:num_request_waiting")


# ---------------------------------------------------------------------------------------------
# DCGM fields and pins


def test_default_dcgm_fields_are_the_uncommented_rows() -> None:
    default = dcgm_fields("default")
    assert default["DCGM_FI_DEV_GPU_UTIL"] == "gauge"
    assert default["DCGM_FI_DEV_FB_USED"] == "gauge"
    assert default["DCGM_FI_PROF_GR_ENGINE_ACTIVE"] == "gauge"
    assert "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL" not in default  # commented out upstream


def test_all_dcgm_fields_include_commented_rows_with_live_type_winning() -> None:
    every = dcgm_fields("all")
    assert every["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"] == "counter"
    assert every["DCGM_FI_DEV_BRAND"] == "label"
    # Commented "counter" row and live "gauge" row share a name; the exported one is the gauge.
    assert every["DCGM_FI_PROF_PCIE_TX_BYTES"] == "gauge"
    assert set(dcgm_fields("default")) <= set(every) and set(dcgm_fields("dcp")) <= set(every)


def test_dcgm_fields_rejects_unknown_kind() -> None:
    with pytest.raises(ValueError, match="dcgm_fields kind must be one of default, dcp, all, not 'prof'"):
        dcgm_fields("prof")


def test_pinned_versions_match_the_reference_pins() -> None:
    pins = pinned_versions()
    assert pins["vllm"] == "0.33.0"
    assert pins["nvidia-device-plugin"] == "0.20.0"
    assert pins["kube-prometheus-stack"] == "88.5.3"


# ---------------------------------------------------------------------------------------------
# The fixtures themselves


def _description_strings(node: Any, path: str = "") -> list[str]:
    # A property *named* description maps to a schema (a dict); prose maps to a string.
    found: list[str] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("description", "help", "documentation") and isinstance(value, str):
                found.append(f"{path}.{key}")
            found.extend(_description_strings(value, f"{path}.{key}"))
    elif isinstance(node, list):
        for index, item in enumerate(node):
            found.extend(_description_strings(item, f"{path}[{index}]"))
    return found


def test_fixtures_hold_no_upstream_prose_and_stay_small() -> None:
    files = sorted(reference.FIXTURES.rglob("*.json"))
    assert files
    for path in files:
        assert _description_strings(json.loads(path.read_text(encoding="utf-8"))) == [], path
    assert sum(path.stat().st_size for path in files) < 1_500_000


@pytest.mark.skipif(
    not (SHARED_REFERENCE / "index.json").is_file(),
    reason="../shared/reference is not checked out next to the repo; fixtures cannot be re-derived",
)
def test_fixtures_are_up_to_date_with_the_reference(tmp_path: Path) -> None:
    out = tmp_path / "reference"
    subprocess.run(
        [sys.executable, str(REPO_ROOT / "tools" / "derive_reference_fixtures.py"),
         "--reference", str(SHARED_REFERENCE), "--out", str(out), "--manifests-out", str(tmp_path / "crds")],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    # The CRD manifests the program applies are derived too, byte for byte.
    applied = REPO_ROOT / "llm_serving" / "platform" / "crds"
    manifests = sorted(p.name for p in (tmp_path / "crds").glob("*.yaml"))
    assert manifests == sorted(p.name for p in applied.glob("*.yaml"))
    assert filecmp.cmpfiles(tmp_path / "crds", applied, manifests, shallow=False)[1:] == ([], [])
    derived = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.json"))
    committed = sorted(
        p.relative_to(reference.FIXTURES).as_posix() for p in reference.FIXTURES.rglob("*.json")
    )
    assert derived == committed
    _, mismatch, errors = filecmp.cmpfiles(out, reference.FIXTURES, derived, shallow=False)
    assert (mismatch, errors) == ([], []), "run tools/derive_reference_fixtures.py and commit the result"


def test_a_kind_without_a_reference_crd_is_checked_for_its_shape_only():
    ok = {"apiVersion": "gateway.envoyproxy.io/v1alpha1", "kind": "HTTPRouteFilter",
          "metadata": {"name": "f", "namespace": "n"}, "spec": {"directResponse": {"statusCode": 404}}}
    assert reference.custom_resource_errors(ok) == []
    for spec in ({}, {"directResponse": {}, "urlRewrite": {}}, {"redirect": {}}):
        assert reference.custom_resource_errors({**ok, "spec": spec}) != []
    assert reference.custom_resource_errors({**ok, "metadata": {"name": "f"}}) != []
