"""One base URL for every model (`edge.routing: byModel`): Envoy AI Gateway routes each request by its body's `model`.

Pure builders (no Pulumi import). Envoy AI Gateway v1.1.0 turns an AIGatewayRoute into an HTTPRoute of the same
name (internal/controller/ai_gateway_route.go `newHTTPRoute`): one rule per AIGatewayRoute rule, each match the
root prefix `/` plus our header matches, and a last rule named `route-not-found` whose filter answers 404. Its
ext_proc sidecar in every Envoy pod reads the JSON body and sets the header `x-ai-eg-model` to the body's `model`,
overwriting any client copy, then asks Envoy to match the route again (internal/extproc/processor_impl.go). So the
rule of a model matches only requests that name one of its served names, and every other name falls through to
`route-not-found`.

The sidecar handles an exact list of paths and answers every other one with its own 404 before any backend is
chosen (internal/extproc/server.go `processorForPath`, the list in cmd/extproc/mainlib/main.go): vLLM's
`/v1/load_lora_adapter`, `/v1/unload_lora_adapter`, `/metrics` and `/health` can never be reached on this host.
"""

from __future__ import annotations

from typing import Any

from .awaits import AI_ROUTE_WAIT_FOR, WAIT_FOR_ANNOTATION
from .objects import (
    ENVOY_API,
    GATEWAY_GROUP,
    POOL_GROUP,
    EdgeSettings,
    Manifest,
    Route,
    _duration,
    _meta,
    _parent_ref,
    backend_policy_spec,
    policy_awaited,
)

AI_GATEWAY_API = "aigateway.envoyproxy.io/v1beta1"
# The header the sidecar sets from the body's `model` (envoyproxy/ai-gateway v1.1.0 internal/internalapi
# ModelNameHeaderKeyDefault; processor_impl.go sets it with OVERWRITE_IF_EXISTS_OR_ADD).
MODEL_HEADER = "x-ai-eg-model"
# The rule the controller appends to every generated HTTPRoute, and reserves in the CRD's CEL rules
# (ai_gateway_route.go newHTTPRoute; aigateway.envoyproxy.io_aigatewayroutes.yaml @v1.1.0).
NOT_FOUND_RULE = "route-not-found"
# The CRD allows 15 rules (maxItems, vendored aigateway.envoyproxy.io_aigatewayroutes.json) and the controller adds
# one: 14 models per route, one rule each (its CEL rules allow one InferencePool per rule).
MAX_MODELS = 14
# The CRD's limit on matches per rule (maxItems 128): a model's served names, adapters and aliases included.
MAX_NAMES_PER_MODEL = 128
# The paths the sidecar forwards, each matched exactly (cmd/extproc/mainlib/main.go @v1.1.0 with rootPrefix "/" and
# the chart's endpointConfig prefixes: openai "", cohere "/cohere", anthropic "/anthropic"); every other path gets
# its 404 `unsupported path` (internal/extproc/server.go).
SIDECAR_PATHS = frozenset({
    "/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses", "/v1/responses/input_tokens",
    "/v1/audio/speech", "/v1/audio/transcriptions", "/v1/audio/translations", "/v1/images/generations",
    "/v1/models", "/tokenize", "/cohere/v2/rerank", "/anthropic/v1/models", "/anthropic/v1/messages",
    "/anthropic/v1/messages/count_tokens",
})


# The Gateway annotation naming the GatewayConfig whose settings the webhook gives the sidecar it injects into that
# Gateway's Envoy pods (envoyproxy/ai-gateway v1.1.0 internal/controller/ai_gateway_route.go
# GatewayConfigAnnotationKey; gateway_mutator.go fetchGatewayConfig reads it in the Gateway's namespace at each pod's
# creation, and gateway.go annotates the running pods with a hash of it, so a change rolls them).
GATEWAY_CONFIG_ANNOTATION = "aigateway.envoyproxy.io/gateway-config"
# The sidecar's resources. Without a GatewayConfig it runs with none (extproc_builder.go buildExtProcContainer: an
# empty ResourceRequirements; the chart's values have no default), so the scheduler does not count it and nothing
# bounds it. It holds each request body whole while it reads `model` (buffered up to the listener's bufferLimit) and
# parses every streamed chunk: a CPU request and no CPU limit, so a busy proxy is never throttled mid-stream, and a
# memory limit that a leak or a burst of large bodies reaches before the node does.
SIDECAR_RESOURCES = {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "1Gi"}}


