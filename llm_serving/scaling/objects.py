"""Autoscaling manifests for vLLM Deployments: KEDA ScaledObjects or HPAs on prometheus-adapter metrics.

Pure data, no Pulumi: queue depth is the primary signal and KV-cache usage the secondary one, with the
same slow-down/fast-up HPA behaviour in both modes, plus the KEDA and prometheus-adapter chart values.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from llm_serving.platform import NAMESPACE_LABEL, POD_LABEL, check_dns_label, check_label_value

# Series names in vLLM 0.33.0 (vllm/v1/metrics/loggers.py; tests check them against the reference
# list). Both gauges carry only `model_name` and `engine`; `namespace`, `pod` and `node` come from
# the PodMonitor (llm_serving.observability; Prometheus Operator adds namespace and pod as target
# labels; we relabel node).
WAITING_METRIC = "vllm:num_requests_waiting"
KV_USAGE_METRIC = "vllm:kv_cache_usage_perc"
# Histogram with the same labels (plus `le`); default buckets 1 ms to 2560 s (vllm/v1/metrics).
TTFT_BUCKET_METRIC = "vllm:time_to_first_token_seconds_bucket"
# Long enough for a p95 over a few scrapes, short enough to react within the scale-up window.
TTFT_RATE_WINDOW = "2m"

# prometheus-adapter exposes custom metrics under Kubernetes-style names; ':' is not allowed there,
# so the vLLM names are renamed with `name.as` (vllm-project/production-stack
# observability/prom-adapter.yaml does the same for the queue).
ADAPTER_WAITING_METRIC = "vllm_num_requests_waiting"
ADAPTER_KV_USAGE_METRIC = "vllm_kv_cache_usage_perc"
# What an HPA reads through the custom metrics API: an adapter of the cluster's own must serve both.
ADAPTER_METRICS = (ADAPTER_WAITING_METRIC, ADAPTER_KV_USAGE_METRIC)

# Scale-up and scale-down policies from the AWS EKS guide "Autoscaling inference with HPA and KEDA"
# (awsdocs amazon-eks-user-guide latest/ug/ml/ml-inference-autoscaling-hpa-keda.adoc):
# up by 2 pods per 60 s with selectPolicy Max, down by 1 pod per 120 s with selectPolicy Min, because
# GPU pods are slow to start. We add a 100 %/60 s policy so a larger fleet can double per minute.
SCALE_UP_PODS = 2
SCALE_UP_PERCENT = 100
SCALE_UP_PERIOD_SECONDS = 60
SCALE_DOWN_PODS = 1
SCALE_DOWN_PERIOD_SECONDS = 120
# autoscaling/v2 API validation caps the stabilization window at 3600 s and a policy period at
# 1800 s (kubernetes pkg/apis/autoscaling/validation: MaxStabilizationWindowSeconds, MaxPeriodSeconds).
MAX_STABILIZATION_WINDOW_SECONDS = 3600

# Consecutive failed Prometheus queries before KEDA applies the fallback (KEDA 2.20 scaledobject-spec
# example value; production-stack's chart default is also 3). At a 15 s poll that is about 45 s.
FALLBACK_FAILURE_THRESHOLD = 3
# KEDA fallback behaviours (CRD enum, since KEDA 2.17): `currentReplicas` holds the replica count
# while Prometheus is unreachable. A fixed fallback count would start (or stop) replicas blind: a
# jump to max replicas is several simultaneous cold starts of a model nobody may be calling, and a
# drop is lost capacity. `fallback.replicas` is required by the CRD but unused with this behaviour.
FALLBACK_BEHAVIOR = "currentReplicas"

_PROM_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


def _check_int(field: str, value: int, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{field}={value!r}: expected an integer from {low} to {high}")


def _check_number(field: str, value: float, *, low: float, high: float, low_open: bool = False) -> None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    ok = ok and (value > low if low_open else value >= low) and value <= high
    if not ok:
        bracket = "(" if low_open else "["
        raise ValueError(f"{field}={value!r}: expected a number in {bracket}{low}, {high}]")


@dataclass(frozen=True)
class ScalingTarget:
    """One vLLM Deployment and how it should scale."""

    deployment_name: str
    namespace: str
    served_model_name: str  # the `model_name` label value on vLLM metrics (--served-model-name)
    min_replicas: int  # 0 is scale-to-zero (KEDA only)
    max_replicas: int
    waiting_per_replica_target: float  # queued requests per replica the autoscaler aims for
    waiting_activation: float  # queued requests that make the queue trigger active (0 <-> 1)
    kv_usage_target: float  # mean KV-cache usage across replicas, (0, 1]
    kv_usage_activation: float  # mean KV-cache usage that makes the KV trigger active
    scale_down_window_seconds: int
    scale_up_window_seconds: int
    cooldown_seconds: int  # KEDA cooldownPeriod: only used when scaling to zero
    ttft_target_seconds: float  # p95 time to first token at which to scale out
    polling_interval_seconds: int = 15
    # A multi-node model scales whole LeaderWorkerSet groups through the LWS scale subresource
    # (specReplicasPath .spec.replicas; its selector picks the leaders: LWS v0.10.0 CRD).
    workload_kind: str = "Deployment"
    # Scale to zero (min_replicas 0): the query of the requests the endpoint picker holds for the model, which
    # exists while no replica does (vLLM's own series vanish with the pods), and how many wake it.
    wake_query: str | None = None
    wake_on_waiting: int = 1
    # The requests the model's endpoint picker holds in its flow-control queue (None: no picker, or no flow
    # control). They are demand the replicas cannot take yet: the queue trigger counts them with vLLM's own waiting
    # requests, so the picker's admission cap never hides demand from the autoscaler.
    held_query: str | None = None

    @property
    def scale_target_ref(self) -> dict[str, str]:
        api = "leaderworkerset.x-k8s.io/v1" if self.workload_kind == "LeaderWorkerSet" else "apps/v1"
        return {"apiVersion": api, "kind": self.workload_kind, "name": self.deployment_name}

    def __post_init__(self) -> None:
        check_dns_label("deployment_name", self.deployment_name)
        check_dns_label("namespace", self.namespace)
        check_label_value("served_model_name", self.served_model_name)
        _check_int("max_replicas", self.max_replicas, 1, 1000)
        _check_int("min_replicas", self.min_replicas, 0, 1000)
        if self.min_replicas > self.max_replicas:
            raise ValueError(f"min_replicas={self.min_replicas} is above max_replicas={self.max_replicas}")
        _check_number("waiting_per_replica_target", self.waiting_per_replica_target, low=0, high=1e6, low_open=True)
        _check_number("waiting_activation", self.waiting_activation, low=0, high=1e6)
        _check_number("kv_usage_target", self.kv_usage_target, low=0, high=1, low_open=True)
        _check_number("kv_usage_activation", self.kv_usage_activation, low=0, high=1)
        _check_int("scale_down_window_seconds", self.scale_down_window_seconds, 0, MAX_STABILIZATION_WINDOW_SECONDS)
        _check_int("scale_up_window_seconds", self.scale_up_window_seconds, 0, MAX_STABILIZATION_WINDOW_SECONDS)
        _check_int("cooldown_seconds", self.cooldown_seconds, 0, 7 * 24 * 3600)
        _check_number("ttft_target_seconds", self.ttft_target_seconds, low=0, high=600, low_open=True)
        _check_int("polling_interval_seconds", self.polling_interval_seconds, 1, 3600)
        if self.min_replicas == 0 and self.wake_query is None:
            raise ValueError(f"{self.deployment_name}: min_replicas=0 needs a wake query: at zero replicas vLLM "
                             "reports no queue, so only the picker's held requests can wake the model")
        _check_int("wake_on_waiting", self.wake_on_waiting, 1, 1000)


def _selector(t: ScalingTarget) -> str:
    return f'{{{NAMESPACE_LABEL}="{t.namespace}", model_name="{t.served_model_name}"}}'


def queue_query(t: ScalingTarget) -> str:
    """Requests waiting across every replica (and engine) of the model, plus those its picker holds: one value.

    KEDA's Prometheus scaler needs a single-element result (keda.sh docs, scalers/prometheus), hence
    sum(); `or vector(0)` reports an idle model as 0 rather than as an empty result.

    The picker admits at most its queue depth per replica to vLLM (admission's `queueDepthPerReplica`, about
    waitingPerReplicaTarget / ttftTargetFraction) and holds the rest. vLLM's waiting count alone then tops out at
    that depth times the replicas, and the HPA, wanting ceil(sum / target), could add only depth/target - 1 of
    the fleet per cold start (1.4x with 7 and 5): minutes of 429s per step. With the held requests added, the
    sum is the demand, and one step asks for every replica it needs (within maxReplicas and the scale-up policy).
    """
    waiting = f"(sum({WAITING_METRIC}{_selector(t)}) or vector(0))"
    if t.held_query is None:
        return f"sum({WAITING_METRIC}{_selector(t)}) or vector(0)"
    return f"{waiting} + ({t.held_query})"


def kv_query(t: ScalingTarget) -> str:
    """Mean KV-cache usage over the model's engines: one value in [0, 1].

    avg, not max: with the `Value` metric type the HPA wants ceil(ready replicas * value / target)
    replicas, i.e. the utilisation rule it applies to CPU, which needs the mean. max would let one
    replica holding a few long contexts (load is never perfectly balanced) multiply the whole fleet.
    Each engine has its own KV cache, so averaging engine series is right with data parallelism too.
    """
    return f"avg({KV_USAGE_METRIC}{_selector(t)}) or vector(0)"


def ttft_query(t: ScalingTarget) -> str:
    """p95 time to first token over the model's engines in the last 2 minutes: one value.

    With no traffic every bucket rate is 0 and histogram_quantile returns NaN; `>= 0` drops NaN (a
    comparison with NaN is false) so `or vector(0)` reports an idle model as 0.
    """
    rate = f"rate({TTFT_BUCKET_METRIC}{_selector(t)}[{TTFT_RATE_WINDOW}])"
    return f"(histogram_quantile(0.95, sum by (le) ({rate})) >= 0) or vector(0)"


def _number(value: float) -> str:
    """KEDA thresholds are strings parsed as floats (keda.sh scalers/prometheus: "can be a float")."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _quantity(value: float) -> str:
    """A Kubernetes quantity for an HPA target: whole numbers plain, fractions in milli-units."""
    if float(value).is_integer():
        return str(int(value))
    milli = round(value * 1000)
    if not math.isclose(milli, value * 1000, abs_tol=1e-6):
        raise ValueError(f"{value!r} cannot be written as a quantity with milli precision")
    return f"{milli}m"


