"""The streaming-safe edge: Envoy Gateway (default), an AWS ALB or legacy ingress-nginx in front of
each model's OpenAI API, and the NetworkPolicies around the vLLM pods."""

from .alerts import ENVOY_METRIC_TYPES, edge_alert_groups, envoy_pod_monitor
from .args import (
    ControllerMode,
    EdgeArgs,
    EdgeAuth,
    EdgeMode,
    EdgeRouting,
    ExistingGatewayArgs,
    InferenceRoutingArgs,
    JwtArgs,
    LoadBalancerScheme,
    OverloadArgs,
    TlsArgs,
)
from .by_model import MAX_MODELS as BY_MODEL_MAX_MODELS
from .by_model import NOT_FOUND_RULE as BY_MODEL_NOT_FOUND_RULE
from .by_model import SIDECAR_RESOURCES as BY_MODEL_SIDECAR_RESOURCES
from .edge import Edge, EdgeMonitoring, EdgeSpec
from .load_balancer import NAMESPACE as LOAD_BALANCER_NAMESPACE
from .load_balancer import POLICY_SOURCE as LOAD_BALANCER_POLICY_SOURCE
from .load_balancer_controller import LoadBalancerController, LoadBalancerControllerArgs
from .objects import CONTROLLER_NAME as ENVOY_GATEWAY_CONTROLLER
from .objects import (
    ENVOY_HTTPS_CONTAINER_PORT,
    HTTPS_LISTENER_PORT,
    NLB_TCP_IDLE_SECONDS,
    OWN_GATEWAY_NAME,
    POD_READINESS_GATE_LABEL,
    PROMETHEUS_POD_LABELS,
    REVISION_HEADER,
    UPSTREAM_CONNECTION_IDLE_SECONDS,
    EdgeSettings,
    Route,
    RouteRevision,
    edge_pod_selector,
    envoy_proxy_selector,
    gateway_injects_upstream_key,
    internal_service_name,
    network_policies,
    object_storage_egress,
    s3_cidrs,
    v1_path,
)

__all__ = [
    "BY_MODEL_MAX_MODELS",
    "BY_MODEL_NOT_FOUND_RULE",
    "BY_MODEL_SIDECAR_RESOURCES",
    "ControllerMode",
    "ENVOY_GATEWAY_CONTROLLER",
    "ENVOY_HTTPS_CONTAINER_PORT",
    "ENVOY_METRIC_TYPES",
    "Edge",
    "EdgeArgs",
    "EdgeAuth",
    "EdgeMode",
    "EdgeRouting",
    "EdgeSettings",
    "EdgeMonitoring",
    "EdgeSpec",
    "ExistingGatewayArgs",
    "HTTPS_LISTENER_PORT",
    "InferenceRoutingArgs",
    "JwtArgs",
    "LOAD_BALANCER_NAMESPACE",
    "LOAD_BALANCER_POLICY_SOURCE",
    "LoadBalancerController",
    "LoadBalancerControllerArgs",
    "LoadBalancerScheme",
    "NLB_TCP_IDLE_SECONDS",
    "UPSTREAM_CONNECTION_IDLE_SECONDS",
    "POD_READINESS_GATE_LABEL",
    "OWN_GATEWAY_NAME",
    "OverloadArgs",
    "PROMETHEUS_POD_LABELS",
    "REVISION_HEADER",
    "Route",
    "RouteRevision",
    "TlsArgs",
    "edge_alert_groups",
    "edge_pod_selector",
    "envoy_proxy_selector",
    "envoy_pod_monitor",
    "gateway_injects_upstream_key",
    "internal_service_name",
    "network_policies",
    "object_storage_egress",
    "s3_cidrs",
    "v1_path",
]