def sidecar_config_name(settings: EdgeSettings) -> str:
    return f"{settings.gateway_name}-body-router"


def sidecar_config(settings: EdgeSettings) -> Manifest:
    """The GatewayConfig our Gateway names (GATEWAY_CONFIG_ANNOTATION): the body router sidecar's resources. Created
    before the Gateway: a config the webhook does not find at a pod's creation leaves that pod's sidecar without
    them (fetchGatewayConfig logs and uses the defaults)."""
    return {
        "apiVersion": AI_GATEWAY_API,
        "kind": "GatewayConfig",
        "metadata": _meta(sidecar_config_name(settings), settings.namespace),
        "spec": {"extProc": {"kubernetes": {"resources": SIDECAR_RESOURCES}}},
    }


def models_route_name(settings: EdgeSettings) -> str:
    """The AIGatewayRoute, and the HTTPRoute the controller makes of it (same name, same namespace)."""
    return f"{settings.gateway_name}-models"


def model_names(route: Route) -> tuple[str, ...]:
    """The names a request's `model` may carry to reach this model's pool: its served name, then the extra names the
    pool serves (LoRA adapters, and aliases the picker rewrites to one of them). Each is an Exact match on the
    model's rule, and the sidecar's `GET /v1/models` lists exactly these (internal/controller/gateway.go collects
    every Exact `x-ai-eg-model` value of the Gateway's AIGatewayRoutes)."""
    names = (route.model_name, *route.extra_model_names)
    if len(set(names)) != len(names):
        raise ValueError(f"{route.model_name}: a served name is listed twice in {list(names)}")
    if len(names) > MAX_NAMES_PER_MODEL:
        raise ValueError(f"{route.model_name}: {len(names)} names, the AIGatewayRoute CRD allows "
                         f"{MAX_NAMES_PER_MODEL} matches per rule")
    return names


def _rule(route: Route) -> dict[str, Any]:
    return {
        "name": route.model_name,
        # One match per name, each the one header: matches are ORed, the headers of one match ANDed.
        "matches": [{"headers": [{"type": "Exact", "name": MODEL_HEADER, "value": name}]}
                    for name in model_names(route)],
        # The pool's picker chooses the replica, as behind a per-model HTTPRoute (the controller copies the ref,
        # ai_gateway_route.go newHTTPRoute).
        "backendRefs": [{"group": POOL_GROUP, "kind": "InferencePool", "name": route.model_name}],
        # Failure: unset, the controller sets 60 s (api/v1beta1/ai_gateway_route_helper.go defaultRequestTimeout),
        # which cuts every longer generation. The stack's one clock sets it, as on a per-model HTTPRoute.
        "timeouts": {"request": _duration(route.request_timeout_seconds)},
    }


def not_found_body(names: list[str]) -> str:
    """An OpenAI-style error naming the stack's models (the shape vLLM answers for a model it does not serve:
    vllm/entrypoints/serve/engine/serving.py @0.33.0). Fixed text: the requested name is client input and an Envoy
    command operator would put it into the JSON unescaped, so it is not echoed."""
    listed = ", ".join(names)
    return ('{"error": {"message": "No model of this name is served here, or the path is not part of the API. '
            f'Available models: {listed}.", "type": "NotFoundError", "param": "model", "code": 404}}}}')


def not_found_response(names: list[str]) -> dict[str, Any]:
    """The controller's `route-not-found` rule answers a plain-text 404 (its HTTPRouteFilter direct response,
    ai_gateway_route.go generateHTTPRouteFilters). Envoy sends a direct response as a local reply (envoyproxy/envoy
    source/common/router/router.cc: sendLocalReply), so a `Local` override rewrites it, as the 429 override does
    for the picker's reply (objects.overload_response); the sidecar's own 404 for a path outside its list is an
    ext_proc immediate response, a local reply too, and gets the same body."""
    return {
        "match": {"statusCodes": [{"type": "Value", "value": 404}]},
        "source": "Local",
        "response": {"contentType": "application/json",
                     "body": {"type": "Inline", "inline": not_found_body(names)}},
    }


