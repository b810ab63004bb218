"""Two revisions of a model side by side (`models[].revisions`): the rules that refuse a pair that cannot run, the
second revision as a model of its own (named `<model>-<revision>`, the model's unset fields, both names served), the
first revision's objects untouched, and what `pulumi up` does to an existing stack when a revision is added, its
weight changes or it is removed (the offline diff over two component renders, as the engine pairs URNs)."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pytest

from llm_serving.edge import REVISION_HEADER
from llm_serving.serving.engine import engine_args
from llm_serving.stack import ServingStack, model_parts, planning, revisions, rules
from stacks.offline.diff import diff_resources
from tests.support.components import EXISTING_EVERYTHING, run, stack_args

CANARY_REVISION = "3333333333333333333333333333333333333333"
TWO = [{"name": "stable", "weight": 90}, {"name": "canary", "weight": 10, "revision": CANARY_REVISION}]


def values(revisions_: list[dict[str, Any]] | None = TWO, **model: Any) -> dict[str, Any]:
    found = copy.deepcopy(EXISTING_EVERYTHING)
    found["models"][0].update(model)
    if revisions_ is not None:
        found["models"][0]["revisions"] = copy.deepcopy(revisions_)
    return found


def problems(found: dict[str, Any]) -> list[str]:
    return [p.line() for p in rules.check(stack_args(found))]


def test_a_pair_that_can_run_breaks_no_rule():
    assert problems(values()) == []


@pytest.mark.parametrize(("change", "key", "words"), [
    (lambda r: r[1].update(weight=20), "models[llama-8b].revisions", "must sum to 100"),
    (lambda r: r[1].update(name="stable"), "models[llama-8b].revisions[1].name", "names the other revision too"),
    (lambda r: r.pop(), "models[llama-8b].revisions", "two, or none"),
])
def test_each_mistake_in_a_pair_is_one_problem_naming_its_key(change, key, words):
    pair = copy.deepcopy(TWO)
    change(pair)
    (line,) = problems(values(pair))
    assert line.startswith(f"llm-serving:{key}:") and words in line


def test_a_second_revisions_objects_may_not_take_another_models_name():
    found = values()
    found["models"].append({**copy.deepcopy(found["models"][0]), "name": "llama-8b-canary", "revisions": [],
                            "route": {"pathPrefix": "/other"}})
    assert [line for line in problems(found) if "which another model or revision has" in line]


def test_two_revisions_that_run_the_same_thing_are_the_retirements_steps_at_any_split():
    """The first revision naming the model's own revision, the second leaving it unset: both run the same thing, as
    after promote's convergence; they answer the same, so every split of the requests validates."""
    same = EXISTING_EVERYTHING["models"][0].get("revision", CANARY_REVISION)
    for first, second in ((90, 10), (50, 50), (0, 100), (100, 0)):
        assert problems(values([{"name": "stable", "weight": first, "revision": same},
                                {"name": "canary", "weight": second}])) == []


@pytest.mark.parametrize("name", ["epp", "weights", "compile", "verify"])
def test_a_second_revision_named_like_a_derived_object_is_refused(name):
    # `llama-8b-epp` is the model's picker, `llama-8b-weights` its claim: two objects of one name fail the up.
    pair = [TWO[0], {**TWO[1], "name": name}]
    (line,) = problems(values(pair))
    assert line.startswith("llm-serving:models[llama-8b].revisions[1].name:")
    assert "one the program derives from a model's name" in line


@pytest.mark.parametrize(("edge", "words"), [
    ({"routing": "byModel"}, "one InferencePool per model's rule"),
])
def test_an_edge_without_weighted_backends_refuses_a_pair(edge, words):
    found = values()
    found["edge"] = {**found["edge"], **edge}
    assert [line for line in problems(found) if line.startswith("llm-serving:models[llama-8b].revisions:")
            and words in line]


