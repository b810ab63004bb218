"""Tests for llm_serving/edge/by_model.py: every model behind one base URL, chosen by the body's `model`.

The objects are checked against the pinned CRDs (AIGatewayRoute v1beta1, BackendTrafficPolicy, ClientTrafficPolicy)
and walked as the sidecar and Envoy decide a request (by_model.routed_pool).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from llm_serving.edge import by_model
from llm_serving.edge import objects as edge
from llm_serving.edge.objects import EdgeSettings, Route
from llm_serving.platform import versions
from llm_serving.serving.engine import PORT
from tests.support.reference import custom_resource_errors, helm_value_errors

MiB = 1024 * 1024
EDGE_NS = "envoy-gateway-system"
SERVING_NS = "llm-serving"
HOST = "llm.example.com"

LLAMA = Route(model_name="llama-70b", namespace=SERVING_NS, port=PORT, host=HOST, path_prefix="/",
              request_timeout_seconds=1800, stream_idle_timeout_seconds=120, request_body_limit_bytes=8 * MiB,
              drain_seconds=300, inference_pool=True, retry_after_seconds=5)
SMALL = dataclasses.replace(LLAMA, model_name="llama-8b", request_timeout_seconds=900, retry_after_seconds=2)
ROUTES = [LLAMA, SMALL]
SETTINGS = EdgeSettings(
    namespace=EDGE_NS, gateway_name="llm-serving", tls_secret_name="llm-tls", cert_manager_issuer=None,
    load_balancer_scheme=edge.LoadBalancerScheme.INTERNET_FACING, auth=edge.EdgeAuth.VLLM_API_KEY,
    api_key_secret="vllm-keys", jwt_issuer=None, jwt_jwks_uri=None, jwt_audiences=(), acm_certificate_arn=None,
    alb_idle_timeout_seconds=600, by_model=True,
)
OBJECTS = by_model.models_route_objects(SETTINGS, ROUTES)


def one(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (found,) = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    return found


def test_every_object_validates_against_its_crd() -> None:
    gateway = edge.gateway_objects(SETTINGS, ROUTES)
    checked = OBJECTS + [o for o in gateway if o["kind"] == "ClientTrafficPolicy"]
    assert [e for o in checked for e in custom_resource_errors(o)] == []


@pytest.mark.parametrize("model,pool", [("llama-70b", "llama-70b"), ("llama-8b", "llama-8b"), ("llama", None),
                                        ("LLAMA-8B", None), ("", None)])
def test_the_body_model_picks_that_models_pool(model: str, pool: str | None) -> None:
    assert by_model.routed_pool(OBJECTS, model) == pool


def test_extra_names_of_a_model_route_to_its_pool_and_only_there() -> None:
    """Where adapters and aliases join (by_model.model_names): an Exact match each on their model's rule."""
    adapters = dataclasses.replace(SMALL, extra_model_names=("sql-lora", "sql"))
    objects = by_model.models_route_objects(SETTINGS, [LLAMA, adapters])
    assert [by_model.routed_pool(objects, name) for name in ("sql-lora", "sql", "llama-8b", "llama-70b")] == [
        "llama-8b", "llama-8b", "llama-8b", "llama-70b"]
    with pytest.raises(ValueError, match="routed to two pools"):
        by_model.models_route_objects(SETTINGS, [LLAMA, dataclasses.replace(SMALL, extra_model_names=("llama-70b",))])


def test_one_host_one_route_one_rule_per_pool_each_with_the_routes_own_timeout() -> None:
    (route,) = [o for o in OBJECTS if o["kind"] == "AIGatewayRoute"]
    assert route["metadata"] == {"name": "llm-serving-models", "namespace": SERVING_NS,
                                 "annotations": {"pulumi.com/waitFor": "condition=Accepted"}}
    assert route["spec"]["hostnames"] == [HOST]
    assert route["spec"]["parentRefs"] == [{"group": "gateway.networking.k8s.io", "kind": "Gateway",
                                            "name": "llm-serving", "namespace": EDGE_NS,
                                            "sectionName": "https-llm-example-com"}]
    rules = {rule["name"]: rule for rule in route["spec"]["rules"]}
    assert list(rules) == ["llama-70b", "llama-8b"]
    for r in ROUTES:
        # Unset, AI Gateway would cut every request at 60 s: always the stack's clock.
        assert rules[r.model_name]["timeouts"] == {"request": f"{r.request_timeout_seconds}s"}
        assert rules[r.model_name]["backendRefs"] == [
            {"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": r.model_name}]


