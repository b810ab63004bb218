"""Overload admission: prod's picker holds and sheds at thresholds derived from its SLO and autoscaling, the
config is one the pinned picker reads (tests/support/picker_config.py), the edge's 429 carries Retry-After
in a BackendTrafficPolicy the CRD accepts, and bad settings are refused with one line each."""

from __future__ import annotations

from typing import Any

import pydantic
import pytest

from llm_serving.edge.objects import overload_response
from llm_serving.platform.args import validate
from llm_serving.routing import PICKER_METRIC_TYPES, Admission
from llm_serving.routing.objects import picker_config
from llm_serving.stack.admission import model_admission
from stacks import checks
from stacks.config import ServingStackArgs
from stacks.config.problems import from_validation_error
from tests.stacks.checks.test_gpu_node_group_checks import BASE
from tests.support import promql, reference
from tests.support.picker_config import picker_config_errors
from tests.support.promql_eval import Store, firing

MODEL = "llama-70b"
SCORING = (
    "schedulingProfiles:\n"
    "- name: default\n"
    "  plugins:\n"
    "  - pluginRef: queue-scorer\n"
    "    weight: 2\n"
    "  - pluginRef: kv-cache-utilization-scorer\n"
    "    weight: 2\n"
    "  - pluginRef: prefix-cache-scorer\n"
    "    weight: 3\n"
)
PLUGINS = (
    "plugins:\n"
    "- type: queue-scorer\n"
    "- type: kv-cache-utilization-scorer\n"
    "- type: prefix-cache-scorer\n"
    "- type: metrics-data-source\n"
    "  parameters:\n"
    "    scheme: http\n"
    "    path: /metrics\n"
    "- type: core-metrics-extractor\n"
)


def _config(overload: dict[str, Any] | None = None, autoscaling: dict[str, Any] | None = None,
            slo: dict[str, Any] | None = None, edge: dict[str, Any] | None = None) -> ServingStackArgs:
    model = {**BASE["models"][0], "route": {"routing": "inferencePool"},
             "autoscaling": {"minReplicas": 1, "maxReplicas": 3, **(autoscaling or {})}, "slo": slo or {}}
    return validate(ServingStackArgs, {**BASE, "models": [model], "edge": {
        **BASE["edge"], "inferenceRouting": {"overload": overload or {}}, **(edge or {})}})


def _lines(**changes: Any) -> list[str]:
    return [p.line() for p in checks.check(_config(**changes))]


# --- what prod renders -------------------------------------------------------------------------------------


def test_prods_picker_holds_requests_past_kedas_targets_and_sheds_after_the_ttft_objective(rendered):
    config = rendered["prod"].manifest("ConfigMap", f"{MODEL}-epp")["data"]["config.yaml"]
    # slo.ttftP95Seconds 2 -> the queue wait; KEDA's 5 waiting / 0.8 -> 7 per replica; KV 0.8 / 0.8 -> 1.
    assert config == (
        "apiVersion: llm-d.ai/v1alpha1\n"
        "kind: EndpointPickerConfig\n"
        "featureGates:\n"
        "- flowControl\n"
        + PLUGINS +
        "- name: saturation-detector\n"
        "  type: utilization-detector\n"
        "  parameters:\n"
        "    queueDepthThreshold: 7\n"
        "    kvCacheUtilThreshold: 1\n"
        "    metricsStalenessThreshold: 2s\n"
        + SCORING +
        "flowControl:\n"
        "  defaultRequestTTL: 2s\n"
        "  saturationDetector:\n"
        "    pluginRef: saturation-detector\n"
        "  defaultNegativePriorityBand:\n"
        "    priority: -1\n"
        '    maxRequests: "7"\n'
    )
    assert picker_config_errors(config) == []


def test_prods_429_carries_retry_after_and_an_openai_error_body(rendered):
    policy = rendered["prod"].manifest("BackendTrafficPolicy", MODEL)
    assert policy["spec"]["responseOverride"] == [{
        "match": {"statusCodes": [{"type": "Value", "value": 429}]},
        "source": "Local",
        "response": {
            "contentType": "application/json",
            "body": {"type": "Inline", "inline": '{"error": {"message": "The model is at capacity; retry after 2 s.", '
                                                 '"type": "server_overloaded", "param": null, "code": 429}}'},
            "header": {"set": [{"name": "Retry-After", "value": "2"}]},
        },
    }]
    assert reference.custom_resource_errors(policy) == []
    # The CRD check can fail: a source Envoy Gateway v1.9.0 does not know is refused.
    bad = {**policy, "spec": {**policy["spec"], "responseOverride": [
        {**overload_response(2), "source": "Upstream"}]}}
    assert len(reference.custom_resource_errors(bad)) == 1
    assert "Upstream" in reference.custom_resource_errors(bad)[0]