def hpa_behavior(t: ScalingTarget) -> dict[str, Any]:
    """autoscaling/v2 HPA behaviour: scale up within a minute, scale down one pod at a time, slowly."""
    return {
        "scaleUp": {
            "stabilizationWindowSeconds": t.scale_up_window_seconds,
            "selectPolicy": "Max",
            "policies": [
                {"type": "Pods", "value": SCALE_UP_PODS, "periodSeconds": SCALE_UP_PERIOD_SECONDS},
                {"type": "Percent", "value": SCALE_UP_PERCENT, "periodSeconds": SCALE_UP_PERIOD_SECONDS},
            ],
        },
        "scaleDown": {
            "stabilizationWindowSeconds": t.scale_down_window_seconds,
            "selectPolicy": "Min",
            "policies": [{"type": "Pods", "value": SCALE_DOWN_PODS, "periodSeconds": SCALE_DOWN_PERIOD_SECONDS}],
        },
    }


def _wake_trigger(t: ScalingTarget, prometheus_url: str) -> list[dict[str, Any]]:
    """Scale to zero: the requests the picker holds, per replica like the queue; active above wake_on_waiting - 1
    (KEDA activates strictly above the threshold, keda.sh docs concepts/scaling-deployments "Activating and
    Scaling thresholds"), which is what takes the model from 0 to 1."""
    if t.wake_query is None:
        return []
    return [{
        "type": "prometheus",
        "name": "held_requests",
        "metricType": "AverageValue",
        "metadata": {
            "serverAddress": prometheus_url,
            "query": t.wake_query,
            "threshold": _number(t.waiting_per_replica_target),
            "activationThreshold": _number(t.wake_on_waiting - 1),
        },
    }]