def test_each_models_rule_gets_its_policy_with_the_same_timeout_and_no_retries() -> None:
    for r in ROUTES:
        policy = one(OBJECTS, "BackendTrafficPolicy", r.model_name)["spec"]
        assert policy["targetRefs"] == [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute",
                                         "name": "llm-serving-models", "sectionName": r.model_name}]
        assert policy["timeout"]["http"]["requestTimeout"] == f"{r.request_timeout_seconds}s"
        assert policy["retry"] == {"numRetries": 0}
        assert policy["responseOverride"] == [edge.overload_response(r.retry_after_seconds)]


def test_an_unknown_model_gets_an_openai_404_naming_the_models() -> None:
    policy = one(OBJECTS, "BackendTrafficPolicy", "llm-serving-models-not-found")["spec"]
    assert policy["targetRefs"] == [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute",
                                     "name": "llm-serving-models", "sectionName": "route-not-found"}]
    (override,) = policy["responseOverride"]
    assert override["match"] == {"statusCodes": [{"type": "Value", "value": 404}]}
    assert override["source"] == "Local"
    assert override["response"]["contentType"] == "application/json"
    error = json.loads(override["response"]["body"]["inline"])["error"]
    assert error["code"] == 404 and error["type"] == "NotFoundError" and error["param"] == "model"
    assert "llama-70b, llama-8b" in error["message"]


@pytest.mark.parametrize("path", [*edge.RUNTIME_ADAPTER_PATHS, "/metrics", "/health", "/v1/models/x", "/v1/"])
def test_the_sidecar_forwards_no_path_outside_its_list(path: str) -> None:
    assert by_model.routed_pool(OBJECTS, "llama-70b", path) is None


def test_clients_cannot_name_their_own_objective() -> None:
    policy = one(edge.gateway_objects(SETTINGS, ROUTES), "ClientTrafficPolicy", "llm-serving")["spec"]
    assert policy["headers"] == {"earlyRequestHeaders": {"remove": ["x-llm-d-inference-objective"]}}
    per_model = dataclasses.replace(SETTINGS, by_model=False)
    routes = [LLAMA, dataclasses.replace(SMALL, path_prefix="/small")]
    assert "headers" not in one(edge.gateway_objects(per_model, routes), "ClientTrafficPolicy", "llm-serving")["spec"]


def test_the_key_is_checked_before_the_body_router_sees_a_request() -> None:
    # Envoy Gateway runs custom_response first and AI Gateway puts its body router in front of it; moved after the
    # key check, the router (and its own GET /v1/models answer) comes after it too. The key check itself is the
    # Gateway's SecurityPolicy (apiKeyAuth), in both routing modes.
    objects = edge.gateway_objects(SETTINGS, ROUTES)
    proxy = next(o for o in objects if o["kind"] == "EnvoyProxy")
    assert proxy["spec"]["filterOrder"] == [{"name": "envoy.filters.http.custom_response",
                                             "after": "envoy.filters.http.api_key_auth"}]
    assert custom_resource_errors(proxy) == []
    assert next(o for o in objects if o["kind"] == "SecurityPolicy")["spec"]["apiKeyAuth"]
    per_model = dataclasses.replace(SETTINGS, by_model=False)
    routes = [LLAMA, dataclasses.replace(SMALL, path_prefix="/small")]
    assert "filterOrder" not in next(o for o in edge.gateway_objects(per_model, routes)
                                     if o["kind"] == "EnvoyProxy")["spec"]