def test_a_route_through_its_service_gets_no_override(dev_awake):
    # A model of one replica routes through its Service: vLLM's own answers, no picker, nothing to rewrite.
    for obj in dev_awake.manifests:
        if obj["kind"] == "BackendTrafficPolicy":
            assert "responseOverride" not in obj["spec"]


# --- derivation and switches --------------------------------------------------------------------------------


def test_thresholds_follow_the_models_slo_and_autoscaling_targets():
    config = _config(autoscaling={"waitingPerReplicaTarget": 4, "ttftTargetFraction": 0.5, "kvUsageTarget": 0.45},
                     slo={"ttftP95Seconds": 1.5})
    admission = model_admission(config, config.models[0])
    assert admission == Admission(flow_control=True, queue_wait_seconds=1.5, queue_depth_per_replica=8,
                                  kv_cache_usage=0.9, sheddable_queue_requests=8, retry_after_seconds=2)
    text = picker_config(admission)
    assert "  defaultRequestTTL: 1500ms\n" in text and "    kvCacheUtilThreshold: 0.9\n" in text
    assert picker_config_errors(text) == []


def test_set_keys_override_every_derived_number():
    config = _config({"queueWaitSeconds": 5, "queueDepthPerReplica": 12, "kvCacheUsage": 0.95,
                      "sheddableQueueRequests": 3, "retryAfterSeconds": 10})
    assert model_admission(config, config.models[0]) == Admission(
        flow_control=True, queue_wait_seconds=5, queue_depth_per_replica=12, kv_cache_usage=0.95,
        sheddable_queue_requests=3, retry_after_seconds=10)


def test_flow_control_off_leaves_only_the_detector_that_refuses_negative_priorities():
    config = _config({"flowControl": False})
    text = picker_config(model_admission(config, config.models[0]))
    assert text == (
        "apiVersion: llm-d.ai/v1alpha1\n"
        "kind: EndpointPickerConfig\n"
        + PLUGINS +
        "- name: saturation-detector\n"
        "  type: utilization-detector\n"
        "  parameters:\n"
        "    queueDepthThreshold: 7\n"
        "    kvCacheUtilThreshold: 1\n"
        "    metricsStalenessThreshold: 2s\n"
        + SCORING +
        "flowControl:\n"
        "  saturationDetector:\n"
        "    pluginRef: saturation-detector\n"
    )
    assert picker_config_errors(text) == []


# --- the schema check fails where the picker would misread ------------------------------------------------


def test_the_picker_schema_names_a_misspelt_key_a_bad_threshold_and_a_dangling_reference():
    good = picker_config(model_admission(_config(), _config().models[0]))
    assert picker_config_errors(good.replace("defaultRequestTTL", "defaultRequestTtl")) == [
        "flowControl: Additional properties are not allowed ('defaultRequestTtl' was unexpected)"]
    assert picker_config_errors(good.replace("kvCacheUtilThreshold: 1", "kvCacheUtilThreshold: 1.5")) == [
        "plugins.5.parameters: 1.5 is greater than the maximum of 1"]
    assert picker_config_errors(good.replace("pluginRef: saturation-detector", "pluginRef: detector")) == [
        "pluginRef 'detector' names no plugin (declared: ['core-metrics-extractor', 'kv-cache-utilization-scorer', "
        "'metrics-data-source', 'prefix-cache-scorer', 'queue-scorer', 'saturation-detector'])"]


def test_admission_refuses_values_outside_the_pickers_ranges():
    with pytest.raises(ValueError, match=r"kv_cache_usage 1.2 is outside \(0, 1\]"):
        Admission(True, 2, 7, 1.2, 7, 2)
    with pytest.raises(ValueError, match="queue wait 0s must be positive"):
        Admission(True, 0, 7, 1.0, 7, 2)
    with pytest.raises(ValueError, match="Retry-After 0s is outside"):
        overload_response(0)