def scaled_object(t: ScalingTarget, *, prometheus_url: str, name: str) -> dict[str, Any]:
    """keda.sh/v1alpha1 ScaledObject for the target's Deployment; KEDA creates and owns the HPA."""
    check_dns_label("name", name)
    if not re.match(r"^https?://[^\s/]+", prometheus_url or "") or any(c.isspace() for c in prometheus_url):
        raise ValueError(f"prometheus_url={prometheus_url!r}: expected an http(s) URL without spaces")
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": name, "namespace": t.namespace},
        "spec": {
            "scaleTargetRef": t.scale_target_ref,
            "pollingInterval": t.polling_interval_seconds,
            # Only used between the last active trigger and scaling to zero (keda.sh scaledobject-spec).
            "cooldownPeriod": t.cooldown_seconds,
            "minReplicaCount": t.min_replicas,
            "maxReplicaCount": t.max_replicas,
            # Fallback applies to Value triggers too since KEDA 2.18 (kedacore/keda#6655), so every
            # trigger holds the current count while Prometheus is down.
            "fallback": {
                "failureThreshold": FALLBACK_FAILURE_THRESHOLD,
                "replicas": t.min_replicas,
                "behavior": FALLBACK_BEHAVIOR,
            },
            "advanced": {"horizontalPodAutoscalerConfig": {"behavior": hpa_behavior(t)}},
            "triggers": [
                # AverageValue: the HPA divides the query (the total queue) by the replica count, so
                # it wants ceil(total waiting / target) replicas whatever the current count is.
                {
                    "type": "prometheus",
                    "name": "queue_waiting",
                    "metricType": "AverageValue",
                    "metadata": {
                        "serverAddress": prometheus_url,
                        "query": queue_query(t),
                        "threshold": _number(t.waiting_per_replica_target),
                        "activationThreshold": _number(t.waiting_activation),
                    },
                },
                # Value: the query is already a per-replica mean, which must NOT be divided again;
                # the HPA wants ceil(ready replicas * mean / target), the utilisation rule.
                {
                    "type": "prometheus",
                    "name": "kv_cache_usage",
                    "metricType": "Value",
                    "metadata": {
                        "serverAddress": prometheus_url,
                        "query": kv_query(t),
                        "threshold": _number(t.kv_usage_target),
                        "activationThreshold": _number(t.kv_usage_activation),
                    },
                },
                *_wake_trigger(t, prometheus_url),
                # Value: latency is not divided by replicas; the HPA wants ceil(replicas * p95 / target).
                # The queue grows only once a replica is saturated, and TTFT rises before that.
                {
                    "type": "prometheus",
                    "name": "ttft_p95",
                    "metricType": "Value",
                    "metadata": {
                        "serverAddress": prometheus_url,
                        "query": ttft_query(t),
                        "threshold": _number(t.ttft_target_seconds),
                        "activationThreshold": _number(t.ttft_target_seconds),
                    },
                },
            ],
        },
    }