def test_a_pair_cannot_scale_to_zero_behind_its_services():
    found = values(autoscaling={"minReplicas": 0, "maxReplicas": 1, "scaleToZero": {}})
    assert [line for line in problems(found) if "two revisions cannot scale to zero" in line]


def test_the_capacity_check_counts_the_second_revisions_gpus():
    # Two nodes of one GPU each: one revision at two replicas fits; two revisions at two replicas each do not.
    one = values(None, replicas=2)
    assert problems(one) == []
    (line,) = problems(values(replicas=2))
    assert line.startswith("llm-serving:gpuNodeGroup.existing.maxNodes:")
    assert "llama-8b 2 x TP1 + llama-8b-canary 2 x TP1 = 4 GPUs" in line


def test_without_revisions_the_args_are_the_same_object():
    args = stack_args(values(None))
    assert revisions.expanded(args) is args


def test_the_second_revision_runs_as_a_model_of_its_own_with_the_models_unset_fields():
    args = revisions.expanded(stack_args(values([
        {"name": "stable", "weight": 90},
        {"name": "canary", "weight": 10, "revision": CANARY_REVISION, "kvCacheDtype": "fp8",
         "image": {"tag": "v0.34.0"}, "extraArgs": ["--enable-chunked-prefill"]}])))
    first, second = args.models
    assert (first.name, second.name) == ("llama-8b", "llama-8b-canary")
    assert revisions.revision_model_of(second) == "llama-8b" and revisions.revision_model_of(first) is None
    assert (second.revision, second.kv_cache_dtype.value, second.image.tag) == (CANARY_REVISION, "fp8", "v0.34.0")
    assert second.extra_args == ["--enable-chunked-prefill"] and first.extra_args == []
    # Unset: the model's own.
    assert (second.model_id, second.max_model_len, second.slo) == (first.model_id, first.max_model_len, first.slo)
    plans = [planning.model_plan(args, m) for m in (first, second)]
    assert plans[0].tensor_parallel_size == plans[1].tensor_parallel_size


def test_the_first_revisions_fields_apply_to_the_model_itself():
    args = revisions.expanded(stack_args(values([
        {"name": "stable", "weight": 50, "revision": CANARY_REVISION}, {"name": "canary", "weight": 50}])))
    assert args.models[0].name == "llama-8b" and args.models[0].revision == CANARY_REVISION
    assert args.models[1].revision == EXISTING_EVERYTHING["models"][0]["revision"]


def test_the_second_revision_answers_and_names_the_model_first():
    args = revisions.expanded(stack_args(values()))
    first, second = (engine_args(model_parts.engine_settings(args, m)) for m in args.models)
    at = second.index("--served-model-name")
    # vLLM's responses name the first served name (vLLM 0.33.0 --served-model-name): the model the client asked
    # for, whichever revision answered, as the verification Job checks.
    assert second[at + 1:at + 3] == ["llama-8b", "llama-8b-canary"]
    assert first[first.index("--served-model-name") + 1:][:2] == ["llama-8b", "--max-model-len"]


def test_each_revisions_metrics_carry_its_own_workload_name_as_model_name(renders):
    """vLLM labels both revisions' metrics `model_name="llama-8b"` (the first served name); the PodMonitor sets the
    label from the pod's workload name instead, which every scaling query and alert of the second revision selects
    on. A stack without revisions keeps its PodMonitor as it was."""
    def relabelings(result) -> list[dict[str, Any]]:
        (monitor,) = [m for m in result.manifests if m["kind"] == "PodMonitor" and m["metadata"]["name"] == "vllm"]
        return monitor["spec"]["podMetricsEndpoints"][0]["relabelings"]

    assert not [r for r in relabelings(renders["one"]) if r["targetLabel"] == "model_name"]
    (workload,) = [r for r in relabelings(renders["pair"]) if r["targetLabel"] == "model_name"]
    pods = {m["metadata"]["name"]: m["spec"]["template"]["metadata"]["labels"] for m in renders["pair"].manifests
            if m["kind"] == "Deployment"}
    label = workload["sourceLabels"][0].removeprefix("__meta_kubernetes_pod_label_")
    assert label == "app_kubernetes_io_name"
    assert {name: pods[name]["app.kubernetes.io/name"] for name in ("llama-8b", "llama-8b-canary")} == {
        "llama-8b": "llama-8b", "llama-8b-canary": "llama-8b-canary"}
    (scaled,) = [m for m in renders["pair"].manifests if m["kind"] == "ScaledObject"
                 and m["metadata"]["name"] == "llama-8b-canary"]
    queries = [t["metadata"]["query"] for t in scaled["spec"]["triggers"] if "query" in t.get("metadata", {})]
    assert queries and all('model_name="llama-8b-canary"' in query for query in queries)