# --- what a preview refuses ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("key", "value", "line"), [
    ("kvCacheUsage", 1.5, "kvCacheUsage: Input should be less than or equal to 1 (got 1.5; expected <= 1.0)"),
    ("retryAfterSeconds", 0, "retryAfterSeconds: Input should be greater than or equal to 1 (got 0; expected >= 1)"),
    ("queueWaitSeconds", 0, "queueWaitSeconds: Input should be greater than 0 (got 0; expected > 0.0)"),
    ("flowControl", "sometimes", 'flowControl: wrong type (got "sometimes"; expected true or false)'),
])
def test_out_of_range_overload_keys_are_refused_with_one_line(key, value, line):
    data = {**BASE, "edge": {**BASE["edge"], "inferenceRouting": {"overload": {key: value}}}}
    with pytest.raises(pydantic.ValidationError) as caught:
        validate(ServingStackArgs, data)
    assert [p.line() for p in from_validation_error(caught.value, ServingStackArgs, data)] == [
        f"llm-serving:edge.inferenceRouting.overload.{line}"]


def test_a_queue_wait_envoy_would_cut_first_is_refused():
    assert _lines(overload={"queueWaitSeconds": 300}) == [
        "llm-serving:edge.inferenceRouting.overload.queueWaitSeconds: qwen-7b: picker queue wait must be < Envoy "
        "stream idle timeout (300 s): a request waiting for a replica is cut with a 504 instead of refused with 429 "
        "(got 300; expected < 300)"]
    # A fraction of a second counts whole: 299.5 s of waiting still reaches the 300 s timeout's second.
    assert len(_lines(overload={"queueWaitSeconds": 299.5})) == 1
    assert _lines(overload={"queueWaitSeconds": 299}) == []
    # With flow control off nothing waits in the picker, so nothing to compare.
    assert _lines(overload={"queueWaitSeconds": 300, "flowControl": False}) == []


def test_thresholds_at_or_below_kedas_targets_are_refused():
    assert _lines(overload={"queueDepthPerReplica": 5, "kvCacheUsage": 0.7}) == [
        "llm-serving:edge.inferenceRouting.overload.queueDepthPerReplica: the picker would hold qwen-7b's requests "
        "before vLLM's queue reaches the autoscaler's 5 per replica, so KEDA would never add a replica (got 5; "
        "expected > models[qwen-7b].autoscaling.waitingPerReplicaTarget, or unset)",
        "llm-serving:edge.inferenceRouting.overload.kvCacheUsage: the picker would hold qwen-7b's requests before "
        "KV usage reaches the autoscaler's 0.8, so KEDA would never add a replica (got 0.7; expected >= "
        "models[qwen-7b].autoscaling.kvUsageTarget, or unset)"]


def test_the_derived_defaults_pass_every_rule():
    assert _lines() == []


# --- alerts on the overload path ----------------------------------------------------------------------------

JOB = 'job="llm-serving/llama-70b-epp"'


def _picker_rules(rendered) -> dict[str, dict[str, Any]]:
    # The picker's own group (the edge TTFT groups beside it are tested in test_alerts.py).
    groups = rendered["prod"].manifest("PrometheusRule", "endpoint-picker-alerts")["spec"]["groups"]
    (group,) = [g for g in groups if g["name"].startswith("endpoint-picker-")]
    return {r["alert"]: r for r in group["rules"]}


def test_prod_warns_when_shedding_outlasts_adding_a_replica_or_stale_metrics_halt_dispatch(rendered):
    rules = _picker_rules(rendered)
    shedding = rules["ModelShedding"]
    assert shedding["expr"] == (f'sum(rate(llm_d_epp_flow_control_requests_total{{{JOB}, '
                                'outcome=~"RejectedCapacity|EvictedTTL"}[5m])) > 0')
    # prod adds a replica in 1,140 s (a node, the image pull, the cold start): 19 minutes, plus the 5 the
    # rate still shows shedding after it stopped.
    assert (shedding["for"], shedding["labels"]["severity"]) == ("24m", "warning")
    stale = rules["EndpointPickerMetricsStale"]
    assert stale["expr"] == f"max(llm_d_epp_flow_control_stale_endpoints{{{JOB}}}) > 0"
    assert (stale["for"], stale["labels"]["severity"]) == ("5m", "warning")
    # Shedding is not a picker failure: EndpointPickerErrors leaves the 429s out.
    assert rules["EndpointPickerErrors"]["expr"].startswith(
        f'sum(rate(llm_d_epp_request_error_total{{{JOB}, error_code!~"ResourceExhausted|429"}}[5m])) / ')
    for rule in (shedding, stale, rules["EndpointPickerErrors"]):
        assert promql.parse_errors(rule["expr"]) == []
        for name in promql.metric_names(rule["expr"]):
            assert name in PICKER_METRIC_TYPES
            assert promql.label_matchers(rule["expr"])[name] - {"job"} <= PICKER_METRIC_TYPES[name][1]


