"""examples/Pulumi.multi-model.yaml (llama-70b, and llama-8b with two LoRA adapters and an alias) behind one base URL
(`edge.routing: byModel`), in the example's one render (tests/conftest.py `multi_model`): one host, one AIGatewayRoute
whose rule for each model sends every name the model serves (its own, its adapters', its aliases') to that model's
own InferencePool, no per-model HTTPRoute, the runtime adapter endpoints unreachable, the AI Gateway sidecar switched
on from the pinned image, and every object valid against its schema or CRD."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from llm_serving.edge import by_model, objects
from llm_serving.platform import versions
from stacks.environment import load_stack_file
from stacks.offline import render
from stacks.offline.render import RenderResult
from tests.conftest import MULTI_MODEL_EXAMPLE
from tests.support import reference

MODELS = ("llama-70b", "llama-8b")
HOST = "llm.example.com"
GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "multi-model"


def _kind(result: RenderResult, kind: str) -> list[dict[str, Any]]:
    return [m for m in result.manifests if m["kind"] == kind]


def test_example_render_matches_its_golden(multi_model, tmp_path):
    manifests, resources = render.write(multi_model, tmp_path)
    assert manifests.read_text() == (GOLDEN / "manifests.yaml").read_text(), "run `make golden` after review"
    assert resources.read_text() == (GOLDEN / "resources.json").read_text(), "run `make golden` after review"


def test_every_object_validates_against_its_schema_or_crd(multi_model):
    errors = [e for m in multi_model.manifests if m["kind"] != "HTTPRouteFilter"
              for e in reference.kubernetes_object_errors(m, "1.34")]
    assert errors == []


def _served_names() -> dict[str, list[str]]:
    """model -> every name a request's `model` may carry for it, from the example's own config."""
    return {m.name: m.served_names() for m in load_stack_file(MULTI_MODEL_EXAMPLE)[1].models}


def test_the_stack_answers_on_one_host(multi_model):
    (route,) = _kind(multi_model, "AIGatewayRoute")
    assert route["spec"]["hostnames"] == [HOST]
    (gateway,) = _kind(multi_model, "Gateway")
    assert {listener["hostname"] for listener in gateway["spec"]["listeners"]} == {HOST}


def test_each_served_name_in_the_body_reaches_its_models_pool(multi_model):
    (route,) = _kind(multi_model, "AIGatewayRoute")
    pools = {p["metadata"]["name"]: p for p in _kind(multi_model, "InferencePool")}
    names = _served_names()
    assert names == {"llama-70b": ["llama-70b"], "llama-8b": ["llama-8b", "sql-v1", "sql-v2", "support-v1", "sql"]}
    for model, served in names.items():
        for name in served:
            assert by_model.routed_pool([route], name) == model, name
        # The pool the rule names selects that model's pods, not the other's.
        labels = pools[model]["spec"]["selector"]["matchLabels"]
        (deployment,) = [d for d in _kind(multi_model, "Deployment") if d["metadata"]["name"] == model]
        assert labels.items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
        other = next(m for m in MODELS if m != model)
        assert not labels.items() <= _deployment_labels(multi_model, other).items()
    assert by_model.routed_pool([route], "gpt-4o") is None
    # The unknown-model 404 names every served name, as GET /v1/models lists them.
    (not_found,) = [p for p in _kind(multi_model, "BackendTrafficPolicy")
                    if p["metadata"]["name"] == "llm-serving-models-not-found"]
    body = not_found["spec"]["responseOverride"][0]["response"]["body"]["inline"]
    assert "Available models: llama-70b, llama-8b, sql-v1, sql-v2, support-v1, sql." in body


def _deployment_labels(result: RenderResult, name: str) -> dict[str, str]:
    (deployment,) = [d for d in _kind(result, "Deployment") if d["metadata"]["name"] == name]
    return dict(deployment["spec"]["template"]["metadata"]["labels"])


def test_the_runtime_adapter_endpoints_are_unreachable_through_the_edge(multi_model):
    """No name reaches /v1/load_lora_adapter or /v1/unload_lora_adapter: the only route on the host is the
    AIGatewayRoute, whose sidecar answers every path outside its fixed list with its own 404 (by_model.SIDECAR_PATHS,
    the list of envoyproxy/ai-gateway v1.1.0 cmd/extproc/mainlib/main.go for the chart's default endpointConfig,
    which the stack leaves unset)."""
    (route,) = _kind(multi_model, "AIGatewayRoute")
    assert _kind(multi_model, "HTTPRoute") == [] and _kind(multi_model, "Ingress") == []
    (release,) = [r for r in multi_model.by_type()["kubernetes:helm.sh/v3:Release"] if r["name"] == "edge-ai-gateway"]
    assert not {"endpointConfig", "rootPrefix"} & release["inputs"]["values"]["extProc"].keys()
    for served in _served_names().values():
        for name in served:
            assert by_model.routed_pool([route], name, "/v1/chat/completions") is not None
            for path in objects.RUNTIME_ADAPTER_PATHS:
                assert by_model.routed_pool([route], name, path) is None, (name, path)


def test_the_pickers_alias_rewrite_reaches_vllm_as_the_picker_wrote_it(multi_model):
    """The picker rewrites `sql` to sql-v1 or sql-v2 in the body (llm-d-router v0.10.0 requestcontrol/director.go
    modelRewriteIfNeeded). AI Gateway's upstream filter, after the picker, puts back its own copy of the body, with
    the client's `sql`, only when it must: a model name override or body mutation on the backend, a retry, or a
    stream whose usage it adds for cost metrics (envoyproxy/ai-gateway v1.1.0 internal/extproc/processor_impl.go
    ProcessRequestHeaders; endpointspec.go ParseBody). None of them is set here, so vLLM sees the adapter's name."""
    (route,) = _kind(multi_model, "AIGatewayRoute")
    assert "llmRequestCosts" not in route["spec"]
    for rule in route["spec"]["rules"]:
        assert [ref["kind"] for ref in rule["backendRefs"]] == ["InferencePool"]
        assert not {"modelNameOverride", "bodyMutation"} & rule["backendRefs"][0].keys()
    for policy in _kind(multi_model, "BackendTrafficPolicy"):
        assert policy["spec"]["retry"] == {"numRetries": 0}, policy["metadata"]["name"]
    assert _kind(multi_model, "AIServiceBackend") == []


