"""dev with two Hub LoRA adapters, an alias over them and one adapter from S3 (tests/support/stack_variants.py
`dev_with_adapters`), rendered once: vLLM's flags are the pinned engine's and load every staged adapter, runtime
adapter loading stays off in every render, the staging Job stages and checks the adapters before the model (the S3
one as the account its read role is bound to), the picker scores adapter affinity and rewrites the alias by weight,
each object valid against its schema or CRD."""

from __future__ import annotations

import json
from typing import Any

import pytest

from llm_serving.serving import stage_scripts
from stacks.offline.render import RenderResult
from tests.conftest import render_file
from tests.support import reference, stack_variants


@pytest.fixture(scope="module")
def with_adapters(variants_dir) -> RenderResult:
    return render_file(stack_variants.dev_with_adapters(variants_dir))


def _vllm(result: RenderResult) -> dict[str, Any]:
    return result.manifest("Deployment", "llama-8b")["spec"]["template"]["spec"]["containers"][0]


def test_vllm_loads_every_staged_adapter_with_the_pinned_engines_flags(with_adapters):
    args = _vllm(with_adapters)["args"]
    assert reference.vllm_flag_errors(args) == []
    modules = [json.loads(a) for a in args[args.index("--lora-modules") + 1:]]
    assert [(m["name"], m["base_model_name"]) for m in modules] == [
        ("sql-v1", "llama-8b"), ("sql-v2", "llama-8b"), ("support-v1", "llama-8b")]
    # The S3 adapter's directory is named by its manifest's digest: a new pin is new flags, which roll the pods.
    assert [m["path"] for m in modules] == [
        *(f"/models/.lora/example-org/llama-3.1-8b-sql-lora/{r}" for r in stack_variants.ADAPTER_REVISIONS),
        f"/models/.lora/.s3/{stack_variants.S3_ADAPTER['s3']['manifestSha256']}"]
    assert args[args.index("--max-loras") + 1] == "2" and args[args.index("--max-lora-rank") + 1] == "16"


def test_no_render_lets_vllm_load_or_unload_adapters_at_runtime(with_adapters, rendered):
    # With VLLM_ALLOW_RUNTIME_LORA_UPDATING unset or 0, vLLM 0.33.0 never registers /v1/load_lora_adapter and
    # /v1/unload_lora_adapter (vllm/envs.py; entrypoints/serve/lora/api_router.py).
    seen = 0
    for result in (with_adapters, *rendered.values()):
        for doc in result.manifests:
            pod = (doc.get("spec", {}).get("template") or doc.get("spec", {}).get("leaderWorkerTemplate", {})
                   .get("workerTemplate") or {}).get("spec", {})
            for container in [*pod.get("containers", []), *pod.get("initContainers", [])]:
                values = [e.get("value") for e in container.get("env", [])
                          if e["name"] == "VLLM_ALLOW_RUNTIME_LORA_UPDATING"]
                assert values in ([], ["0"]), (result.stack, doc["metadata"]["name"])
                seen += len(values)
    assert seen >= 1  # the adapters' pods say so explicitly


def test_the_staging_job_stages_and_checks_the_adapters_before_the_model(with_adapters):
    (job,) = [m for m in with_adapters.manifests if m["kind"] == "Job"
              and m["metadata"]["name"].startswith("llama-8b-stage-")]
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["command"][-1] == stage_scripts.STAGE_SCRIPT_WITH_ADAPTERS
    env = {e["name"]: e.get("value") for e in container["env"]}
    (*hub, s3) = json.loads(env["ADAPTERS"])
    assert [(a["revision"], a["target"]) for a in hub] == [
        (r, f"/models/.lora/example-org/llama-3.1-8b-sql-lora/{r}") for r in stack_variants.ADAPTER_REVISIONS]
    assert (s3["bucket"], s3["prefix"]) == ("example-adapters", "llama-3.1-8b/support-v1/")
    # The adapter on S3: the Job runs as the account its read role is bound to, after that role's admission guard.
    assert job["spec"]["template"]["spec"]["serviceAccountName"] == "llama-8b-stage-weights"
    depends = with_adapters.wiring["kubernetes:batch/v1:Job::llama-8b-weights-stage"]["dependsOn"]
    assert "aws:eks/podIdentityAssociation:PodIdentityAssociation::llama-8b-adapter-sources-pod-identity" in depends
    assert env["MAX_LORA_RANK"] == "16" and env["MODEL_ID"] == "meta-llama/Llama-3.1-8B-Instruct"
    (volume,) = [v for v in job["spec"]["template"]["spec"]["volumes"] if v["name"] == "requirements"]
    config = with_adapters.manifest("ConfigMap", volume["configMap"]["name"])
    assert config["data"]["stage_adapter.py"] == stage_scripts.STAGE_ADAPTER
    assert reference.kubernetes_object_errors(job, "1.34") == []