def test_a_burst_shed_while_a_replica_comes_up_warns_nobody_and_a_lasting_one_does(rendered):
    rule = _picker_rules(rendered)["ModelShedding"]

    def walk(shed_seconds: int) -> list[float]:
        store = Store()
        total, samples = 0.0, []
        for t in range(-3600, 3600 + 1, 15):
            total += (3.0 if 0 <= t < shed_seconds else 0.0) * 15  # 3 requests/s refused
            samples.append((float(t), total))
        store.add("llm_d_epp_flow_control_requests_total",
                  {"job": "llm-serving/llama-70b-epp", "outcome": "EvictedTTL", "priority": "0",
                   "inference_pool": MODEL}, samples)
        return firing(rule, store, 0, 3600)

    assert walk(1140) == []  # the new replica serves and the shedding stops
    fired = walk(3600)
    assert fired and fired[0] == 24 * 60  # positive from the first refused request, then held 24 minutes


def test_a_replica_swaps_stale_first_scrape_warns_nobody_and_a_blocked_scrape_path_does(rendered):
    rule = _picker_rules(rendered)["EndpointPickerMetricsStale"]

    def walk(stale_at) -> list[float]:
        store = Store()
        store.add("llm_d_epp_flow_control_stale_endpoints",
                  {"job": "llm-serving/llama-70b-epp", "detector": "saturation-detector"},
                  [(float(t), float(stale_at(t))) for t in range(0, 1800 + 1, 15)])
        return firing(rule, store, 0, 1800)

    # A rollout: each new replica is stale for the 30 s before the picker's first scrape of it.
    assert walk(lambda t: 1 if any(swap <= t < swap + 30 for swap in (300, 1140)) else 0) == []
    assert walk(lambda t: 2 if t >= 600 else 0)[0] == 600 + 5 * 60  # a blocked scrape path, after 5 minutes


def test_a_burst_beyond_admission_asks_the_autoscaler_for_every_replica_it_needs_at_once(rendered):
    # The picker admits at most `queueDepthPerReplica` waiting requests per replica to vLLM and holds the rest: the
    # queue trigger counts both, so the HPA's step is the demand, not depth / target of the fleet per cold start.
    import math

    from stacks.config.files import stack_file_path
    from stacks.environment import load_stack_file
    from tests.support.promql_eval import evaluate

    config = load_stack_file(stack_file_path("prod"))[1]
    model = config.models[0]
    depth = model_admission(config, model).queue_depth_per_replica
    target = model.autoscaling.waiting_per_replica_target
    scaled = rendered["prod"].manifest("ScaledObject", model.name)
    (queue,) = [t for t in scaled["spec"]["triggers"] if t["name"] == "queue_waiting"]
    assert (queue["metricType"], float(queue["metadata"]["threshold"])) == ("AverageValue", target)
    replicas, held = 2, 300  # prod at its minimum, a burst of 300 requests more than the batches run
    store = Store()
    for pod in range(replicas):  # each replica's queue is full to the admission depth
        store.add("vllm:num_requests_waiting", {"namespace": "llm-serving", "model_name": model.name,
                                                "pod": f"{model.name}-{pod}"}, [(0.0, float(depth))])
    store.add("llm_d_epp_flow_control_queue_size", {"namespace": "llm-serving", "inference_pool": model.name,
                                                    "priority": "0"}, [(0.0, float(held))])
    (total,) = evaluate(queue["metadata"]["query"], store, 0.0).values()
    wanted = math.ceil(total / target)  # AverageValue: ceil(sum / target) whatever the current count
    assert wanted == math.ceil((replicas * depth + held) / target)
    # vLLM's own count alone would have asked for depth / target of the fleet, the admission cap's ceiling.
    assert math.ceil(replicas * depth / target) < wanted
    assert depth > target  # the relation admission_rules keep: a full replica always asks for one more
