"""The streaming-safe edge: Envoy Gateway (default), an AWS ALB or legacy ingress-nginx in front of
each model's OpenAI API, and the NetworkPolicies around the vLLM pods."""

from .alerts import ENVOY_METRIC_TYPES, edge_alert_groups, envoy_pod_monitor
from .edge import Edge, EdgeArgs
from .objects import EdgeSettings, Route, network_policies

__all__ = ["ENVOY_METRIC_TYPES", "edge_alert_groups", "envoy_pod_monitor",
           "Edge", "EdgeArgs", "EdgeSettings", "Route", "network_policies"]
