"""Tests for llm_serving/edge/objects.py: the streaming-safe edge in three modes, and NetworkPolicies.

They validate every object against the pinned CRDs and Kubernetes schema, pin each streaming setting
to an exact value, walk host + path to a Service, and evaluate the NetworkPolicies with a small model.

Length: tables of exact settings for three edge modes and the NetworkPolicy evaluator.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from dataclasses import dataclass
from typing import Any

import pytest

from llm_serving.edge import EdgeAuth, EdgeMode, LoadBalancerScheme, by_model
from llm_serving.edge import objects as edge
from llm_serving.edge.awaits import gateway_wait_for
from llm_serving.edge.objects import EdgeSettings, Route
from llm_serving.platform import versions
from llm_serving.serving.engine import PORT
from tests.support.reference import helm_value_errors, kubernetes_object_errors

MiB = 1024 * 1024
EDGE_NS = "envoy-gateway-system"
SERVING_NS = "llm-serving"
HOST = "llm.example.com"

LLAMA = Route(
    model_name="llama-70b", namespace=SERVING_NS, port=PORT, host=HOST, path_prefix="/",
    request_timeout_seconds=0, stream_idle_timeout_seconds=120, request_body_limit_bytes=8 * MiB, drain_seconds=300,
)
QWEN = Route(
    model_name="qwen-7b", namespace=SERVING_NS, port=PORT, host=HOST, path_prefix="/qwen-7b",
    request_timeout_seconds=900, stream_idle_timeout_seconds=60, request_body_limit_bytes=4 * MiB, drain_seconds=120,
)
QWEN_OWN_HOST = dataclasses.replace(QWEN, host="qwen.example.com", path_prefix="/")
ROUTES = [LLAMA, QWEN]
INGRESS_ROUTES = [LLAMA, QWEN_OWN_HOST]

SETTINGS = EdgeSettings(
    namespace=EDGE_NS, gateway_name="llm-serving", tls_secret_name="llm-tls", cert_manager_issuer=None,
    load_balancer_scheme=LoadBalancerScheme.INTERNET_FACING, auth=EdgeAuth.VLLM_API_KEY, api_key_secret="vllm-keys",
    jwt_issuer=None, jwt_jwks_uri=None, jwt_audiences=(),
    acm_certificate_arn="arn:aws:acm:us-east-1:123456789012:certificate/0000",
    alb_idle_timeout_seconds=600,
)
API_KEYS = dataclasses.replace(SETTINGS, auth=EdgeAuth.GATEWAY_API_KEY, api_key_secret="client-api-keys")
JWT = dataclasses.replace(SETTINGS, auth=EdgeAuth.JWT, api_key_secret=None, jwt_issuer="https://auth.example.com",
                          jwt_jwks_uri="https://auth.example.com/.well-known/jwks.json",
                          jwt_audiences=("llm-serving",))
CERT_MANAGER = dataclasses.replace(SETTINGS, tls_secret_name=None, cert_manager_issuer="letsencrypt")

# The Services VllmDeployment creates: named after the model, on the engine port.
SERVICES = {(SERVING_NS, "llama-70b"): {PORT}, (SERVING_NS, "qwen-7b"): {PORT}}
ALB_SUBNETS = ("subnet-0a1b2c3d", "subnet-1a2b3c4d")
# Paths vLLM 0.33.0 serves without checking --api-key (its middleware guards only paths under /v1,
# vllm/entrypoints/openai/server_utils.py `AuthenticationMiddleware`): POST /invocations dispatches to
# chat/completions, the rest expose tokenizer, pooling,
# metrics and admin endpoints. None may be reachable through any edge.
UNGUARDED_PATHS = ("/invocations", "/tokenize", "/detokenize", "/pooling", "/classify", "/score", "/rerank",
                   "/metrics", "/health", "/ping", "/version", "/load", "/v2/rerank", "/v1x", "/v10/models")


def by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def one(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (found,) = [o for o in by_kind(objects, kind) if o["metadata"]["name"] == name]
    return found


GATEWAY = edge.gateway_objects(SETTINGS, ROUTES)


# --------------------------------------------------------------------------------------------
# Validity against the pinned schemas


@pytest.mark.parametrize("settings", [SETTINGS, API_KEYS, JWT, CERT_MANAGER], ids=["vllm", "keys", "jwt", "acme"])
def test_every_gateway_object_validates_against_its_crd(settings: EdgeSettings) -> None:
    objects = edge.gateway_objects(settings, ROUTES)
    # The HTTPRouteFilter CRD is not in the reference folder: its exact fields are pinned instead by
    # test_gateway_auth_modes_inject_vllms_own_key_on_every_route, against Envoy Gateway v1.9.0's
    # api/v1alpha1/httproutefilter_types.go.
    checked = [o for o in objects if o["kind"] != "HTTPRouteFilter"]
    assert [e for o in checked for e in kubernetes_object_errors(o, "1.34")] == []


def test_every_ingress_validates_against_kubernetes_1_34() -> None:
    objects = edge.alb_ingress(SETTINGS, INGRESS_ROUTES, ALB_SUBNETS) + edge.nginx_ingress(SETTINGS, INGRESS_ROUTES)
    # ALB: one per host; nginx: one per host and one closing its runtime adapter API.
    assert len(objects) == 6
    assert [e for o in objects for e in kubernetes_object_errors(o, "1.34")] == []


def test_chart_values_exist_in_gateway_helm_1_9_0() -> None:
    assert helm_value_errors("gateway-helm", "1.9.0", edge.envoy_gateway_chart_values()) == []


PROXY_DIGEST = "sha256:" + "cd" * 32
# Envoy Gateway v1.9.0's CEL rule on the EnvoyProxy's container image (api/v1alpha1/shared_types.go,
# KubernetesContainerSpec.Image; the reference CRDs keep no CEL rules, so it is spelt out here).
ENVOY_PROXY_IMAGE_RULE = r"^[a-zA-Z0-9._-]+(:[0-9]+)?(/[a-zA-Z0-9._/-]+)?(:[a-zA-Z0-9._-]+)?(@sha256:[a-z0-9]+)?$"


def test_the_proxy_image_is_pinned_only_by_our_envoy_gateway_at_its_pinned_version() -> None:
    digests = {versions.ENVOY_PROXY_IMAGE.reference: PROXY_DIGEST}
    pinned = f"docker.io/envoyproxy/envoy:distroless-v1.39.0@{PROXY_DIGEST}"
    assert edge.envoy_proxy_image(True, "v1.9.0", digests) == pinned
    # The cluster's own Envoy Gateway, or another version of ours, runs another default proxy: not ours to pick.
    assert edge.envoy_proxy_image(False, "v1.9.0", digests) is None
    assert edge.envoy_proxy_image(True, "v1.9.1", digests) is None
    assert edge.envoy_proxy_image(True, "v1.9.0", {}) is None
    proxy = one(edge.gateway_objects(dataclasses.replace(SETTINGS, proxy_image=pinned), ROUTES), "EnvoyProxy",
                "llm-serving-proxy")
    assert proxy["spec"]["provider"]["kubernetes"]["envoyDeployment"]["container"] == {"image": pinned}
    assert kubernetes_object_errors(proxy, "1.34") == [] and re.match(ENVOY_PROXY_IMAGE_RULE, pinned)
    # Without a digest the EnvoyProxy names no image: Envoy Gateway's default, as before.
    assert "container" not in one(GATEWAY, "EnvoyProxy", "llm-serving-proxy")["spec"]["provider"]["kubernetes"][
        "envoyDeployment"]


def test_gateway_class_names_the_controller_the_chart_configures() -> None:
    values = edge.envoy_gateway_chart_values()
    gateway_class = one(GATEWAY, "GatewayClass", "llm-serving")
    assert gateway_class["spec"]["controllerName"] == values["config"]["envoyGateway"]["gateway"]["controllerName"]
    assert gateway_class["spec"]["controllerName"] == "gateway.envoyproxy.io/gatewayclass-controller"


# --------------------------------------------------------------------------------------------
# Gateway mode: exact streaming settings


def test_gateway_objects_are_the_expected_kinds_in_namespaces() -> None:
    assert [(o["kind"], o["metadata"]["name"], o["metadata"].get("namespace")) for o in GATEWAY] == [
        ("EnvoyProxy", "llm-serving-proxy", EDGE_NS),
        ("GatewayClass", "llm-serving", None),
        ("Gateway", "llm-serving", EDGE_NS),
        ("ClientTrafficPolicy", "llm-serving", EDGE_NS),
        ("SecurityPolicy", "llm-serving-auth", EDGE_NS),
        ("Service", "llm-serving-internal", EDGE_NS),  # the deploy gate's way in before DNS points at the NLB
        ("HTTPRouteFilter", "runtime-adapter-api-closed", SERVING_NS),
        ("HTTPRoute", "llama-70b", SERVING_NS),
        ("BackendTrafficPolicy", "llama-70b", SERVING_NS),
        ("HTTPRoute", "qwen-7b", SERVING_NS),
        ("BackendTrafficPolicy", "qwen-7b", SERVING_NS),
    ]


def test_envoy_proxy_is_an_ip_target_nlb_that_drains_as_long_as_the_longest_route() -> None:
    assert one(GATEWAY, "EnvoyProxy", "llm-serving-proxy")["spec"] == {
        "provider": {
            "type": "Kubernetes",
            "kubernetes": {
                "envoyDeployment": {"replicas": 2, "strategy": {
                    "type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
                    "pod": {"topologySpreadConstraints": [
                    {"maxSkew": 1, "topologyKey": key, "whenUnsatisfiable": "ScheduleAnyway",
                     "labelSelector": {"matchLabels": {
                         "app.kubernetes.io/name": "envoy", "gateway.envoyproxy.io/owning-gateway-name": "llm-serving",
                         "gateway.envoyproxy.io/owning-gateway-namespace": EDGE_NS}}}
                    for key in ("kubernetes.io/hostname", "topology.kubernetes.io/zone")]}},
                "envoyPDB": {"minAvailable": 1},
                "envoyService": {
                    "type": "LoadBalancer",
                    "annotations": {
                        "service.beta.kubernetes.io/aws-load-balancer-type": "external",
                        "service.beta.kubernetes.io/aws-load-balancer-nlb-target-type": "ip",
                        "service.beta.kubernetes.io/aws-load-balancer-scheme": "internet-facing",
                        "service.beta.kubernetes.io/aws-load-balancer-target-group-attributes":
                            "deregistration_delay.timeout_seconds=300",
                    },
                },
            },
        },
        "shutdown": {"drainTimeout": "300s"},
    }
    internal = edge.gateway_objects(
        dataclasses.replace(SETTINGS, load_balancer_scheme=LoadBalancerScheme.INTERNAL), ROUTES)
    annotations = internal[0]["spec"]["provider"]["kubernetes"]["envoyService"]["annotations"]
    assert annotations["service.beta.kubernetes.io/aws-load-balancer-scheme"] == "internal"


def test_gateway_class_points_at_the_envoy_proxy() -> None:
    assert one(GATEWAY, "GatewayClass", "llm-serving")["spec"]["parametersRef"] == {
        "group": "gateway.envoyproxy.io", "kind": "EnvoyProxy", "name": "llm-serving-proxy", "namespace": EDGE_NS,
    }


def test_gateway_has_one_https_listener_per_host_terminating_tls() -> None:
    objects = edge.gateway_objects(SETTINGS, [LLAMA, QWEN, dataclasses.replace(QWEN_OWN_HOST, model_name="qwen-chat")])
    gateway = one(objects, "Gateway", "llm-serving")
    # `pulumi up` waits for Envoy Gateway to program it (proxies configured, load balancer addressed) and each
    # listener's certificate before the edge's dependents, the deploy gate among them, run (test_awaits.py).
    assert gateway["metadata"]["annotations"] == {"pulumi.com/waitFor": gateway_wait_for(
        ["https-llm-example-com", "https-qwen-example-com"])}
    assert gateway["spec"]["gatewayClassName"] == "llm-serving"
    listeners = gateway["spec"]["listeners"]
    assert [(x["name"], x["hostname"], x["port"], x["protocol"]) for x in listeners] == [
        ("https-llm-example-com", "llm.example.com", 443, "HTTPS"),
        ("https-qwen-example-com", "qwen.example.com", 443, "HTTPS"),
    ]
    assert {str(x["tls"]) for x in listeners} == {
        str({"mode": "Terminate", "certificateRefs": [{"group": "", "kind": "Secret", "name": "llm-tls"}]})
    }
    assert listeners[0]["allowedRoutes"]["namespaces"] == {
        "from": "Selector",
        "selector": {"matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "In", "values": [SERVING_NS]}
        ]},
    }


def test_cert_manager_annotates_the_gateway_and_names_the_secret() -> None:
    gateway = one(edge.gateway_objects(CERT_MANAGER, ROUTES), "Gateway", "llm-serving")
    assert gateway["metadata"]["annotations"] == {"cert-manager.io/cluster-issuer": "letsencrypt",
                                                  "pulumi.com/waitFor": gateway_wait_for(["https-llm-example-com"])}
    assert gateway["spec"]["listeners"][0]["tls"]["certificateRefs"] == [
        {"group": "", "kind": "Secret", "name": "llm-serving-tls"}
    ]


@pytest.mark.parametrize("secret,issuer", [(None, None), ("llm-tls", "letsencrypt")])
def test_tls_needs_exactly_one_source(secret: str | None, issuer: str | None) -> None:
    settings = dataclasses.replace(SETTINGS, tls_secret_name=secret, cert_manager_issuer=issuer)
    with pytest.raises(ValueError, match="exactly one of tls_secret_name or cert_manager_issuer"):
        edge.gateway_objects(settings, ROUTES)


def test_route_request_timeout_is_0s_when_disabled_and_seconds_otherwise() -> None:
    llama = one(GATEWAY, "HTTPRoute", "llama-70b")["spec"]
    qwen = one(GATEWAY, "HTTPRoute", "qwen-7b")["spec"]
    assert llama["rules"][0]["timeouts"] == {"request": "0s"}
    assert qwen["rules"][0]["timeouts"] == {"request": "900s"}


def test_http_routes_publish_only_v1_under_the_prefix_to_the_model_service() -> None:
    assert one(GATEWAY, "HTTPRoute", "llama-70b")["spec"] == {
        "parentRefs": [{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "llm-serving",
                        "namespace": EDGE_NS, "sectionName": "https-llm-example-com"}],
        "hostnames": [HOST],
        "rules": [{
            "matches": [{"path": {"type": "PathPrefix", "value": "/v1"}}],
            "backendRefs": [{"group": "", "kind": "Service", "name": "llama-70b", "port": 8000}],
            "timeouts": {"request": "0s"},
        }, {
            "matches": [{"path": {"type": "Exact", "value": "/v1/load_lora_adapter"}},
                        {"path": {"type": "Exact", "value": "/v1/unload_lora_adapter"}}],
            "filters": [{"type": "ExtensionRef", "extensionRef": {
                "group": "gateway.envoyproxy.io", "kind": "HTTPRouteFilter", "name": "runtime-adapter-api-closed"}}],
        }],
    }
    qwen_rule = one(GATEWAY, "HTTPRoute", "qwen-7b")["spec"]["rules"][0]
    assert qwen_rule["matches"] == [{"path": {"type": "PathPrefix", "value": "/qwen-7b/v1"}}]
    assert qwen_rule["filters"] == [{"type": "URLRewrite", "urlRewrite": {
        "path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/v1"}}}]


def test_backend_policy_repeats_the_route_timeout_sets_idle_timeouts_and_never_retries() -> None:
    llama = one(GATEWAY, "BackendTrafficPolicy", "llama-70b")["spec"]
    assert llama == {
        "targetRefs": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": "llama-70b"}],
        "timeout": {"http": {"requestTimeout": "0s", "streamIdleTimeout": "120s", "connectionIdleTimeout": "4s"}},
        "retry": {"numRetries": 0},
        "useClientProtocol": False,
    }
    qwen = one(GATEWAY, "BackendTrafficPolicy", "qwen-7b")["spec"]
    assert qwen["timeout"]["http"] == {"requestTimeout": "900s", "streamIdleTimeout": "60s",
                                       "connectionIdleTimeout": "4s"}
    # The policy's request timeout always equals its route's (envoyproxy/gateway#4091).
    for route in by_kind(GATEWAY, "HTTPRoute"):
        policy = one(GATEWAY, "BackendTrafficPolicy", route["metadata"]["name"])
        assert policy["spec"]["timeout"]["http"]["requestTimeout"] == route["spec"]["rules"][0]["timeouts"]["request"]


def test_upstream_idle_timeout_is_below_vllm_keep_alive() -> None:
    assert edge.UPSTREAM_CONNECTION_IDLE_SECONDS < 5  # VLLM_HTTP_TIMEOUT_KEEP_ALIVE default


def test_backend_policy_never_buffers_requests() -> None:
    for policy in by_kind(GATEWAY, "BackendTrafficPolicy"):
        assert "requestBuffer" not in policy["spec"]
        assert "connection" not in policy["spec"]


def test_client_policy_sets_idle_timeouts_and_a_buffer_for_the_largest_prompt() -> None:
    assert one(GATEWAY, "ClientTrafficPolicy", "llm-serving")["spec"] == {
        "targetRefs": [{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "llm-serving"}],
        "timeout": {"http": {"streamIdleTimeout": "120s", "idleTimeout": "300s"}},
        "connection": {"bufferLimit": "8Mi"},
    }


def test_client_idle_timeouts_stay_below_the_nlb_idle_timeout() -> None:
    assert edge.CLIENT_CONNECTION_IDLE_SECONDS < edge.NLB_TCP_IDLE_SECONDS == 350
    too_long = dataclasses.replace(LLAMA, stream_idle_timeout_seconds=350)
    with pytest.raises(ValueError, match="below the NLB's 350s TCP idle timeout"):
        edge.gateway_objects(SETTINGS, [too_long])


def test_gateway_api_key_mode_checks_bearer_keys_from_the_secret() -> None:
    policy = one(edge.gateway_objects(API_KEYS, ROUTES), "SecurityPolicy", "llm-serving-auth")
    assert policy["metadata"]["namespace"] == EDGE_NS
    assert policy["spec"] == {
        "targetRefs": [{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "llm-serving"}],
        "apiKeyAuth": {
            "credentialRefs": [{"group": "", "kind": "Secret", "name": "client-api-keys"}],
            "extractFrom": [{"headers": ["authorization"]}],
            "sanitize": True,
        },
    }


def test_jwt_mode_verifies_tokens_against_the_remote_jwks() -> None:
    policy = one(edge.gateway_objects(JWT, ROUTES), "SecurityPolicy", "llm-serving-auth")
    assert policy["spec"]["jwt"] == {"providers": [{
        "name": "default", "issuer": "https://auth.example.com", "audiences": ["llm-serving"],
        "remoteJWKS": {"uri": "https://auth.example.com/.well-known/jwks.json"},
    }]}


@pytest.mark.parametrize("settings,message", [
    (dataclasses.replace(SETTINGS, auth=EdgeAuth.GATEWAY_API_KEY, api_key_secret=None), "needs api_key_secret"),
    (dataclasses.replace(JWT, jwt_jwks_uri=None), "needs jwt_issuer, jwt_jwks_uri and jwt_audiences"),
    (dataclasses.replace(JWT, jwt_audiences=()), "needs jwt_issuer, jwt_jwks_uri and jwt_audiences"),
])
def test_incomplete_settings_are_rejected(settings: EdgeSettings, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        edge.gateway_objects(settings, ROUTES)


@pytest.mark.parametrize("routes,message", [
    ([], "at least one route"),
    ([LLAMA, dataclasses.replace(LLAMA, model_name="other")], "both claim https://llm.example.com/v1"),
    ([LLAMA, dataclasses.replace(LLAMA, host="other.example.com")], "routed twice"),
    ([dataclasses.replace(LLAMA, path_prefix="llama")], "must be an absolute path"),
    ([dataclasses.replace(LLAMA, host="LLM.example.com")], "lowercase DNS name"),
    ([dataclasses.replace(LLAMA, request_timeout_seconds=100_000)], "outside 0..99999s"),
])
def test_conflicting_or_malformed_routes_are_rejected(routes: list[Route], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        edge.gateway_objects(SETTINGS, routes)


# --------------------------------------------------------------------------------------------
# Walking host + path to a Service (gateway mode)


def _prefix_matches(prefix: str, path: str) -> bool:
    """Gateway API and Ingress Prefix matching: whole path elements only."""
    prefix = prefix.rstrip("/")
    return path == prefix or path.startswith(prefix + "/") or prefix == ""


def _selector_matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expression in selector.get("matchExpressions", []):
        value, operator = labels.get(expression["key"]), expression["operator"]
        if operator == "In" and value not in expression["values"]:
            return False
        if operator == "NotIn" and value in expression["values"]:
            return False
        if operator == "Exists" and value is None:
            return False
        if operator == "DoesNotExist" and value is not None:
            return False
    return True


def gateway_backend(objects: list[dict[str, Any]], host: str, path: str) -> tuple[str, str, int, str] | None:
    """(namespace, service, port, upstream path) that host + path reach through the Gateway, or None."""
    found = []
    for gateway in by_kind(objects, "Gateway"):
        gw_name, gw_ns = gateway["metadata"]["name"], gateway["metadata"]["namespace"]
        for listener in gateway["spec"]["listeners"]:
            if listener["hostname"] != host:
                continue
            for route in by_kind(objects, "HTTPRoute"):
                ns = route["metadata"]["namespace"]
                allowed = listener["allowedRoutes"]["namespaces"]
                if not _selector_matches(allowed["selector"], {"kubernetes.io/metadata.name": ns}):
                    continue
                if not any(p["name"] == gw_name and p.get("namespace", ns) == gw_ns
                           and p.get("sectionName") in (None, listener["name"]) for p in route["spec"]["parentRefs"]):
                    continue
                if host not in route["spec"]["hostnames"]:
                    continue
                for rule in route["spec"]["rules"]:
                    for match in rule["matches"]:
                        prefix, kind = match["path"]["value"], match["path"]["type"]
                        if kind == "PathPrefix" and _prefix_matches(prefix, path) or kind == "Exact" and prefix == path:
                            # Gateway API precedence: an Exact path match first, then the longest prefix.
                            found.append(((kind == "Exact", len(prefix)), ns, prefix, rule))
    if not found:
        return None
    _, ns, prefix, rule = max(found, key=lambda item: item[0])
    if "backendRefs" not in rule:
        # A rule without a backend answers itself (the runtime adapter API's direct 404).
        assert [f["extensionRef"]["name"] for f in rule["filters"]] == [edge.RUNTIME_ADAPTER_FILTER]
        return None
    upstream = path
    for f in rule.get("filters", []):
        if f["type"] != "URLRewrite":
            continue  # header filters (objective, injected key) do not move the path
        rewrite = f["urlRewrite"]["path"]
        assert rewrite["type"] == "ReplacePrefixMatch"
        upstream = rewrite["replacePrefixMatch"] + path[len(prefix):]
    (ref,) = rule["backendRefs"]
    assert ref["kind"] == "Service" and ref.get("namespace", ns) == ns
    return ns, ref["name"], ref["port"], upstream


@pytest.mark.parametrize("path,expected", [
    ("/v1/chat/completions", (SERVING_NS, "llama-70b", PORT, "/v1/chat/completions")),
    ("/v1/models", (SERVING_NS, "llama-70b", PORT, "/v1/models")),
    ("/v1", (SERVING_NS, "llama-70b", PORT, "/v1")),
    ("/qwen-7b/v1/completions", (SERVING_NS, "qwen-7b", PORT, "/v1/completions")),
])
def test_openai_paths_reach_the_model_service_on_its_port(path: str, expected: tuple[str, str, int, str]) -> None:
    backend = gateway_backend(GATEWAY, HOST, path)
    assert backend == expected
    assert backend[2] in SERVICES[(backend[0], backend[1])]
    assert backend[3].startswith("/v1")  # vLLM's API key guards exactly these paths


@pytest.mark.parametrize("path", [
    "/metrics", "/health", "/qwen-7b/metrics", "/qwen-7b/health", "/", "/v1x", "/docs", "/openapi.json",
    "/tokenize", "/qwen-7b",
])
def test_metrics_health_and_other_paths_are_not_routed(path: str) -> None:
    assert gateway_backend(GATEWAY, HOST, path) is None


@pytest.mark.parametrize("settings", [SETTINGS, API_KEYS, JWT], ids=["vllm", "keys", "jwt"])
@pytest.mark.parametrize("path", UNGUARDED_PATHS)
def test_no_auth_mode_routes_vllms_unguarded_endpoints(settings: EdgeSettings, path: str) -> None:
    objects = edge.gateway_objects(settings, ROUTES)
    for candidate in (path, "/qwen-7b" + path):
        backend = gateway_backend(objects, HOST, candidate)
        assert backend is None or backend[3].startswith("/v1/") and backend[3] != path, candidate


# --------------------------------------------------------------------------------------------
# Authentication at the gateway, and vLLM's own key behind it


def test_vllm_api_key_mode_checks_the_same_key_at_the_gateway_and_passes_it_on() -> None:
    policy = one(GATEWAY, "SecurityPolicy", "llm-serving-auth")
    assert policy["spec"]["apiKeyAuth"] == {
        "credentialRefs": [{"group": "", "kind": "Secret", "name": "vllm-keys"}],
        "extractFrom": [{"headers": ["authorization"]}],
        "sanitize": False,
    }
    assert [f["metadata"]["name"] for f in by_kind(GATEWAY, "HTTPRouteFilter")] == ["runtime-adapter-api-closed"]
    for route in by_kind(GATEWAY, "HTTPRoute"):
        # No key injected: vLLM checks the client's own (the only extension filter is the closed adapter API's).
        assert all(f["type"] != "ExtensionRef" or f["extensionRef"]["name"] == "runtime-adapter-api-closed"
                   for rule in route["spec"]["rules"] for f in rule.get("filters", []))


@pytest.mark.parametrize("settings", [API_KEYS, JWT], ids=["keys", "jwt"])
def test_gateway_auth_modes_inject_vllms_own_key_on_every_route(settings: EdgeSettings) -> None:
    objects = edge.gateway_objects(settings, ROUTES)
    injector = one(objects, "HTTPRouteFilter", "vllm-api-key")
    assert injector == {
        "apiVersion": "gateway.envoyproxy.io/v1alpha1",
        "kind": "HTTPRouteFilter",
        "metadata": {"name": "vllm-api-key", "namespace": SERVING_NS},
        "spec": {"credentialInjection": {
            "header": "Authorization",
            "overwrite": True,
            "credential": {"valueRef": {"group": "", "kind": "Secret", "name": "vllm-api-key-header"}},
        }},
    }
    for route in by_kind(objects, "HTTPRoute"):
        rule = route["spec"]["rules"][0]
        assert {"type": "ExtensionRef", "extensionRef": {
            "group": "gateway.envoyproxy.io", "kind": "HTTPRouteFilter", "name": "vllm-api-key"}} in rule["filters"]


def test_vllm_api_key_mode_without_the_gateway_secret_is_refused() -> None:
    with pytest.raises(ValueError, match="auth vllm-api-key needs api_key_secret"):
        edge.gateway_objects(dataclasses.replace(SETTINGS, api_key_secret=None), ROUTES)


def test_the_extension_server_never_receives_listener_secrets() -> None:
    hooks = edge.envoy_gateway_chart_values(inference_extension=True)["config"]["envoyGateway"][
        "extensionManager"]["hooks"]["xdsTranslator"]
    assert hooks["translation"] == {
        "listener": {"includeAll": True}, "route": {"includeAll": True}, "cluster": {"includeAll": True},
        "secret": {"includeAll": False},
    }


def test_unknown_host_is_not_routed() -> None:
    assert gateway_backend(GATEWAY, "other.example.com", "/v1/chat/completions") is None


# --------------------------------------------------------------------------------------------
# ALB mode


ALB = edge.alb_ingress(SETTINGS, INGRESS_ROUTES, ALB_SUBNETS)


DENY_ALL = "0.0.0.0/0,::/0"


def ingress_backend(objects: list[dict[str, Any]], host: str, path: str) -> tuple[str, str, int] | None:
    """The Service host + path reach: an Exact path before any Prefix (ingress-nginx `location =`, the ALB's rules
    in listed order with exact paths first), the longest prefix otherwise; None where nothing matches, or the
    matching path answers itself (an ALB fixed-response action, an Ingress that denies every address)."""
    found = []
    for ingress in by_kind(objects, "Ingress"):
        annotations = ingress["metadata"].get("annotations", {})
        for rule in ingress["spec"]["rules"]:
            if rule["host"] != host:
                continue
            for entry in rule["http"]["paths"]:
                assert entry["pathType"] in ("Prefix", "Exact")
                exact = entry["pathType"] == "Exact"
                if entry["path"] == path if exact else _prefix_matches(entry["path"], path):
                    service = entry["backend"]["service"]
                    answers_itself = (service["port"].get("name") == "use-annotation"
                                      or annotations.get("nginx.ingress.kubernetes.io/denylist-source-range")
                                      == DENY_ALL)
                    target = None if answers_itself else (ingress["metadata"]["namespace"], service["name"],
                                                          service["port"]["number"])
                    found.append(((exact, len(entry["path"])), target))
    return max(found, key=lambda item: item[0])[1] if found else None


def test_alb_annotations_pin_every_streaming_setting() -> None:
    llama = one(ALB, "Ingress", "llm-serving-llm-example-com")
    assert llama["metadata"]["namespace"] == SERVING_NS
    assert llama["spec"]["ingressClassName"] == "alb"
    assert llama["metadata"]["annotations"] == {
        "alb.ingress.kubernetes.io/group.name": "llm-serving",
        "alb.ingress.kubernetes.io/scheme": "internet-facing",
        "alb.ingress.kubernetes.io/target-type": "ip",
        "alb.ingress.kubernetes.io/subnets": "subnet-0a1b2c3d,subnet-1a2b3c4d",
        "alb.ingress.kubernetes.io/listen-ports": '[{"HTTPS": 443}]',
        "alb.ingress.kubernetes.io/certificate-arn": "arn:aws:acm:us-east-1:123456789012:certificate/0000",
        "alb.ingress.kubernetes.io/load-balancer-attributes": "idle_timeout.timeout_seconds=600",
        "alb.ingress.kubernetes.io/backend-protocol-version": "HTTP1",
        "alb.ingress.kubernetes.io/healthcheck-path": "/health",
        "alb.ingress.kubernetes.io/target-group-attributes": "deregistration_delay.timeout_seconds=300",
        "alb.ingress.kubernetes.io/actions.runtime-adapter-api-closed": (
            '{"type":"fixed-response","fixedResponseConfig":{"contentType":"application/json","statusCode":"404",'
            '"messageBody":"{\\"error\\": {\\"message\\": \\"Not found.\\", \\"type\\": \\"NotFoundError\\", '
            '\\"param\\": null, \\"code\\": 404}}"}}'),
    }
    qwen = one(ALB, "Ingress", "llm-serving-qwen-example-com")["metadata"]["annotations"]
    assert qwen["alb.ingress.kubernetes.io/target-group-attributes"] == "deregistration_delay.timeout_seconds=120"


@pytest.mark.parametrize("host,path,expected", [
    (HOST, "/v1/chat/completions", (SERVING_NS, "llama-70b", PORT)),
    ("qwen.example.com", "/v1/completions", (SERVING_NS, "qwen-7b", PORT)),
    (HOST, "/metrics", None),
    (HOST, "/health", None),
    ("qwen.example.com", "/metrics", None),
    (HOST, "/v1x", None),
])
def test_alb_routes_only_v1_to_the_model_service(host: str, path: str, expected: tuple | None) -> None:
    backend = ingress_backend(ALB, host, path)
    assert backend == expected
    if backend:
        assert backend[2] in SERVICES[(backend[0], backend[1])]


@pytest.mark.parametrize("settings,routes,message", [
    (dataclasses.replace(SETTINGS, alb_idle_timeout_seconds=90), INGRESS_ROUTES, "shorter than the stream idle"),
    (dataclasses.replace(SETTINGS, alb_idle_timeout_seconds=4001), INGRESS_ROUTES, "outside 1..4000s"),
    (dataclasses.replace(SETTINGS, acm_certificate_arn=None), INGRESS_ROUTES, "needs acm_certificate_arn"),
    (SETTINGS, ROUTES, "publishes each model on its own host"),
    (API_KEYS, INGRESS_ROUTES, "cannot check keys or JWTs"),
])
def test_alb_rejects_settings_it_cannot_serve_safely(settings: EdgeSettings, routes: list[Route], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        edge.alb_ingress(settings, routes, ALB_SUBNETS)


@pytest.mark.parametrize("subnets", [(), ("subnet-0a1b2c3d",), ("subnet-0a1b2c3d", "subnet-0a1b2c3d")])
def test_alb_refuses_fewer_than_two_named_subnets(subnets: tuple[str, ...]) -> None:
    with pytest.raises(ValueError, match="needs the ALB's subnets"):
        edge.alb_ingress(SETTINGS, INGRESS_ROUTES, subnets)


@pytest.mark.parametrize("path", UNGUARDED_PATHS)
def test_alb_and_nginx_never_route_vllms_unguarded_endpoints(path: str) -> None:
    for objects in (ALB, edge.nginx_ingress(SETTINGS, INGRESS_ROUTES)):
        for host in (HOST, "qwen.example.com"):
            assert ingress_backend(objects, host, path) is None


# --------------------------------------------------------------------------------------------
# ingress-nginx mode


NGINX = edge.nginx_ingress(SETTINGS, INGRESS_ROUTES)


def test_nginx_annotations_turn_buffering_off_and_pin_timeouts_and_body_size() -> None:
    llama = one(NGINX, "Ingress", "llm-serving-llm-example-com")
    assert llama["spec"]["ingressClassName"] == "nginx"
    assert llama["metadata"]["annotations"] == {
        "nginx.ingress.kubernetes.io/proxy-buffering": "off",
        "nginx.ingress.kubernetes.io/proxy-request-buffering": "off",
        "nginx.ingress.kubernetes.io/proxy-http-version": "1.1",
        "nginx.ingress.kubernetes.io/proxy-read-timeout": "120",
        "nginx.ingress.kubernetes.io/proxy-send-timeout": "120",
        "nginx.ingress.kubernetes.io/proxy-body-size": "8m",
        "nginx.ingress.kubernetes.io/proxy-next-upstream": "off",
    }
    assert llama["spec"]["tls"] == [{"hosts": [HOST], "secretName": "llm-tls"}]
    qwen = one(NGINX, "Ingress", "llm-serving-qwen-example-com")["metadata"]["annotations"]
    assert qwen["nginx.ingress.kubernetes.io/proxy-read-timeout"] == "60"
    assert qwen["nginx.ingress.kubernetes.io/proxy-body-size"] == "4m"


def test_nginx_body_size_keeps_odd_sizes_exact() -> None:
    route = dataclasses.replace(LLAMA, request_body_limit_bytes=1536 * 1024)
    (ingress, _) = edge.nginx_ingress(SETTINGS, [route])
    assert ingress["metadata"]["annotations"]["nginx.ingress.kubernetes.io/proxy-body-size"] == "1536k"


def test_nginx_with_cert_manager_annotates_and_names_the_secret() -> None:
    ingress = edge.nginx_ingress(CERT_MANAGER, INGRESS_ROUTES)[0]
    assert ingress["metadata"]["annotations"]["cert-manager.io/cluster-issuer"] == "letsencrypt"
    assert ingress["spec"]["tls"] == [{"hosts": [HOST], "secretName": "llm-serving-tls"}]


@pytest.mark.parametrize("path,expected", [
    ("/v1/chat/completions", (SERVING_NS, "llama-70b", PORT)),
    ("/metrics", None),
    ("/health", None),
])
def test_nginx_routes_only_v1(path: str, expected: tuple | None) -> None:
    assert ingress_backend(NGINX, HOST, path) == expected


# --------------------------------------------------------------------------------------------
# NetworkPolicies, checked with a small evaluator of the NetworkPolicy API semantics


MONITORING_NS = "monitoring"
VLLM_LABELS = {"app.kubernetes.io/name": "llama-70b", "app.kubernetes.io/component": "vllm"}
JOB_LABELS = {"app.kubernetes.io/name": "llama-70b", "app.kubernetes.io/component": "stage-weights"}
ALB_SUBNET = "10.0.64.0/20"
PICKER_LABELS = {"app.kubernetes.io/component": "endpoint-picker"}
POLICY_ARGS: dict[str, Any] = {
    "serving_namespace": SERVING_NS, "model_selector": {"app.kubernetes.io/component": "vllm"}, "port": PORT,
    "edge_namespace": EDGE_NS, "edge_pod_selector": edge.edge_pod_selector(EdgeMode.GATEWAY, SETTINGS),
    "prometheus_namespace": MONITORING_NS, "prometheus_pod_selector": edge.PROMETHEUS_POD_LABELS,
    "staging_job_selector": {"app.kubernetes.io/component": "stage-weights"}, "picker_selector": PICKER_LABELS,
}
GATEWAY_POLICIES = edge.network_policies(**POLICY_ARGS)
ALB_POLICIES = edge.network_policies(**{**POLICY_ARGS, "edge_pod_selector": None, "picker_selector": None},
                                     load_balancer_cidrs=(ALB_SUBNET,))
NGINX_POLICIES = edge.network_policies(**{
    **POLICY_ARGS, "edge_namespace": "ingress-nginx",
    "edge_pod_selector": edge.edge_pod_selector(EdgeMode.INGRESS_NGINX, SETTINGS)})


@dataclass(frozen=True)
class Pod:
    namespace: str
    labels: tuple[tuple[str, str], ...] = ()

    def label_map(self) -> dict[str, str]:
        return dict(self.labels)


def pod(namespace: str, labels: dict[str, str] | None = None) -> Pod:
    return Pod(namespace, tuple(sorted((labels or {}).items())))


VLLM = pod(SERVING_NS, VLLM_LABELS)
JOB = pod(SERVING_NS, JOB_LABELS)
# An Envoy proxy pod of this Gateway as Envoy Gateway v1.9.0 labels it; the controller and the proxy of
# another Gateway share the namespace but not these labels.
ENVOY = pod(EDGE_NS, {"app.kubernetes.io/name": "envoy", "app.kubernetes.io/component": "proxy",
                      "app.kubernetes.io/managed-by": "envoy-gateway",
                      "gateway.envoyproxy.io/owning-gateway-name": "llm-serving",
                      "gateway.envoyproxy.io/owning-gateway-namespace": EDGE_NS, "pod-template-hash": "5d8f"})
OTHER_GATEWAY = pod(EDGE_NS, {**ENVOY.label_map(), "gateway.envoyproxy.io/owning-gateway-name": "team-b"})
EG_CONTROLLER = pod(EDGE_NS, {"app.kubernetes.io/name": "gateway-helm", "control-plane": "envoy-gateway"})
PROMETHEUS = pod(MONITORING_NS, {"app.kubernetes.io/name": "prometheus", "app.kubernetes.io/managed-by":
                                 "prometheus-operator", "prometheus": "kube-prometheus-stack-prometheus"})
GRAFANA = pod(MONITORING_NS, {"app.kubernetes.io/name": "grafana"})
NGINX_POD = pod("ingress-nginx", {"app.kubernetes.io/name": "ingress-nginx",
                                  "app.kubernetes.io/component": "controller"})
NGINX_ADMISSION = pod("ingress-nginx", {"app.kubernetes.io/name": "ingress-nginx",
                                        "app.kubernetes.io/component": "admission-webhook"})
PICKER = pod(SERVING_NS, PICKER_LABELS)
STRANGER = pod("team-b", {"app": "curl"})
KUBE_DNS = pod("kube-system", {"k8s-app": "kube-dns"})
INTERNET = "104.16.0.10"
ALB_NODE = "10.0.70.5"


def _peer_matches(peer: dict[str, Any], policy_ns: str, endpoint: Pod | str) -> bool:
    if "ipBlock" in peer:
        if not isinstance(endpoint, str):
            return False  # pod traffic is matched by selectors here (ipBlock is meant for cluster-external IPs)
        address = ipaddress.ip_address(endpoint)
        block = peer["ipBlock"]
        return address in ipaddress.ip_network(block["cidr"]) and not any(
            address in ipaddress.ip_network(e) for e in block.get("except", []))
    if isinstance(endpoint, str):
        return False
    if "namespaceSelector" in peer:
        if not _selector_matches(peer["namespaceSelector"], {"kubernetes.io/metadata.name": endpoint.namespace}):
            return False
    elif endpoint.namespace != policy_ns:
        return False
    return _selector_matches(peer.get("podSelector", {}), endpoint.label_map())


def _ports_match(ports: list[dict[str, Any]] | None, port: int, protocol: str) -> bool:
    return not ports or any(p.get("protocol", "TCP") == protocol and p.get("port", port) == port for p in ports)


def _direction_allows(policies: list[dict[str, Any]], target: Pod, peer: Pod | str, port: int, protocol: str,
                      direction: str) -> bool:
    """Whether the policies selecting `target` for `direction` admit traffic with `peer`."""
    key, peers_key = ("ingress", "from") if direction == "Ingress" else ("egress", "to")
    selecting = [
        p for p in policies
        if p["metadata"]["namespace"] == target.namespace
        and _selector_matches(p["spec"]["podSelector"], target.label_map())
        and direction in p["spec"]["policyTypes"]
    ]
    if not selecting:
        return True  # a pod no policy selects is not isolated
    return any(
        _ports_match(rule.get("ports"), port, protocol)
        and (peers_key not in rule or any(_peer_matches(x, p["metadata"]["namespace"], peer) for x in rule[peers_key]))
        for p in selecting for rule in p["spec"].get(key, [])
    )


def allowed(source: Pod | str, destination: Pod | str, port: int, protocol: str = "TCP",
            policies: list[dict[str, Any]] = GATEWAY_POLICIES) -> bool:
    egress_ok = isinstance(source, str) or _direction_allows(policies, source, destination, port, protocol, "Egress")
    ingress_ok = isinstance(destination, str) or _direction_allows(
        policies, destination, source, port, protocol, "Ingress")
    return egress_ok and ingress_ok


def test_network_policies_validate() -> None:
    everything = GATEWAY_POLICIES + ALB_POLICIES + NGINX_POLICIES
    assert [e for o in everything for e in kubernetes_object_errors(o, "1.34")] == []


@pytest.mark.parametrize("source,destination,port,protocol,expected", [
    (ENVOY, VLLM, PORT, "TCP", True),
    (PROMETHEUS, VLLM, PORT, "TCP", True),
    (PICKER, VLLM, PORT, "TCP", True),
    # Same namespaces, other pods: neither the controller, another Gateway's proxy nor Grafana.
    (EG_CONTROLLER, VLLM, PORT, "TCP", False),
    (OTHER_GATEWAY, VLLM, PORT, "TCP", False),
    (GRAFANA, VLLM, PORT, "TCP", False),
    (ALB_NODE, VLLM, PORT, "TCP", False),
    (STRANGER, VLLM, PORT, "TCP", False),
    (ENVOY, VLLM, 9000, "TCP", False),
    (JOB, VLLM, PORT, "TCP", False),
    (VLLM, INTERNET, 443, "TCP", False),
    (VLLM, pod(SERVING_NS, {**VLLM_LABELS, "app.kubernetes.io/name": "qwen-7b"}), PORT, "TCP", False),
    (VLLM, KUBE_DNS, 53, "UDP", True),
    (VLLM, KUBE_DNS, 53, "TCP", True),
    (JOB, INTERNET, 443, "TCP", True),
    (JOB, INTERNET, 80, "TCP", False),
    (JOB, KUBE_DNS, 53, "UDP", True),
    (ENVOY, JOB, PORT, "TCP", False),
    (PROMETHEUS, JOB, PORT, "TCP", False),
    (VLLM, JOB, 443, "TCP", False),
    (STRANGER, JOB, 443, "TCP", False),
    (INTERNET, JOB, 443, "TCP", False),
], ids=lambda v: v if isinstance(v, str | int | bool) else getattr(v, "namespace", str(v)))
def test_network_policies_allow_only_the_intended_flows(
    source: Pod | str, destination: Pod | str, port: int, protocol: str, expected: bool
) -> None:
    assert allowed(source, destination, port, protocol) is expected


def test_gateway_mode_admits_this_gateways_proxy_pods_prometheus_pods_and_pickers_by_label() -> None:
    (rule,) = GATEWAY_POLICIES[0]["spec"]["ingress"]
    assert rule == {
        "from": [
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": EDGE_NS}},
             "podSelector": {"matchLabels": {
                 "app.kubernetes.io/name": "envoy", "app.kubernetes.io/component": "proxy",
                 "app.kubernetes.io/managed-by": "envoy-gateway",
                 "gateway.envoyproxy.io/owning-gateway-name": "llm-serving",
                 "gateway.envoyproxy.io/owning-gateway-namespace": EDGE_NS}}},
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": MONITORING_NS}},
             "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus",
                                             "app.kubernetes.io/managed-by": "prometheus-operator"}}},
            {"podSelector": {"matchLabels": PICKER_LABELS}},
        ],
        "ports": [{"protocol": "TCP", "port": PORT}],
    }


def test_dev_gets_a_self_signed_certificate_in_the_secret_its_gateway_names(rendered):
    dev = rendered["dev"]
    secret = dev.manifest("Secret", "llm-serving-tls")
    assert (secret["metadata"]["namespace"], secret["type"]) == ("envoy-gateway-system", "kubernetes.io/tls")
    assert sorted(secret["stringData"]) == ["tls.crt", "tls.key"]
    gateway = dev.manifest("Gateway", "llm-serving")
    refs = [ref for listener in gateway["spec"]["listeners"] for ref in (listener.get("tls") or {}).get(
        "certificateRefs", [])]
    assert refs == [{"group": "", "kind": "Secret", "name": "llm-serving-tls"}]
    certificate = dev.resource("tls:index/selfSignedCert:SelfSignedCert", "edge-tls-certificate")["inputs"]
    assert certificate["dnsNames"] == ["llm.dev.example.com"]
    assert (certificate["validityPeriodHours"], certificate["earlyRenewalHours"]) == (8760, 720)
    assert certificate["allowedUses"] == ["digital_signature", "key_encipherment", "server_auth"]
    key = dev.resource("tls:index/privateKey:PrivateKey", "edge-tls-key")["inputs"]
    assert key == {"algorithm": "ECDSA", "ecdsaCurve": "P256"}
    # The Secret comes after the namespace it lives in; prod's certificate is cert-manager's.
    assert "kubernetes:core/v1:Namespace::edge-namespace" in dev.wiring["kubernetes:core/v1:Secret::edge-tls-secret"][
        "dependsOn"]
    assert not [r for r in rendered["prod"].resources if r["type"].startswith("tls:")]
@pytest.mark.parametrize("source,expected", [
    (ALB_NODE, True), ("10.0.80.1", False), (ENVOY, False), (PROMETHEUS, True), (STRANGER, False),
    # A pod whose VPC CNI address lies outside the ALB's subnets: admitted only by its labels, which it lacks.
    ("10.0.1.17", False),
], ids=str)
def test_alb_mode_admits_only_the_load_balancers_subnets_and_prometheus(source: Pod | str, expected: bool) -> None:
    assert allowed(source, VLLM, PORT, policies=ALB_POLICIES) is expected


@pytest.mark.parametrize("source,expected", [(NGINX_POD, True), (NGINX_ADMISSION, False), (ENVOY, False)], ids=str)
def test_nginx_mode_admits_only_the_controller_pods(source: Pod, expected: bool) -> None:
    assert allowed(source, VLLM, PORT, policies=NGINX_POLICIES) is expected


def test_alb_mode_without_the_subnets_is_refused() -> None:
    with pytest.raises(ValueError, match="load_balancer_cidrs must name the load balancer's subnets"):
        edge.network_policies(**{**POLICY_ARGS, "edge_pod_selector": None})


# S3's prefix list as DescribePrefixLists may answer it: out of order, one range twice.
S3_PREFIX_LIST = ("54.231.0.0/16", "3.5.0.0/19", "52.216.0.0/15", "3.5.0.0/19")
WORKER = pod(SERVING_NS, {"app.kubernetes.io/name": "llama-405b", "app.kubernetes.io/component": "vllm-worker"})
S3_ARGS: dict[str, Any] = {**POLICY_ARGS, "weights_from_s3": True,
                           "worker_selector": {"app.kubernetes.io/component": "vllm-worker"}}
S3_POLICIES = edge.network_policies(**S3_ARGS, s3_prefix_list_cidrs=S3_PREFIX_LIST)
S3_ANYWHERE_POLICIES = edge.network_policies(**S3_ARGS)
S3_ADDRESS = "52.217.160.9"  # in 52.216.0.0/15, S3 in us-east-1
AGENT = "169.254.170.23"


def test_s3_policies_validate() -> None:
    assert [e for o in S3_POLICIES + S3_ANYWHERE_POLICIES for e in kubernetes_object_errors(o, "1.34")] == []


@pytest.mark.parametrize("source,destination,port,expected", [
    (VLLM, S3_ADDRESS, 443, True),
    (VLLM, INTERNET, 443, False),
    (VLLM, S3_ADDRESS, 80, False),
    (VLLM, AGENT, 80, True),
    (WORKER, S3_ADDRESS, 443, True),
    (WORKER, INTERNET, 443, False),
    (WORKER, AGENT, 80, True),
    # The staging Job downloads from the Hub and its CDN as well: any address on 443 still.
    (JOB, INTERNET, 443, True),
    (JOB, S3_ADDRESS, 443, True),
    (JOB, AGENT, 80, True),
], ids=lambda v: v if isinstance(v, str | int | bool) else getattr(v, "namespace", str(v)))
def test_with_a_gateway_endpoint_the_streaming_pods_reach_only_s3s_prefix_list_on_443(
    source: Pod, destination: str, port: int, expected: bool
) -> None:
    assert allowed(source, destination, port, policies=S3_POLICIES) is expected


def test_without_a_gateway_endpoint_the_streaming_pods_may_reach_any_address_on_443() -> None:
    assert allowed(VLLM, INTERNET, 443, policies=S3_ANYWHERE_POLICIES)
    assert allowed(WORKER, INTERNET, 443, policies=S3_ANYWHERE_POLICIES)


def test_the_prefix_lists_cidrs_are_named_once_each_in_address_order() -> None:
    serving, _, workers = S3_POLICIES
    https = {"to": [{"ipBlock": {"cidr": c}} for c in ("3.5.0.0/19", "52.216.0.0/15", "54.231.0.0/16")],
             "ports": [{"protocol": "TCP", "port": 443}]}
    assert serving["spec"]["egress"][-1] == workers["spec"]["egress"][-1] == https
    # The same list in another order is the same policy: no change to show at the next preview.
    assert edge.network_policies(**S3_ARGS, s3_prefix_list_cidrs=sorted(S3_PREFIX_LIST)) == S3_POLICIES


@pytest.mark.parametrize("cidrs,message", [
    # A rule whose `to` is empty admits every destination: an empty list must never become one.
    ((), "has no CIDR block"),
    (("52.216.0.1/15",), "'52.216.0.1/15' is not a CIDR block"),
    (("s3.amazonaws.com",), "'s3.amazonaws.com' is not a CIDR block"),
])
def test_an_empty_or_malformed_prefix_list_is_refused(cidrs: tuple[str, ...], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        edge.network_policies(**S3_ARGS, s3_prefix_list_cidrs=cidrs)


def test_narrowing_s3_egress_without_s3_weights_is_refused() -> None:
    with pytest.raises(ValueError, match="only weights_from_s3 opens"):
        edge.network_policies(**POLICY_ARGS, s3_prefix_list_cidrs=S3_PREFIX_LIST)


# --------------------------------------------------------------------------------------------
# vLLM's runtime adapter API, in every edge mode


def _runtime_adapter_reach(mode: str) -> list[object]:
    """Where each model's runtime adapter paths lead through `mode`'s objects (None: nowhere)."""
    if mode == "byModel":
        pooled = [dataclasses.replace(route, inference_pool=True, path_prefix="/") for route in ROUTES]
        objects = by_model.models_route_objects(dataclasses.replace(SETTINGS, by_model=True), pooled)
        return [by_model.routed_pool(objects, route.model_name, path)
                for route in pooled for path in edge.RUNTIME_ADAPTER_PATHS]
    if mode in ("alb", "ingress-nginx"):
        objects = ALB if mode == "alb" else edge.nginx_ingress(SETTINGS, INGRESS_ROUTES)
        return [ingress_backend(objects, route.host, path)
                for route in INGRESS_ROUTES for path in edge.runtime_adapter_paths(route.path_prefix)]
    settings = {"gateway": SETTINGS, "gateway-api-key": API_KEYS, "jwt": JWT}[mode]
    objects = edge.gateway_objects(settings, ROUTES)
    return [gateway_backend(objects, route.host, path)
            for route in ROUTES for path in edge.runtime_adapter_paths(route.path_prefix)]


@pytest.mark.parametrize("mode", ["gateway", "gateway-api-key", "jwt", "alb", "ingress-nginx", "byModel"])
def test_no_edge_mode_routes_vllms_runtime_adapter_api(mode: str) -> None:
    reach = _runtime_adapter_reach(mode)
    assert len(reach) == 4 and reach == [None] * 4


def test_the_runtime_adapter_paths_sit_under_each_models_prefix() -> None:
    assert edge.runtime_adapter_paths("/") == ["/v1/load_lora_adapter", "/v1/unload_lora_adapter"]
    assert edge.runtime_adapter_paths("/qwen-7b/") == ["/qwen-7b/v1/load_lora_adapter",
                                                       "/qwen-7b/v1/unload_lora_adapter"]
    # The paths vLLM registers under its root, as vllm/entrypoints/serve/lora/api_router.py @0.33.0 names them.
    assert set(edge.RUNTIME_ADAPTER_PATHS) == {"/v1/load_lora_adapter", "/v1/unload_lora_adapter"}
