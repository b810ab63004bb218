"""Autoscaling of each model on queue depth first and KV-cache usage second, through KEDA (default)
or prometheus-adapter and an HPA."""

from .autoscaling import ModelAutoscaling, ModelAutoscalingArgs
from .objects import ScalingTarget

__all__ = ["ModelAutoscaling", "ModelAutoscalingArgs", "ScalingTarget"]
