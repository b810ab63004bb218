"""examples/Pulumi.revisions.yaml: llama-70b's `stable` at 90 % beside `canary` (an fp8 KV cache) at 10 %, with an
accuracy gate. Rendered once: two workloads, two pools, the weighted route and the header route, each revision's
deploy gate, and the eval's staging Job and eval Job; the route moves only after both of canary's gates; the eval
Job holds the API key behind the verification fence while its staging Job, which reaches the Hub and PyPI, holds
none; every object valid against its schema or CRD; its golden."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from llm_serving.stack import evaluation, revisions, verification
from llm_serving.verification import evaluation as eval_manifests
from stacks.environment import load_stack_file
from stacks.offline import awaits, render
from stacks.offline.render import RenderResult
from tests.conftest import render_file
from tests.support import reference
from tests.test_workflows import load as workflow

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "Pulumi.revisions.yaml"
GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "revisions"
FIRST, SECOND = "llama-70b", "llama-70b-canary"
JOB = "kubernetes:batch/v1:Job"
ROUTE = "kubernetes:gateway.networking.k8s.io/v1:HTTPRoute"


@pytest.fixture(scope="module")
def example() -> RenderResult:
    return render_file(EXAMPLE)


def _kind(result: RenderResult, kind: str) -> list[dict[str, Any]]:
    return [m for m in result.manifests if m["kind"] == kind]


def _named(result: RenderResult, kind: str, prefix: str) -> dict[str, Any]:
    (found,) = [m for m in _kind(result, kind) if m["metadata"]["name"].startswith(prefix)]
    return found


def test_example_render_matches_its_golden(example, tmp_path):
    manifests, resources = render.write(example, tmp_path)
    assert manifests.read_text() == (GOLDEN / "manifests.yaml").read_text(), "run `make golden` after review"
    assert resources.read_text() == (GOLDEN / "resources.json").read_text(), "run `make golden` after review"


def test_every_object_validates_against_its_schema_or_crd(example):
    errors = [e for m in example.manifests if m["kind"] != "HTTPRouteFilter"
              for e in reference.kubernetes_object_errors(m, "1.34")]
    assert errors == []


def test_two_revisions_two_pools_the_split_the_header_route_and_each_revisions_gates(example):
    assert {FIRST, SECOND} <= {d["metadata"]["name"] for d in _kind(example, "Deployment")}
    assert sorted(p["metadata"]["name"] for p in _kind(example, "InferencePool")) == [FIRST, SECOND]
    routes = {r["metadata"]["name"]: r for r in _kind(example, "HTTPRoute")}
    split = routes[FIRST]["spec"]["rules"][0]
    assert [(b["name"], b["weight"]) for b in split["backendRefs"]] == [(FIRST, 90), (SECOND, 10)]
    headers = {m["headers"][0]["value"] for r in routes[f"{FIRST}.revisions"]["spec"]["rules"]
               for m in r["matches"] if m.get("headers")}
    assert headers == {"stable", "canary"}
    jobs = sorted(j["metadata"]["name"].rsplit("-", 1)[0] for j in _kind(example, "Job"))
    # Per revision: its weights, its compile cache and its deploy gate; for canary also the eval and its staging.
    assert [j for j in jobs if "verify" in j or "eval" in j] == sorted([
        f"{FIRST}-verify", f"{SECOND}-eval", f"{SECOND}-eval-stage", f"{SECOND}-verify"])


def test_the_route_moves_only_after_canarys_latency_and_accuracy_gates(example):
    weighted = example.resource(ROUTE, f"edge-httproute-{FIRST}")["options"]["dependsOn"]
    assert {f"{JOB}::{SECOND}-verify-job", f"{JOB}::{SECOND}-eval-job"} <= set(weighted)
    eval_job = example.resource(JOB, f"{SECOND}-eval-job")
    depends = set(eval_job["options"]["dependsOn"])
    # After its staging, the revision's latency gate (never both on the same pods at once), both revisions'
    # workloads, the key and the fence; never after the route it gates.
    assert {f"{JOB}::{SECOND}-eval-stage", f"{JOB}::{SECOND}-verify-job",
            f"kubernetes:apps/v1:Deployment::{FIRST}-deployment",
            f"kubernetes:apps/v1:Deployment::{SECOND}-deployment", "kubernetes:core/v1:Secret::vllm-api-key",
            "kubernetes:networking.k8s.io/v1:NetworkPolicy::serving-netpol-verification"} <= depends
    assert f"{ROUTE}::edge-httproute-{FIRST}" not in depends
    # The model's own gate (the first revision's pods, which the eval also asks) after the eval, never beside it.
    assert f"{JOB}::{SECOND}-eval-job" in example.resource(JOB, f"{FIRST}-verify-job")["options"]["dependsOn"]
    stage = example.resource(JOB, f"{SECOND}-eval-stage")
    assert f"{JOB}::{FIRST}-weights-stage" in stage["options"]["dependsOn"]
    # Pulumi waits for each past its deadline, and the longest chain fits the deploy job's clock (with the ten
    # minutes tests/test_workflows.py leaves for checkout, installs and the preview).
    for job in (eval_job, stage):
        deadline = job["inputs"]["spec"]["activeDeadlineSeconds"]
        timeout = f"{deadline + 300}s"
        assert job["options"]["customTimeouts"] == {"create": timeout, "update": timeout, "delete": ""}
    seconds, chain = awaits.longest_await(example.resources)
    assert seconds + 600 <= workflow("pulumi-up.yml")["jobs"]["up"]["timeout-minutes"] * 60


def test_the_eval_job_holds_the_key_inside_the_fence_and_its_staging_holds_none(example):
    fences = {p["metadata"]["name"]: p["spec"] for p in _kind(example, "NetworkPolicy")}
    stage = _named(example, "Job", f"{SECOND}-eval-stage-")["spec"]["template"]
    job = [j for j in _kind(example, "Job") if j["metadata"]["name"].startswith(f"{SECOND}-eval-")
           and "-stage-" not in j["metadata"]["name"]][0]["spec"]["template"]

    def fenced_by(labels: dict[str, str]) -> set[str]:
        return {name for name, spec in fences.items() if spec["podSelector"].get("matchLabels", {}).items()
                <= labels.items() and spec["podSelector"]}

    # The eval pod: its own fence, DNS and the vLLM pods' port and nothing else (the deploy gate's reaches any address
    # on 443); the vLLM pods admit it. Its staging: the weights Jobs' (DNS and HTTPS, for the Hub and PyPI).
    assert fenced_by(job["metadata"]["labels"]) == {"eval"}
    egress = fences["eval"]["egress"]
    assert [rule["ports"] for rule in egress] == [[{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
                                                  [{"protocol": "TCP", "port": 8000}]]
    assert "ipBlock" not in json.dumps(egress)
    admitted = [s["podSelector"]["matchLabels"] for s in fences["vllm-serving"]["ingress"][0]["from"]
                if "podSelector" in s and "namespaceSelector" not in s]
    assert any(labels.items() <= job["metadata"]["labels"].items() for labels in admitted)
    assert fenced_by(stage["metadata"]["labels"]) & {name for name in fences if "stag" in name}
    assert not fenced_by(stage["metadata"]["labels"]) & {"verification", "eval"}
    volumes = {v["name"]: v for v in job["spec"]["volumes"]}
    assert volumes["api-key"]["secret"]["secretName"] == "vllm-api-key"
    assert volumes["weights"]["persistentVolumeClaim"]["readOnly"] is True
    assert "api-key" not in json.dumps(stage["spec"])
    assert all("api-key" not in json.dumps(c.get("env", [])) for c in job["spec"]["containers"])
    # A rotated Hub token replaces the staging Job as it does the weights Job (the token's keyed digest).
    weights_pod = _named(example, "Job", f"{FIRST}-stage-")["spec"]["template"]["metadata"]
    assert stage["metadata"]["annotations"] == weights_pod["annotations"] != {}
    # On the nodes the EFS policy lets mount the volume (the staging nodes), as the weights Jobs are.
    weights_job = _named(example, "Job", f"{FIRST}-stage-")["spec"]["template"]["spec"]
    for pod in (stage["spec"], job["spec"]):
        assert pod["nodeSelector"].items() >= weights_job["nodeSelector"].items()
    # The harness is installed from the volume, never from an index.
    (init,) = job["spec"]["initContainers"]
    assert init["command"] == eval_manifests.install_command()
    assert "--no-index" in init["command"] and "--require-hashes" in init["command"]


def test_the_eval_compares_the_revisions_through_their_own_services_at_their_safe_concurrency(example):
    config = revisions.expanded(load_stack_file(EXAMPLE)[1])
    (plan,) = evaluation.plans(config)
    job = [j for j in _kind(example, "Job") if j["metadata"]["name"].startswith(f"{SECOND}-eval-")
           and "-stage-" not in j["metadata"]["name"]][0]
    name = job["spec"]["template"]["spec"]["volumes"][0]["configMap"]["name"]
    settings = json.loads(_named(example, "ConfigMap", name)["data"]["settings.json"])
    assert (settings["model"], settings["revision"]) == (FIRST, "canary")
    assert settings["candidate"]["url"] == verification.service_url(config, plan.candidate)
    assert settings["stable"]["url"] == verification.service_url(config, plan.owner)
    # Both revisions serve users at 90/10: each gets at most one replica's spare batch, one request when none.
    for target, model in ((settings["candidate"], plan.candidate), (settings["stable"], plan.owner)):
        assert verification.serves_users(config, model)
        spare = verification.spare_batch(config, model)
        assert target["concurrency"] == max(1, min(plan.owner.eval.concurrency, spare))
    # The tasks read their files from the task set's directory on the volume, which the staging Job fills.
    stage_env = {e["name"]: e["value"] for e in _named(example, "Job", f"{SECOND}-eval-stage-")["spec"]["template"][
        "spec"]["containers"][0]["env"]}
    staged = {entry["target"] for entry in json.loads(stage_env["EVAL_FILES"])}
    assert {path for task in settings["tasks"] for path in task["files"].values()} == staged
    assert all(path.startswith(stage_env["EVAL_DIR"] + "/") for path in staged)
    assert settings["limit"] == 100 and settings["maxDropPoints"] == 2
    # Its deadline (the stack's one clock, llm_serving/stack/timing.py) covers the harness's install and every wave of
    # samples at its concurrency, each at the model's objectives; its request timeout the longest answer asked for.
    from llm_serving.stack import timing
    from llm_serving.verification import EVAL_INSTALL_SECONDS

    waves = sum(-(-settings["limit"] // t["concurrency"]) for t in (settings["candidate"], settings["stable"]))
    deadline = job["spec"]["activeDeadlineSeconds"]
    assert deadline >= EVAL_INSTALL_SECONDS + waves * len(settings["tasks"]) * timing.eval_request_seconds(plan.owner)
    assert settings["requestTimeoutSeconds"] == verification.request_timeout_seconds(config,
                                                                                      timing.EVAL_MAX_GEN_TOKENS)


def test_the_rendered_settings_are_what_the_eval_program_reads(example, tmp_path):
    """The stack writes the settings (llm_serving/stack/evaluation.py), the Job's program reads them
    (llm_serving/verification/eval_gate.py `parse_settings`): the rendered file parses with no problem once its task
    files exist (the program checks they were staged), here under tmp_path instead of the volume's /models."""
    from llm_serving.verification import eval_gate

    (config,) = [c for c in _kind(example, "ConfigMap") if c["metadata"]["name"].startswith(f"{SECOND}-eval-")
                 and "-stage-" not in c["metadata"]["name"]]
    written = config["data"]["settings.json"].replace('"/models/', f'"{tmp_path}/')
    for task in json.loads(written)["tasks"]:
        for path in task["files"].values():
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_bytes(b"PAR1")
    parsed = eval_gate.parse_settings(json.loads(written))
    assert (parsed.model, parsed.revision, parsed.limit) == (FIRST, "canary", 100)
    assert parsed.stable is not None and parsed.candidate.url != parsed.stable.url
    assert config["data"]["eval_gate.py"] == eval_gate.__loader__.get_source(eval_gate.__name__)
