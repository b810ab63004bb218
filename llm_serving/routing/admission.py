"""Overload admission in the endpoint picker: hold what the pool cannot take, answer 429 past the budget
(pure, no Pulumi import).

Without it the picker forwards every request and vLLM's waiting queue grows without bound: TTFT rises
for everyone and, past Envoy's stream idle timeout, queued requests are cut with no answer at all.
llm-d-router v0.10.0's flow control (feature gate `flowControl`, off by default: pkg/epp/flowcontrol/
README.md) puts a queue per priority in the picker instead. While the saturation detector reports the
pool at or above 1.0 the picker dispatches nothing more; waiting requests leave the queue highest
priority first as capacity frees (pkg/epp/flowcontrol/contracts/registry.go, AllOrderedPriorityLevels),
and one that waited `defaultRequestTTL` is refused with HTTP 429 while the pool has replicas, 503 when
it has none (pkg/epp/requestcontrol/admission.go, translateFlowControlOutcome). A full band refuses at
once with 429. The picker's 429 carries no Retry-After (pkg/common/error/error.go BuildErrResponse sets
only `x-llm-d-request-dropped-reason`), so the route's BackendTrafficPolicy adds one (llm_serving/edge).

The detector is `utilization-detector`: per replica max(waiting / queueDepthThreshold, KV usage /
kvCacheUtilThreshold), averaged over the pool (its README at v0.10.0). Its thresholds sit above the
autoscaler's targets: if the picker held requests at KEDA's target, vLLM's queue would never pass it
and KEDA would never add the replica that ends the overload.
"""

from __future__ import annotations

from dataclasses import dataclass

FLOW_CONTROL_GATE = "flowControl"  # pkg/epp/flowcontrol/config.go FeatureGate @v0.10.0
DETECTOR_TYPE = "utilization-detector"
DETECTOR_NAME = "saturation-detector"
# How old a replica's scraped numbers may be before the detector counts it as full. The detector's own
# default is 200 ms; the picker's scorers use 2 s (`--metrics-staleness-threshold`, pkg/epp/server/
# options.go @v0.10.0). vLLM answers /metrics on the event loop that streams tokens, so under load one
# slow scrape past 200 ms would mark a replica full and halt dispatch: the scorers' 2 s, one rule for both.
METRICS_STALENESS = "2s"
# The template for negative priorities needs a priority field (PriorityBandConfig.priority has no
# omitempty); the picker provisions each negative level from it.
SHEDDABLE_TEMPLATE_PRIORITY = -1


@dataclass(frozen=True)
class Admission:
    """One model's overload settings, as the picker and the edge apply them."""

    flow_control: bool  # False: the picker forwards everything (only negative priorities are refused at saturation)
    queue_wait_seconds: float  # defaultRequestTTL: longest a request waits in the picker before its 429
    queue_depth_per_replica: int  # detector queueDepthThreshold: waiting requests per replica counted as full
    kv_cache_usage: float  # detector kvCacheUtilThreshold, 0..1
    sheddable_queue_requests: int  # per picker: negative-priority requests it holds before refusing at once
    retry_after_seconds: int  # the Retry-After the edge adds to every 429 the picker sends
    # How long adding a replica takes: shedding for longer than this means the autoscaler cannot end it.
    scale_out_seconds: int = 0

    def __post_init__(self) -> None:
        if not 0 < self.kv_cache_usage <= 1:
            raise ValueError(f"kv_cache_usage {self.kv_cache_usage} is outside (0, 1] (the detector's range)")
        if min(self.queue_depth_per_replica, self.sheddable_queue_requests, self.retry_after_seconds) < 1:
            raise ValueError("queue depth, sheddable queue and Retry-After must be at least 1")
        if self.queue_wait_seconds <= 0:
            raise ValueError(f"queue wait {self.queue_wait_seconds}s must be positive (0s would wait forever)")


def _duration(seconds: float) -> str:
    """A Go duration: whole seconds as "2s", fractions in milliseconds ("1500ms")."""
    millis = round(seconds * 1000)
    return f"{millis // 1000}s" if millis % 1000 == 0 else f"{millis}ms"


def feature_gate_lines(admission: Admission | None) -> list[str]:
    if admission is None or not admission.flow_control:
        return []
    return ["featureGates:", f"- {FLOW_CONTROL_GATE}"]


def detector_plugin_lines(admission: Admission | None) -> list[str]:
    """The detector as a named plugin, so its thresholds are ours and not the upstream defaults (5 waiting,
    0.8 KV: KEDA's own targets)."""
    if admission is None:
        return []
    return [
        f"- name: {DETECTOR_NAME}",
        f"  type: {DETECTOR_TYPE}",
        "  parameters:",
        f"    queueDepthThreshold: {admission.queue_depth_per_replica}",
        f"    kvCacheUtilThreshold: {admission.kv_cache_usage:g}",
        f"    metricsStalenessThreshold: {METRICS_STALENESS}",
    ]


def flow_control_lines(admission: Admission | None) -> list[str]:
    """The flowControl section. Without the gate only `saturationDetector` is read (the legacy path
    refuses negative priorities while the pool is saturated), so only that is written then."""
    if admission is None:
        return []
    lines = ["flowControl:"]
    if admission.flow_control:
        lines.append(f"  defaultRequestTTL: {_duration(admission.queue_wait_seconds)}")
    lines += ["  saturationDetector:", f"    pluginRef: {DETECTOR_NAME}"]
    if admission.flow_control:
        lines += [
            # A full band refuses at once: sheddable work gets its 429 instead of waiting out the TTL
            # ahead of nobody (the upstream template's documented use, FlowControlConfig godoc).
            "  defaultNegativePriorityBand:",
            f"    priority: {SHEDDABLE_TEMPLATE_PRIORITY}",
            f'    maxRequests: "{admission.sheddable_queue_requests}"',
        ]
    return lines
