"""prod serving llama-70b as two revisions side by side at 90/10 (stack_variants.prod_with_two_revisions), rendered
once: two workloads, two InferencePools each with its own endpoint picker, two staging Jobs, two scaling objects,
one route split by weight and one with a header rule per revision, the second revision's deploy gate aimed at it
alone and the weighted route only after it, every object valid against its schema or CRD, the planner's GPUs and
cost counting both, and what the first `pulumi up` does to prod when the revision is added."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from llm_serving.edge import REVISION_HEADER
from llm_serving.stack import planning, revisions, verification
from stacks.cli.plan import stack_cost_summary
from stacks.environment import load_stack_file
from stacks.offline import awaits
from stacks.offline.diff import diff_resources
from stacks.offline.render import RenderResult
from tests.conftest import render_file
from tests.support import reference, stack_variants
from tests.test_workflows import load as workflow

FIRST, SECOND = "llama-70b", "llama-70b-canary"
ROUTE = "kubernetes:gateway.networking.k8s.io/v1:HTTPRoute"
JOB = "kubernetes:batch/v1:Job"


@pytest.fixture(scope="module")
def variant(variants_dir):
    return stack_variants.prod_with_two_revisions(variants_dir)


@pytest.fixture(scope="module")
def pair(variant) -> RenderResult:
    return render_file(variant)


def _kind(result: RenderResult, kind: str) -> list[dict[str, Any]]:
    return [m for m in result.manifests if m["kind"] == kind]


def _names(result: RenderResult, kind: str) -> list[str]:
    return sorted(m["metadata"]["name"] for m in _kind(result, kind))


def test_every_object_validates_against_its_schema_or_crd(pair):
    errors = [e for m in pair.manifests if m["kind"] != "HTTPRouteFilter"
              for e in reference.kubernetes_object_errors(m, "1.34")]
    assert errors == []


def test_two_workloads_two_pools_and_a_picker_for_each(pair):
    assert {FIRST, SECOND} <= set(_names(pair, "Deployment"))
    assert _names(pair, "InferencePool") == [FIRST, SECOND]
    assert {f"{FIRST}-epp", f"{SECOND}-epp"} <= set(_names(pair, "Deployment"))
    assert _names(pair, "ScaledObject") == [FIRST, SECOND]
    # Each pool (and each Service, the weighted split's backends) selects its own revision's pods only: a picker
    # never scores the other engine generation, and a weight is that revision's share.
    pods = {d["metadata"]["name"]: d["spec"]["template"]["metadata"]["labels"] for d in _kind(pair, "Deployment")}
    services = [s for s in _kind(pair, "Service") if s["metadata"]["name"] in (FIRST, SECOND)]
    for backend in [*_kind(pair, "InferencePool"), *services]:
        selector = backend["spec"]["selector"]
        selector = selector.get("matchLabels", selector)
        assert [name for name in (FIRST, SECOND) if selector.items() <= pods[name].items()] == [
            backend["metadata"]["name"]]


def test_each_revision_stages_its_own_weights_revision(pair):
    jobs = [j for j in _kind(pair, "Job") if "-stage-" in j["metadata"]["name"]]
    revisions_ = {e["value"] for j in jobs for c in j["spec"]["template"]["spec"]["containers"]
                  for e in c.get("env", []) if e["name"] == "REVISION"}
    assert stack_variants.CANARY_REVISION in revisions_ and len(revisions_) == 2


def test_one_route_splits_ninety_ten_and_another_has_a_header_rule_to_each_revisions_pool(pair):
    routes = {r["metadata"]["name"]: r for r in _kind(pair, "HTTPRoute")}
    assert sorted(routes) == [FIRST, f"{FIRST}.revisions"]
    split, closed = routes[FIRST]["spec"]["rules"]
    assert [(b["kind"], b["name"], b["weight"]) for b in split["backendRefs"]] == [
        ("Service", FIRST, 90), ("Service", SECOND, 10)]
    *rest, closed_too = routes[f"{FIRST}.revisions"]["spec"]["rules"]
    direct = {m["headers"][0]["value"]: r["backendRefs"] for r in rest for m in r["matches"] if m.get("headers")}
    assert direct == {name: [{"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": pool}]
                      for name, pool in (("stable", FIRST), ("canary", SECOND))}
    assert {m["headers"][0]["name"] for r in rest for m in r["matches"] if m.get("headers")} == {REVISION_HEADER}
    # The runtime adapter API is closed on both routes, so neither is ever up without it; the policy holds both.
    assert closed == closed_too and all(m["path"]["type"] == "Exact" for m in closed["matches"])
    (policy,) = [p for p in _kind(pair, "BackendTrafficPolicy") if p["metadata"]["name"] == FIRST]
    assert sorted(t["name"] for t in policy["spec"]["targetRefs"]) == sorted(routes)


def _settings(pair: RenderResult, model: str) -> dict[str, Any]:
    (job,) = [j for j in _kind(pair, "Job") if j["metadata"]["name"].startswith(f"{model}-verify-")]
    name = job["spec"]["template"]["spec"]["volumes"][0]["configMap"]["name"]
    (config,) = [c for c in _kind(pair, "ConfigMap") if c["metadata"]["name"] == name]
    return json.loads(config["data"]["settings.json"])


def test_the_second_revision_has_a_gate_aimed_at_it_alone(pair, variant):
    checked = _settings(pair, SECOND)
    edge, service = checked["targets"]
    # Its responses carry the model's name (vLLM's first --served-model-name); the report names the revision.
    assert (checked["model"], checked["revision"]) == (FIRST, "canary")
    assert edge["headers"] == {REVISION_HEADER: "canary"}
    assert service["base_url"] == f"http://{SECOND}.llm-serving.svc:8000/v1" and service["headers"] == {}
    assert checked["load_target"] == "service"
    # At weight 10 its pods may serve users: the in-place gate's cap, one replica's spare batch (none in prod).
    config = revisions.expanded(load_stack_file(variant)[1])
    (second,) = [m for m in config.models if m.name == SECOND]
    assert verification.serves_users(config, second)
    spare = verification.spare_batch(config, second)
    assert (checked["load"] or {"concurrency": 0})["concurrency"] <= spare
    # The model's own Job is the first revision's, unchanged in what it aims at: the route as clients see it.
    first = _settings(pair, FIRST)
    assert (first["model"], first["revision"]) == (FIRST, "stable")
    assert all(t["headers"] == {} for t in first["targets"])
    assert first["targets"][1]["base_url"] == f"http://{FIRST}.llm-serving.svc:8000/v1"


def test_the_weighted_route_goes_up_only_after_the_second_revisions_gate(pair):
    gate = f"{JOB}::{SECOND}-verify-job"
    weighted, direct = f"{ROUTE}::edge-httproute-{FIRST}", f"{ROUTE}::edge-httproute-{FIRST}.revisions"
    depends = {key: set(pair.resource(*key.split("::", 1))["options"]["dependsOn"]) for key in (gate, weighted)}
    assert gate in depends[weighted]
    # The gate reaches the revision through its header rule and its own Service, never through the weighted route.
    assert {direct, f"kubernetes:apps/v1:Deployment::{SECOND}-deployment",
            f"kubernetes:inference.networking.k8s.io/v1:InferencePool::{SECOND}-inferencepool",
            "kubernetes:gateway.envoyproxy.io/v1alpha1:BackendTrafficPolicy::edge-backendtrafficpolicy-llama-70b",
            "kubernetes:networking.k8s.io/v1:NetworkPolicy::serving-netpol-verification"} <= depends[gate]
    assert weighted not in depends[gate] and f"{JOB}::{FIRST}-verify-job" not in depends[gate]
    # Still the routing component's child, after the pickers, as before the revision: the same URN, no replacement.
    assert pair.resource(*weighted.split("::", 1))["parent"] == "llmserving:routing:InferenceRouting::inference-routing"
    # The first revision's Job checks the route clients use: after it, so after the gate too.
    assert weighted in pair.resource(JOB, f"{FIRST}-verify-job")["options"]["dependsOn"]
    # Pulumi awaits both Jobs, one after the other, within the one clock the deploy job's timeout covers (with the
    # ten minutes tests/test_workflows.py leaves for checkout, installs and the preview).
    seconds, chain = awaits.longest_await(pair.resources)
    # The new weights need the accuracy gate too (prod's rule): the route waits for both; the longer is on the chain.
    accuracy = f"{JOB}::{SECOND}-eval-job"
    assert {gate, accuracy} <= depends[weighted]
    slowest = accuracy if accuracy in chain else gate
    assert chain.index(slowest) < chain.index(weighted) < chain.index(f"{JOB}::{FIRST}-verify-job")
    assert seconds + 600 <= workflow("pulumi-up.yml")["jobs"]["up"]["timeout-minutes"] * 60


def test_the_planner_and_the_cost_count_both_revisions(variant):
    config = revisions.expanded(load_stack_file(variant)[1])
    assert [m.name for m in config.models] == [FIRST, SECOND]
    gpus = {m.name: planning.model_plan(config, m).tensor_parallel_size * planning.replica_bounds(m)[0]
            for m in config.models}
    assert gpus[SECOND] == gpus[FIRST] > 0
    # The nodes (and their cost) hold both revisions' GPUs, not the first's alone.
    one = load_stack_file(variant)[1]
    alone = dataclasses.replace(one, models=[dataclasses.replace(one.models[0], revisions=[])])
    instance = planning.resolve_instance_type(config)
    assert instance is not None
    assert planning.stack_cost(config).nodes_at_min * instance.gpu_count >= sum(gpus.values())
    assert planning.stack_cost(config).nodes_at_max > planning.stack_cost(alone).nodes_at_max
    assert f"  {SECOND}: " in stack_cost_summary(one)


def test_adding_the_revision_to_prod_creates_its_objects_and_replaces_nothing_that_serves(pair, rendered):
    head = json.loads(json.dumps(pair.resources).replace("urn:pulumi:prod-revisions::", "urn:pulumi:prod::"))
    diff = diff_resources(rendered["prod"].resources, head, "prod", "main")
    assert not diff.of("delete")
    # The one replacement: the model's Job and its ConfigMap (new names), which now check the first revision behind
    # the split route, so they run again after the route changes; nothing that serves is replaced.
    assert {(c.type.rsplit(":", 1)[-1], c.name) for c in diff.of("replace")} == {
        ("Job", f"{FIRST}-verify-job"), ("ConfigMap", f"{FIRST}-verify-probe")}
    assert {f"{SECOND}-deployment", f"{SECOND}-epp-deployment", f"{SECOND}-inferencepool",
            f"{SECOND}-weights-stage", f"{SECOND}-service", f"{SECOND}-verify-job", f"{SECOND}-verify-probe",
            f"edge-httproute-{FIRST}.revisions"} <= {c.name for c in diff.of("create")}
    updated = {c.name: c for c in diff.of("update")}
    assert {"edge-httproute-llama-70b", "edge-backendtrafficpolicy-llama-70b"} <= set(updated)
    # The one change to the first revision's pods: its required host spread becomes a preference once two
    # workloads share the nodes (planning.host_spread_domains), which rolls its replicas once (docs/operations.md).
    template = [f.path for f in updated[f"{FIRST}-deployment"].fields if f.path.startswith("inputs.spec.template")]
    assert template and all(".topologySpreadConstraints[" in path for path in template)


def test_preflight_checks_the_second_weights_revision_on_the_hub(variant):
    from stacks.preflight.intent import intent

    found = intent("prod-revisions", "us-east-1", load_stack_file(variant)[1])
    assert {(s.model_id, s.key) for s in found.sources if s.revision == stack_variants.CANARY_REVISION} == {
        ("meta-llama/Llama-3.1-70B-Instruct", "models[llama-70b].revisions[canary].revision")}


def test_plan_options_on_a_second_revision_name_the_keys_it_really_has(variant):
    # The second revision is no item of `models`: an option aimed at it names where its values live.
    import io

    from stacks.cli import plan

    out, err = io.StringIO(), io.StringIO()
    assert plan.main(["--stack", str(variant), "--model", SECOND, "--kv-cache-dtype", "fp8"], out, err) == 2
    (line,) = err.getvalue().splitlines()
    assert f"--model {SECOND}" in line and f"models[{FIRST}].revisions[" in line
    assert f"no item named {SECOND}" not in err.getvalue()
