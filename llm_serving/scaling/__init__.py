"""Autoscaling of each model on queue depth first and KV-cache usage second, through KEDA (default)
or prometheus-adapter and an HPA."""

from .args import (
    AutoscalingArgs,
    AutoscalingMode,
)
from .autoscaling import AutoscalingSpec, ModelAutoscaling
from .objects import ADAPTER_METRICS, ScalingTarget

__all__ = [
    "ADAPTER_METRICS",
    "AutoscalingArgs",
    "AutoscalingMode",
    "AutoscalingSpec",
    "ModelAutoscaling",
    "ScalingTarget",
]
