"""The endpoint picker's metric families at the pinned llm-d-router (pure, no Pulumi import): what the
routing alerts and the dashboards may read."""

from __future__ import annotations

# The picker's own series at llm-d-router v0.10.0 (pkg/epp/metrics/llm_d_router_metrics.go, prefix
# `llm_d_epp`): type and labels. Alerts and dashboards may only use these.
_MODEL_LABELS = frozenset({"model_name", "target_model_name", "fairness_id", "priority"})
PICKER_METRIC_TYPES: dict[str, tuple[str, frozenset[str]]] = {
    "llm_d_epp_request_total": ("counter", _MODEL_LABELS),
    "llm_d_epp_request_error_total": ("counter", _MODEL_LABELS | {"error_code"}),
    "llm_d_epp_request_duration_seconds": ("histogram", _MODEL_LABELS),
    "llm_d_epp_request_running": ("gauge", _MODEL_LABELS),
    # Time to first token as the edge sees it: from the picker receiving the request's headers from Envoy
    # to the first non-empty response body chunk Envoy streams through it (pkg/epp/handlers/request.go
    # HandleRequestHeaders and response.go HandleResponseBody @v0.10.0). Observed once the response ends,
    # so a stream's TTFT lands when the stream finishes. `streaming` is "true" for SSE responses; for
    # others TTFT is the whole request.
    "llm_d_epp_request_ttft_seconds": ("histogram", _MODEL_LABELS | {"streaming"}),
    "llm_d_epp_average_kv_cache_utilization": ("gauge", frozenset({"name"})),
    "llm_d_epp_average_queue_size": ("gauge", frozenset({"name"})),
    "llm_d_epp_average_running_requests": ("gauge", frozenset({"name"})),
    "llm_d_epp_ready_endpoints": ("gauge", frozenset({"name"})),
    "llm_d_epp_scheduler_e2e_duration_seconds": ("histogram", frozenset()),
    "llm_d_epp_scheduler_attempts_total": (
        "counter", frozenset({"status", "target_model_name", "endpoint_name", "namespace", "port"})),
    # Flow control (same file, "llm-d Flow Control Metrics"); `outcome` is a QueueOutcome's String()
    # (pkg/epp/flowcontrol/types/outcomes.go): Dispatched, RejectedCapacity, EvictedTTL, ...
    "llm_d_epp_flow_control_requests_total": ("counter", frozenset({"outcome", "priority", "inference_pool"})),
    "llm_d_epp_flow_control_pool_saturation": ("gauge", frozenset({"inference_pool"})),
    "llm_d_epp_flow_control_stale_endpoints": ("gauge", frozenset({"detector"})),
    # Requests held in the picker's flow-control queue (llm_d_router_metrics.go :356-363 @v0.10.0): counted up on
    # entering EnqueueAndWait and down on leaving it (pkg/epp/flowcontrol/controller/controller.go), so it exists
    # while no replica does; what wakes a model at zero. No series before a label set's first request.
    "llm_d_epp_flow_control_queue_size": ("gauge", _MODEL_LABELS | {"inference_pool"}),
}
PICKER_METRICS: frozenset[str] = frozenset(PICKER_METRIC_TYPES)
# llm_d_epp_request_ttft_seconds' bucket boundaries, in seconds (llm_d_router_metrics.go @v0.10.0): a
# ratio of requests slower than the objective is exact only at a boundary.
PICKER_TTFT_BUCKETS: tuple[float, ...] = (0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2, 3, 4, 5,
                                          6, 8, 10, 15, 20, 30, 45, 60, 120)
FLOW_CONTROL_QUEUE_METRIC = "llm_d_epp_flow_control_queue_size"


def held_requests_query(namespace_label: str, namespace: str, pool: str) -> str:
    """Requests the pool's picker holds, as one value (KEDA's Prometheus scaler needs one); `or vector(0)`: no
    series exists before the first held request."""
    # The pool label is the pool's name, or namespace/name: either matches.
    pool_match = f'inference_pool=~"({namespace}/)?{pool}"'
    return f'sum({FLOW_CONTROL_QUEUE_METRIC}{{{namespace_label}="{namespace}", {pool_match}}}) or vector(0)'