@pytest.fixture(scope="module")
def renders() -> dict[str, Any]:
    """One component render per shape: one revision, the pair at 90/10, at 50/50 and at 100/0."""
    shapes = {"one": values(None), "pair": values(), "even": values([{**TWO[0], "weight": 50},
                                                                       {**TWO[1], "weight": 50}]),
              "zero": values([{**TWO[0], "weight": 100}, {**TWO[1], "weight": 0}])}
    return {name: run(lambda found=found: ServingStack("llm", stack_args(found))) for name, found in shapes.items()}


def _names(result, kind: str) -> set[str]:
    return {m["metadata"]["name"] for m in result.manifests if m["kind"] == kind}


def test_each_revision_has_its_workload_service_scaling_and_staging_job(renders):
    pair = renders["pair"]
    assert {"llama-8b", "llama-8b-canary"} <= _names(pair, "Deployment")
    assert {"llama-8b", "llama-8b-canary"} <= _names(pair, "Service")
    assert _names(pair, "ScaledObject") == {"llama-8b", "llama-8b-canary"}
    jobs = [m for m in pair.manifests if m["kind"] == "Job" and "-stage-" in m["metadata"]["name"]]
    staged = {}
    for job in jobs:
        spec = job["spec"]["template"]["spec"]
        env = {e["name"]: e.get("value") for c in spec["containers"] for e in c.get("env", [])}
        claims = {v["persistentVolumeClaim"]["claimName"] for v in spec["volumes"] if "persistentVolumeClaim" in v}
        staged[env["REVISION"]] = claims
    # Two weights revisions, two Jobs, one claim: each revision in its own directory with its own marker.
    assert set(staged) == {EXISTING_EVERYTHING["models"][0]["revision"], CANARY_REVISION}
    assert len({claim for claims in staged.values() for claim in claims}) == 1


def _rules(result) -> list[dict[str, Any]]:
    """The weighted route's rules, then the header rules' route's."""
    routes = {m["metadata"]["name"]: m for m in result.manifests if m["kind"] == "HTTPRoute"}
    assert sorted(routes) == ["llama-8b", "llama-8b.revisions"]
    return [*routes["llama-8b"]["spec"]["rules"][:1], *routes["llama-8b.revisions"]["spec"]["rules"]]


def test_one_route_splits_by_weight_and_a_header_reaches_each_revision(renders):
    rules_ = _rules(renders["pair"])
    split = rules_[0]
    assert [(b["name"], b["weight"]) for b in split["backendRefs"]] == [("llama-8b", 90), ("llama-8b-canary", 10)]
    direct = {r["matches"][0]["headers"][0]["value"]: r["backendRefs"] for r in rules_
              if any(m.get("headers") for m in r["matches"])}
    assert {name: [b["name"] for b in refs] for name, refs in direct.items()} == {
        "stable": ["llama-8b"], "canary": ["llama-8b-canary"]}
    assert all(m["headers"] == [{"type": "Exact", "name": REVISION_HEADER, "value": name}]
               for r in rules_ for m in r["matches"] if m.get("headers")
               for name in [m["headers"][0]["value"]])
    # The header rule matches the split's path as well: same path, one header more, so it takes precedence.
    assert all(r["matches"][0]["path"] == split["matches"][0]["path"] for r in rules_[1:3])