def horizontal_pod_autoscaler(t: ScalingTarget, *, name: str) -> dict[str, Any]:
    """autoscaling/v2 HPA on the per-pod metrics prometheus_adapter_values() exposes.

    `Pods` metrics with an averageValue target: the HPA averages the pods' values and wants
    ceil(ready pods * average / target) replicas, i.e. total queue / target for the queue and the
    utilisation rule for KV usage, the same decisions the KEDA triggers make. The pods are the
    Deployment's own (its selector), so no model_name filter is needed.
    """
    check_dns_label("name", name)
    if t.min_replicas < 1:
        # minReplicas 0 needs the alpha HPAScaleToZero feature gate (autoscaling/v2 API reference).
        raise ValueError(
            f"{t.deployment_name}: min_replicas=0 (scale to zero) needs KEDA; a plain HPA keeps at least 1 replica"
        )
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": name, "namespace": t.namespace},
        "spec": {
            "scaleTargetRef": t.scale_target_ref,
            "minReplicas": t.min_replicas,
            "maxReplicas": t.max_replicas,
            "metrics": [
                {
                    "type": "Pods",
                    "pods": {
                        "metric": {"name": ADAPTER_WAITING_METRIC},
                        "target": {"type": "AverageValue", "averageValue": _quantity(t.waiting_per_replica_target)},
                    },
                },
                {
                    "type": "Pods",
                    "pods": {
                        "metric": {"name": ADAPTER_KV_USAGE_METRIC},
                        "target": {"type": "AverageValue", "averageValue": _quantity(t.kv_usage_target)},
                    },
                },
            ],
            "behavior": hpa_behavior(t),
        },
    }