def test_no_model_keeps_a_route_of_its_own(multi_model):
    assert _kind(multi_model, "HTTPRoute") == []
    assert [p["metadata"]["name"] for p in _kind(multi_model, "BackendTrafficPolicy")] == [
        *MODELS, "llm-serving-models-not-found"]


def test_the_sidecar_runs_from_the_pinned_image(multi_model):
    (release,) = [r for r in multi_model.by_type()["kubernetes:helm.sh/v3:Release"] if r["name"] == "edge-ai-gateway"]
    values = release["inputs"]["values"]
    assert values["extProc"] == {"image": {"tag": versions.AI_GATEWAY_EXTPROC_IMAGE.tag}}
    assert values["controller"]["mutatingWebhook"]["objectSelector"] == {
        "matchLabels": {"app.kubernetes.io/managed-by": "envoy-gateway"}}



def test_the_policy_pack_reads_the_ai_gateway_route(multi_model):
    """The pack bounds every stream by the AIGatewayRoute's rules as by per-model HTTPRoutes (byModel has none): a
    drain shortened below the bound is found, and a rule whose timeout AI Gateway would default to 60 s refused."""
    from policies import rules
    from policies.streams import stream_drain_problems

    found = rules.violations(multi_model, "prod")
    assert found["edge-non-buffering"] == []
    assert stream_drain_problems(multi_model.resources) == []
    short = copy.deepcopy(multi_model.resources)
    (picker,) = [r for r in short
                 if r["type"].endswith(":Deployment") and r["inputs"]["metadata"]["name"] == "llama-8b-epp"]
    args = picker["inputs"]["spec"]["template"]["spec"]["containers"][0]["args"]
    args[next(i for i, arg in enumerate(args) if arg.startswith("--drain-timeout="))] = "--drain-timeout=60s"
    assert [p for p in stream_drain_problems(short) if "AIGatewayRoute llm-serving-models" in p] != []
    (route,) = [r for r in multi_model.resources if r["type"].endswith(":AIGatewayRoute")]
    unbounded = copy.deepcopy(route["inputs"])
    del unbounded["spec"]["rules"][0]["timeouts"]
    (rule,) = [r for r in rules.RULES if r.name == "edge-non-buffering"]
    assert rule.check(rules.AI_GATEWAY_ROUTE, unbounded, rules.RuleContext("prod", "r")) == [
        'AIGatewayRoute llm-serving/llm-serving-models rule 0: timeouts.request is unset (default 60s in Envoy AI '
        'Gateway), which cuts every longer generation. Set "0s" (no limit) or >= 600s.']


def test_the_models_route_exists_before_the_gateway_so_every_envoy_pod_gets_the_body_router(multi_model):
    """AI Gateway's webhook injects its sidecar into an Envoy pod only when an AIGatewayRoute references the pod's
    Gateway when the pod is created (ai-gateway v1.1.0 gateway_mutator.go): the route goes up after the AI Gateway
    release (its webhook and CRDs) and before the Gateway, whose Envoy pods Envoy Gateway then creates."""
    wiring = multi_model.wiring
    (route,) = [key for key in wiring if ":AIGatewayRoute::" in key]
    (gateway,) = [key for key in wiring if key.startswith("kubernetes:gateway.networking.k8s.io/v1:Gateway::")]
    assert route in wiring[gateway]["dependsOn"]
    assert "kubernetes:helm.sh/v3:Release::edge-ai-gateway" in wiring[route]["dependsOn"]


def test_the_sidecars_config_exists_before_the_gateway_that_names_it(multi_model):
    wiring = multi_model.wiring
    (config,) = [key for key in wiring if ":GatewayConfig::" in key]
    (gateway,) = [key for key in wiring if key.startswith("kubernetes:gateway.networking.k8s.io/v1:Gateway::")]
    assert config in wiring[gateway]["dependsOn"]


def test_each_models_gate_asks_the_one_endpoint_to_list_every_model_of_the_stack(multi_model):
    """The deploy gate's settings (the ConfigMap the Job reads): the edge's GET /v1/models, the AI Gateway's sidecar
    answering for every model's rule, must list every other served name of the stack too (the other model's, and
    every adapter and alias); the Service is vLLM alone, listing its own."""
    every_name = [name for names in _served_names().values() for name in names]
    for model in MODELS:
        probe = multi_model.resource("kubernetes:core/v1:ConfigMap", f"{model}-verify-probe")
        settings = json.loads(probe["inputs"]["data"]["settings.json"])
        edge, service = settings["targets"]
        assert (edge["name"], edge["base_url"]) == ("edge", f"https://{HOST}/v1")
        assert sorted(edge["lists"]) == sorted(set(every_name) - {model})
        assert (service["name"], service["lists"]) == ("service", [])
