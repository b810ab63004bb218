"""prod with two models behind one base URL (`edge.routing: byModel`), rendered once: one host, one AIGatewayRoute
whose rule for each model sends the body's `model` to that model's own InferencePool, no per-model HTTPRoute, the
AI Gateway sidecar switched on from the pinned image, and every object valid against its schema or CRD."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from llm_serving.edge import by_model
from llm_serving.platform import versions
from stacks.offline.render import RenderResult
from tests.conftest import render_file
from tests.support import reference, stack_variants

MODELS = ("llama-70b", "llama-8b")


@pytest.fixture(scope="module")
def two_models(variants_dir) -> RenderResult:
    return render_file(stack_variants.prod_with_two_models(variants_dir))


def _kind(result: RenderResult, kind: str) -> list[dict[str, Any]]:
    return [m for m in result.manifests if m["kind"] == kind]


def test_every_object_validates_against_its_schema_or_crd(two_models):
    errors = [e for m in two_models.manifests if m["kind"] != "HTTPRouteFilter"
              for e in reference.kubernetes_object_errors(m, "1.34")]
    assert errors == []


def test_each_models_name_in_the_body_reaches_that_models_pool_on_one_host(two_models):
    (route,) = _kind(two_models, "AIGatewayRoute")
    assert route["spec"]["hostnames"] == ["llm.example.com"]
    pools = {p["metadata"]["name"]: p for p in _kind(two_models, "InferencePool")}
    objects = [route]
    for model in MODELS:
        pool = by_model.routed_pool(objects, model)
        assert pool == model
        # The pool the rule names selects that model's pods, not the other's.
        labels = pools[pool]["spec"]["selector"]["matchLabels"]
        (deployment,) = [d for d in _kind(two_models, "Deployment") if d["metadata"]["name"] == model]
        pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert labels.items() <= pod_labels.items()
    assert by_model.routed_pool(objects, "gpt-4o") is None


def test_no_model_keeps_a_route_of_its_own(two_models):
    assert _kind(two_models, "HTTPRoute") == []
    assert [p["metadata"]["name"] for p in _kind(two_models, "BackendTrafficPolicy")] == [
        *MODELS, "llm-serving-models-not-found"]


def test_the_sidecar_runs_from_the_pinned_image(two_models):
    (release,) = [r for r in two_models.by_type()["kubernetes:helm.sh/v3:Release"] if r["name"] == "edge-ai-gateway"]
    values = release["inputs"]["values"]
    assert values["extProc"] == {"image": {"tag": versions.AI_GATEWAY_EXTPROC_IMAGE.tag}}
    assert values["controller"]["mutatingWebhook"]["objectSelector"] == {
        "matchLabels": {"app.kubernetes.io/managed-by": "envoy-gateway"}}



def test_the_policy_pack_reads_the_ai_gateway_route(two_models):
    """The pack bounds every stream by the AIGatewayRoute's rules as by per-model HTTPRoutes (byModel has none): a
    drain shortened below the bound is found, and a rule whose timeout AI Gateway would default to 60 s refused."""
    from policies import rules
    from policies.streams import stream_drain_problems

    found = rules.violations(two_models, "prod")
    assert found["edge-non-buffering"] == []
    assert stream_drain_problems(two_models.resources) == []
    short = copy.deepcopy(two_models.resources)
    (picker,) = [r for r in short
                 if r["type"].endswith(":Deployment") and r["inputs"]["metadata"]["name"] == "llama-8b-epp"]
    args = picker["inputs"]["spec"]["template"]["spec"]["containers"][0]["args"]
    args[next(i for i, arg in enumerate(args) if arg.startswith("--drain-timeout="))] = "--drain-timeout=60s"
    assert [p for p in stream_drain_problems(short) if "AIGatewayRoute llm-serving-models" in p] != []
    (route,) = [r for r in two_models.resources if r["type"].endswith(":AIGatewayRoute")]
    unbounded = copy.deepcopy(route["inputs"])
    del unbounded["spec"]["rules"][0]["timeouts"]
    (rule,) = [r for r in rules.RULES if r.name == "edge-non-buffering"]
    assert rule.check(rules.AI_GATEWAY_ROUTE, unbounded, rules.RuleContext("prod", "r")) == [
        'AIGatewayRoute llm-serving/llm-serving-models rule 0: timeouts.request is unset (default 60s in Envoy AI '
        'Gateway), which cuts every longer generation. Set "0s" (no limit) or >= 600s.']


def test_the_models_route_exists_before_the_gateway_so_every_envoy_pod_gets_the_body_router(two_models):
    """AI Gateway's webhook injects its sidecar into an Envoy pod only when an AIGatewayRoute references the pod's
    Gateway when the pod is created (ai-gateway v1.1.0 gateway_mutator.go): the route goes up after the AI Gateway
    release (its webhook and CRDs) and before the Gateway, whose Envoy pods Envoy Gateway then creates."""
    wiring = two_models.wiring
    (route,) = [key for key in wiring if ":AIGatewayRoute::" in key]
    (gateway,) = [key for key in wiring if key.startswith("kubernetes:gateway.networking.k8s.io/v1:Gateway::")]
    assert route in wiring[gateway]["dependsOn"]
    assert "kubernetes:helm.sh/v3:Release::edge-ai-gateway" in wiring[route]["dependsOn"]


def test_each_models_gate_asks_the_one_endpoint_to_list_every_model_of_the_stack(two_models):
    """The deploy gate's settings (the ConfigMap the Job reads): the edge's GET /v1/models, the AI Gateway's sidecar
    answering for every model's rule, must list the other model too; the Service is vLLM alone, listing its own."""
    for model, other in (MODELS, MODELS[::-1]):
        probe = two_models.resource("kubernetes:core/v1:ConfigMap", f"{model}-verify-probe")
        settings = json.loads(probe["inputs"]["data"]["settings.json"])
        edge, service = settings["targets"]
        assert (edge["name"], edge["base_url"], edge["lists"]) == ("edge", "https://llm.example.com/v1", [other])
        assert (service["name"], service["lists"]) == ("service", [])