# The model's Job and its ConfigMap name the first revision once there are two (and none without), so they are
# replaced (new names) when a revision is added or removed, and run again through the changed route.
MODEL_GATE = {("Job", "llama-8b-verify-job"), ("ConfigMap", "llama-8b-verify-probe")}


def _replaced(diff) -> set[tuple[str, str]]:
    return {(c.type.rsplit(":", 1)[-1], c.name) for c in diff.of("replace")}


def test_adding_a_revision_creates_objects_and_updates_the_route_replacing_nothing_that_serves(renders):
    diff = diff_resources(renders["one"].resources, renders["pair"].resources, "test", "main")
    assert _replaced(diff) == MODEL_GATE and not diff.of("delete")
    created = {c.name for c in diff.of("create")}
    assert {"llama-8b-canary-deployment", "llama-8b-canary-service", "llama-8b-canary-weights-stage",
            "llama-8b-canary-verify-job", "edge-httproute-llama-8b.revisions"} <= created
    updated = {c.name: c for c in diff.of("update")}
    # No replica of the first revision restarts: its pod template is untouched. (Its strategy may change: the pair
    # shares the GPUs' surge room, and a strategy is no template change.)
    assert not _template_changes(updated.get("llama-8b-deployment"))
    assert any(f.path.startswith("inputs.spec.rules") for c in updated.values() if c.type.endswith("HTTPRoute")
               for f in c.fields)


def test_a_weight_change_updates_the_route_after_the_second_revisions_gate_runs_again(renders):
    # Each step of a rollout is gated before its route moves: the weight is in each revision's gate key (its report's
    # fingerprint, which promote checks), so both Jobs (and ConfigMaps) are new, and the route's update waits for the
    # second's; nothing that serves changes.
    diff = diff_resources(renders["pair"].resources, renders["even"].resources, "test", "main")
    (change,) = diff.of("update")
    assert change.type.endswith("HTTPRoute") and {f.path.rsplit(".", 1)[-1] for f in change.fields} == {"weight"}
    assert _replaced(diff) == {("Job", "llama-8b-canary-verify-job"), ("ConfigMap", "llama-8b-canary-verify-probe"),
                               ("Job", "llama-8b-verify-job"), ("ConfigMap", "llama-8b-verify-probe")}
    assert not diff.of("create") and not diff.of("delete")


def test_at_weight_zero_the_route_moves_first_and_the_full_gate_runs_after_it(renders):
    """A rollback to 0 (or a revision added at 0) takes the revision out of the split at once: its route does not
    wait for a gate the broken revision would fail, and the gate's full planned load runs once no user reaches it."""
    result = renders["zero"]
    route, gate = "kubernetes:gateway.networking.k8s.io/v1:HTTPRoute", "kubernetes:batch/v1:Job"
    assert f"{gate}::llama-8b-canary-verify-job" not in result.resource(route, "edge-httproute-llama-8b")["options"][
        "dependsOn"]
    assert f"{route}::edge-httproute-llama-8b" in result.resource(gate, "llama-8b-canary-verify-job")["options"][
        "dependsOn"]


def test_removing_the_second_revision_deletes_its_objects_only(renders):
    diff = diff_resources(renders["pair"].resources, renders["one"].resources, "test", "main")
    assert _replaced(diff) == MODEL_GATE and not diff.of("create")
    assert all("canary" in c.name or c.name == "edge-httproute-llama-8b.revisions" for c in diff.of("delete"))
    assert not _template_changes(next((c for c in diff.of("update") if c.name == "llama-8b-deployment"), None))


def _template_changes(change) -> list[str]:
    return [f.path for f in change.fields if f.path.startswith("inputs.spec.template")] if change else []