def test_the_picker_scores_adapter_affinity_and_rewrites_the_alias_by_weight(with_adapters, rendered):
    config = with_adapters.manifest("ConfigMap", "llama-8b-epp")["data"]["config.yaml"]
    assert "- type: lora-affinity-scorer" in config and "  - pluginRef: lora-affinity-scorer" in config
    assert "lora-affinity-scorer" not in rendered["dev"].manifest("ConfigMap", "llama-8b-epp")["data"]["config.yaml"]
    rewrite = with_adapters.manifest("InferenceModelRewrite", "llama-8b-aliases")
    assert reference.custom_resource_errors(rewrite) == []
    (rule,) = rewrite["spec"]["rules"]
    assert rule["matches"] == [{"model": {"type": "Exact", "value": "sql"}}]
    assert rule["targets"] == [{"modelRewrite": "sql-v1", "weight": 90}, {"modelRewrite": "sql-v2", "weight": 10}]
    assert rewrite["spec"]["poolRef"]["name"] == "llama-8b"


def test_the_plan_shows_the_adapters_gpu_buffers_beside_the_kv_room_with_and_without_them(variants_dir):
    import io

    from stacks.cli import plan

    path = stack_variants.dev_with_adapters(variants_dir)
    text, err = io.StringIO(), io.StringIO()
    assert plan.main(["--stack", str(path), "--model", "llama-8b"], text, err) == 0, err.getvalue()
    document = io.StringIO()
    assert plan.main(["--stack", str(path), "--model", "llama-8b", "--json"], document, err) == 0
    found = json.loads(document.getvalue())
    lora = found["dynamics"]["lora"]
    assert found["lora_gib_per_gpu"] == lora["gpu_gib_per_gpu"] > 0
    assert lora["kv_gib_per_gpu_without_lora"] == pytest.approx(
        found["available_kv_gib_per_gpu"] + found["lora_gib_per_gpu"], abs=0.011)
    assert f"LoRA buffers per GPU        {found['lora_gib_per_gpu']:.2f} GiB" in text.getvalue()
    assert "LoRA adapters               sql-v1, sql-v2, support-v1 (aliases sql)" in text.getvalue()


def test_the_host_memory_row_adds_up_with_the_adapters_beside_the_cpu_kv_tier(variants_dir):
    import io
    import re

    from stacks.cli import plan

    path = stack_variants.write(variants_dir, "prod-lora-plan",
                                {"models": [{"name": "llama-70b", "lora": stack_variants.DEV_LORA}]})
    text, err = io.StringIO(), io.StringIO()
    assert plan.main(["--stack", str(path), "--model", "llama-70b"], text, err) == 0, err.getvalue()
    (row,) = [line for line in text.getvalue().splitlines() if line.startswith("host memory per pod")]
    head, _, sum_of = row.split("  ", 1)[1].partition(": ")
    total = int(head.removesuffix(" GiB").replace(",", ""))
    terms = [int(re.findall(r"[\d,]+$", term)[0].replace(",", "")) for term in sum_of.split(" + ")]
    assert "LoRA adapters" in row and sum(terms) == total


def test_a_models_adapters_and_aliases_reach_its_pool_by_name_on_one_host():
    """byModel: the request's `model` may name the model, one of its adapters or an alias; each is an Exact match on
    the model's rule (and an entry of GET /v1/models), so all reach that model's pool, where the picker rewrites an
    alias to one of its adapters."""
    from llm_serving.edge import by_model
    from llm_serving.stack import parts
    from tests.support.components import committed_args, site

    args = committed_args("dev", edge={"routing": "byModel"},
                          models=[{"name": "llama-8b", "lora": stack_variants.DEV_LORA}])
    (route,) = parts.edge(args, site(args)).routes
    assert route.extra_model_names == ("sql-v1", "sql-v2", "sql")
    assert by_model.model_names(route) == ("llama-8b", "sql-v1", "sql-v2", "sql")


def test_alias_weights_reach_the_picker_only_after_the_replicas_serve_the_adapters(with_adapters):
    """A weight on a new adapter applied while the replicas still run the old adapter set would send that share of
    the alias's requests to replicas that answer 404: the rewrite waits for the model's rollout."""
    wiring = with_adapters.wiring
    (rewrite,) = [key for key in wiring if ":InferenceModelRewrite::" in key]
    assert "kubernetes:apps/v1:Deployment::llama-8b-deployment" in wiring[rewrite]["dependsOn"]