def _adapter_rule(metric: str, exposed_as: str, aggregation: str, namespace_label: str) -> dict[str, Any]:
    return {
        # Only series a PodMonitor attached to a pod: those are the ones the HPA can ask for.
        "seriesQuery": f'{{__name__="{metric}",{namespace_label}!="",{POD_LABEL}!=""}}',
        "resources": {
            "overrides": {
                namespace_label: {"resource": "namespace"},
                POD_LABEL: {"resource": "pod"},
            }
        },
        "name": {"matches": f"^{re.escape(metric)}$", "as": exposed_as},
        # prometheus-adapter Go-template placeholders (<<.Series>>, <<.LabelMatchers>>, <<.GroupBy>>):
        # GroupBy is `pod` for a Pods metric, so this folds the engines of one pod into one value.
        "metricsQuery": f"{aggregation} by (<<.GroupBy>>) (<<.Series>>{{<<.LabelMatchers>>}})",
    }


def prometheus_adapter_values(namespace_label: str = NAMESPACE_LABEL) -> dict[str, Any]:
    """prometheus-adapter 5.3.0 values: per-pod custom metrics for the queue and KV usage.

    `namespace_label` is the Prometheus label holding the pod's namespace (Prometheus Operator
    target labels: `namespace`). The queue sums a pod's engines; KV usage averages them, because
    every engine has its own cache and a sum of fractions would exceed 1.
    """
    if not _PROM_LABEL_NAME.match(namespace_label or "") or namespace_label == POD_LABEL:
        raise ValueError(f"namespace_label={namespace_label!r}: expected a Prometheus label name other than 'pod'")
    return {
        "rules": {
            "custom": [
                _adapter_rule(WAITING_METRIC, ADAPTER_WAITING_METRIC, "sum", namespace_label),
                _adapter_rule(KV_USAGE_METRIC, ADAPTER_KV_USAGE_METRIC, "avg", namespace_label),
            ]
        }
    }


def keda_chart_values() -> dict[str, Any]:
    """keda 2.20.2 values: the chart defaults, with the CRDs pinned on explicitly.

    Every ScaledObject is an instance of the chart's CRD; a values change that stopped installing it
    would delete the CRD and with it every ScaledObject, leaving the models at whatever size they had.
    """
    # The chart keeps its CRDs in templates/, so `helm uninstall` (a destroy, or a replaced release)
    # would delete them and every ScaledObject in the cluster, other teams' included; Helm skips a
    # resource annotated helm.sh/resource-policy: keep (Helm docs, "Tell Helm Not To Uninstall a
    # Resource"). The chart's crds.additionalAnnotations puts it on each CRD.
    return {"crds": {"install": True, "additionalAnnotations": {"helm.sh/resource-policy": "keep"}}}