def test_a_second_revisions_problem_names_the_key_the_stack_file_holds():
    # prod rules: fp8 KV needs an eval, a revision must be a commit.
    found = values([{"name": "stable", "weight": 90},
                    {"name": "canary", "weight": 10, "revision": "main", "kvCacheDtype": "fp8"}])
    found["environment"] = "prod"
    lines = problems(found)
    assert [line for line in lines if line.startswith("llm-serving:models[llama-8b].revisions[canary].revision:")]
    # The eval is the model's (both revisions are scored by it): named at the model, saying what the revision changes.
    assert [line for line in lines if line.startswith("llm-serving:models[llama-8b].eval: kvCacheDtype fp8, a second "
                                                      "revision with other weights (revision), a second revision with "
                                                      "another kvCacheDtype in prod needs an eval")]
    assert not [line for line in lines if "models[llama-8b-canary]" in line]


def test_an_inherited_mistake_is_reported_once_as_the_models():
    found = values([{"name": "stable", "weight": 90}, {"name": "canary", "weight": 10, "kvCacheDtype": "fp8"}],
                   revision="main")
    found["environment"] = "prod"
    lines = [line for line in problems(found) if ".revision:" in line]
    assert len(lines) == 1 and lines[0].startswith("llm-serving:models[llama-8b].revision:")


def test_the_weighted_route_waits_for_the_second_revisions_gate_which_waits_for_the_header_route(renders):
    result = renders["pair"]
    route, gate = "kubernetes:gateway.networking.k8s.io/v1:HTTPRoute", "kubernetes:batch/v1:Job"
    weighted = result.resource(route, "edge-httproute-llama-8b")["options"]["dependsOn"]
    assert f"{gate}::llama-8b-canary-verify-job" in weighted
    waits = result.resource(gate, "llama-8b-canary-verify-job")["options"]["dependsOn"]
    assert f"{route}::edge-httproute-llama-8b.revisions" in waits
    assert f"{route}::edge-httproute-llama-8b" not in waits
    # Routed through the revisions' Services, the edge writes the weighted route, later, as its own child (its
    # URN unchanged); a pooled model's is the routing component's (tests/stacks/test_revisions_render.py).
    assert not any(m["kind"] == "InferencePool" for m in result.manifests)
    assert result.resource(route, "edge-httproute-llama-8b")["parent"] == "llmserving:edge:Edge::edge"


def test_the_first_revision_at_weight_zero_is_gated_at_its_full_load_through_its_header():
    """After promote's convergence the first revision's rolled pods take nothing: its gate reaches them by their
    header (the split would send it to the second) and loads them at the planned concurrency, held to the objectives,
    as the evidence that moves the requests back."""
    from llm_serving.edge import REVISION_HEADER
    from llm_serving.stack import revisions, verification
    from stacks.config.files import PROJECT_DIR
    from stacks.environment import load_stack_file

    config = load_stack_file(PROJECT_DIR / "examples" / "Pulumi.revisions.yaml")[1]
    (model,) = config.models
    converged = [dataclasses.replace(model.revisions[0], weight=0, kv_cache_dtype=model.revisions[1].kv_cache_dtype),
                 dataclasses.replace(model.revisions[1], weight=100)]
    expanded = revisions.expanded(dataclasses.replace(config, models=[dataclasses.replace(model,
                                                                                          revisions=converged)]))
    first = next(m for m in expanded.models if m.name == model.name)
    assert not verification.serves_users(expanded, first)
    checked = verification.settings(expanded, first)
    assert checked.targets[0].headers == {REVISION_HEADER: "stable"}
    assert checked.load is not None and checked.load.objectives
    # At a weight again, through the split and capped, as any in-place gate.
    moved = [dataclasses.replace(converged[0], weight=10), dataclasses.replace(converged[1], weight=90)]
    expanded = revisions.expanded(dataclasses.replace(config, models=[dataclasses.replace(model, revisions=moved)]))
    first = next(m for m in expanded.models if m.name == model.name)
    assert verification.settings(expanded, first).targets[0].headers == {}
