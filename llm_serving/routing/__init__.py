"""Inference routing: an InferencePool and endpoint picker per model, behind Envoy AI Gateway."""

from .admission import Admission
from .alerts import TTFT_OBJECTIVE_SHARE, picker_alert_groups
from .metrics import PICKER_METRIC_TYPES, PICKER_METRICS, PICKER_TTFT_BUCKETS, held_requests_query
from .objects import (
    OBJECTIVE_HEADER,
    PickerSettings,
    RoutedModel,
    inference_model_rewrite,
    inference_objective,
    inference_pool,
    picker_objects,
    picker_selector,
    pool_problems,
)
from .routing import InferenceRouting, RoutingSpec

__all__ = [
    "TTFT_OBJECTIVE_SHARE",
    "Admission",
    "OBJECTIVE_HEADER",
    "PICKER_METRIC_TYPES",
    "PICKER_METRICS",
    "PICKER_TTFT_BUCKETS",
    "held_requests_query",
    "InferenceRouting",
    "RoutingSpec",
    "PickerSettings",
    "RoutedModel",
    "inference_model_rewrite",
    "inference_objective",
    "inference_pool",
    "picker_alert_groups",
    "picker_objects",
    "picker_selector",
    "pool_problems",
]