def test_by_model_replaces_the_per_model_routes() -> None:
    kinds = {o["kind"] for o in edge.gateway_objects(SETTINGS, ROUTES)}
    assert not kinds & {"HTTPRoute", "BackendTrafficPolicy", "HTTPRouteFilter"}


@pytest.mark.parametrize("route,message", [
    (dataclasses.replace(SMALL, inference_pool=False), "to its InferencePool"),
    (dataclasses.replace(SMALL, objective_header=("x-llm-d-inference-objective", "llama-8b")), "objective header"),
    (dataclasses.replace(SMALL, host="other.example.com"), "one host"),
])
def test_what_an_ai_gateway_rule_cannot_carry_is_refused(route: Route, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        by_model.models_route_objects(SETTINGS, [LLAMA, route])


def test_at_most_fourteen_models_fit_one_route() -> None:
    many = [dataclasses.replace(LLAMA, model_name=f"m{i}") for i in range(by_model.MAX_MODELS + 1)]
    assert len(by_model.models_route_objects(SETTINGS, many[:-1])[0]["spec"]["rules"]) == by_model.MAX_MODELS
    with pytest.raises(ValueError, match="holds 14"):
        by_model.models_route_objects(SETTINGS, many)


def test_the_sidecar_is_on_only_for_by_model_from_the_pinned_image() -> None:
    off = edge.ai_gateway_chart_values(EDGE_NS)
    on = edge.ai_gateway_chart_values(EDGE_NS, sidecar=True)
    managed_by = "app.kubernetes.io/managed-by"
    assert off["controller"]["mutatingWebhook"]["objectSelector"]["matchLabels"][managed_by] != "envoy-gateway"
    assert "extProc" not in off
    # The chart's default selector: Envoy Gateway's proxy pods.
    assert on["controller"]["mutatingWebhook"] == {"objectSelector": {"matchLabels": {managed_by: "envoy-gateway"}}}
    assert on["extProc"] == {"image": {"tag": versions.AI_GATEWAY_EXTPROC_IMAGE.tag}}
    renewed = edge.ai_gateway_chart_values(EDGE_NS, sidecar=True, webhook_cert_manager=True)
    assert renewed["controller"]["mutatingWebhook"]["certManager"] == {"enable": True}
    for values in (off, on, renewed):
        assert helm_value_errors("ai-gateway-helm", versions.AI_GATEWAY.version.removeprefix("v"), values) == []
    # A chart at another version than the pin runs its own sidecar tag: controller and sidecar stay one release.
    assert "extProc" not in edge.ai_gateway_chart_values(EDGE_NS, sidecar=True, pinned_chart=False)


def test_our_gateway_gives_the_body_router_sidecar_bounded_resources() -> None:
    """The webhook gives the sidecar the resources of the GatewayConfig our Gateway names (ai-gateway v1.1.0
    gateway_mutator.go fetchGatewayConfig); without one it has none, unseen by the scheduler and unbounded."""
    config = by_model.sidecar_config(SETTINGS)
    assert custom_resource_errors(config) == []
    (gateway,) = [o for o in edge.gateway_objects(SETTINGS, ROUTES) if o["kind"] == "Gateway"]
    named = gateway["metadata"]["annotations"][by_model.GATEWAY_CONFIG_ANNOTATION]
    assert (named, config["metadata"]["namespace"]) == (config["metadata"]["name"], gateway["metadata"]["namespace"])
    resources = config["spec"]["extProc"]["kubernetes"]["resources"]
    assert set(resources["requests"]) == {"cpu", "memory"} and set(resources["limits"]) == {"memory"}
    # Per-model routing has no sidecar and names no config.
    per_model = dataclasses.replace(SETTINGS, by_model=False)
    (plain,) = [o for o in edge.gateway_objects(per_model, [LLAMA]) if o["kind"] == "Gateway"]
    assert by_model.GATEWAY_CONFIG_ANNOTATION not in plain["metadata"].get("annotations", {})
