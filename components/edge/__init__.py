"""The streaming-safe edge: Envoy Gateway (default), an AWS ALB or legacy ingress-nginx in front of
each model's OpenAI API, and the NetworkPolicies around the vLLM pods."""

from .edge import Edge, EdgeArgs
from .objects import EdgeSettings, Route, network_policies, v1_path

__all__ = ["Edge", "EdgeArgs", "EdgeSettings", "Route", "network_policies", "v1_path"]