def models_route_objects(settings: EdgeSettings, routes: list[Route]) -> list[Manifest]:
    """The AIGatewayRoute over every model, a BackendTrafficPolicy per model's rule (the same timeouts, retries and
    429 body as a per-model route's), and one on `route-not-found` for the JSON 404."""
    if not routes:
        raise ValueError("at least one route is required")
    if len(routes) > MAX_MODELS:
        raise ValueError(f"{len(routes)} models behind one AIGatewayRoute; it holds {MAX_MODELS}")
    if len({(route.host, route.namespace) for route in routes}) != 1:
        raise ValueError("byModel routing puts every model on one host, in one namespace")
    if any(not route.inference_pool for route in routes):
        raise ValueError("byModel routing sends every model to its InferencePool")
    if any(route.objective_header is not None for route in routes):
        # AIGatewayRoute rules have no filters (v1beta1 AIGatewayRouteRule), so the header cannot be set per model.
        raise ValueError("byModel routing cannot set a model's objective header")
    all_names = [name for route in routes for name in model_names(route)]
    if len(set(all_names)) != len(all_names):
        raise ValueError(f"a model name is routed to two pools: {sorted(all_names)}")
    name, namespace = models_route_name(settings), routes[0].namespace
    target = {"group": GATEWAY_GROUP, "kind": "HTTPRoute", "name": name}
    ai_route = {
        "apiVersion": AI_GATEWAY_API,
        "kind": "AIGatewayRoute",
        # `pulumi up` waits until Envoy AI Gateway has accepted it (written its HTTPRoute) before the deploy gate.
        "metadata": _meta(name, namespace, annotations={WAIT_FOR_ANNOTATION: AI_ROUTE_WAIT_FOR}),
        "spec": {
            "parentRefs": [_parent_ref(settings, routes[0])],
            "hostnames": [routes[0].host],
            "rules": [_rule(route) for route in routes],
        },
    }
    objects = [ai_route]
    for route in routes:
        policy = {
            "apiVersion": ENVOY_API,
            "kind": "BackendTrafficPolicy",
            "metadata": _meta(route.model_name, namespace, annotations=policy_awaited(settings)),
            # The generated HTTPRoute's rule carries the model's name (newHTTPRoute copies rule.Name).
            "spec": {"targetRefs": [{**target, "sectionName": route.model_name}], **backend_policy_spec(route)},
        }
        objects.append(policy)
    objects.append({
        "apiVersion": ENVOY_API,
        "kind": "BackendTrafficPolicy",
        "metadata": _meta(f"{name}-not-found", namespace, annotations=policy_awaited(settings)),
        # Retries written down as on every policy of ours (the policy pack's edge-non-buffering rule): a direct
        # response is never retried anyway.
        "spec": {"targetRefs": [{**target, "sectionName": NOT_FOUND_RULE}], "retry": {"numRetries": 0},
                 "responseOverride": [not_found_response(all_names)]},
    })
    return objects


def routed_pool(objects: list[Manifest], model: str, path: str = "/v1/chat/completions") -> str | None:
    """The InferencePool a request with body `model` and `path` reaches through these objects, as the sidecar and
    Envoy decide it: None when the sidecar refuses the path, or no rule names the model (`route-not-found`)."""
    if path not in SIDECAR_PATHS:
        return None
    (route,) = [o for o in objects if o["kind"] == "AIGatewayRoute"]
    for rule in route["spec"]["rules"]:
        for match in rule["matches"]:
            if all(h["name"] == MODEL_HEADER and h.get("type", "Exact") == "Exact" and h["value"] == model
                   for h in match["headers"]):
                (ref,) = rule["backendRefs"]
                return str(ref["name"])
    return None
