"""examples/Pulumi.multi-model.yaml's llama-8b with two Hub LoRA adapters, an alias over them and one adapter from S3,
in the example's one render (tests/conftest.py `multi_model`): vLLM's flags are the pinned engine's and load every
staged adapter, runtime adapter loading stays off in every render, the staging Job stages each adapter checked
against its record (the S3 one as the account its read role is bound to) before the model, the picker scores
adapter affinity and rewrites the alias by weight, each object valid against its schema or CRD; and the plan's KV
room with and without the adapters."""

from __future__ import annotations

import hashlib
import io
import json
import os
import runpy
import sys
import types
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import pytest

from llm_serving.serving import stage_scripts
from stacks.environment import load_stack_file
from stacks.offline.render import RenderResult
from tests.conftest import MULTI_MODEL_EXAMPLE
from tests.support import reference, stack_variants

MODEL_ID = "meta-llama/Llama-3.1-8B-Instruct"
ADAPTER_REPO = "example-org/llama-3.1-8b-sql-lora"


def _adapters() -> tuple[tuple[str, ...], str]:
    """The example's Hub adapters' commits, and its S3 adapter's manifest digest."""
    (model,) = [m for m in load_stack_file(MULTI_MODEL_EXAMPLE)[1].models if m.lora is not None]
    (s3,) = [a.s3 for a in model.lora.adapters if a.s3 is not None]
    return tuple(a.revision for a in model.lora.adapters if a.s3 is None), s3.manifest_sha256


ADAPTER_REVISIONS, S3_MANIFEST_SHA256 = _adapters()


def _vllm(result: RenderResult) -> dict[str, Any]:
    return result.manifest("Deployment", "llama-8b")["spec"]["template"]["spec"]["containers"][0]


def test_vllm_loads_every_staged_adapter_with_the_pinned_engines_flags(multi_model):
    args = _vllm(multi_model)["args"]
    assert reference.vllm_flag_errors(args) == []
    # Each LoRA flag the render emits is one of the pinned engine's own option strings.
    pinned = json.loads((reference.FIXTURES / "vllm" / reference.DEFAULT_VLLM_VERSION / "flags.json").read_text())
    lora_flags = [a for a in args if a.startswith("--") and "lora" in a]
    assert lora_flags == ["--enable-lora", "--max-loras", "--max-lora-rank", "--max-cpu-loras", "--lora-modules"]
    assert set(lora_flags) <= set(pinned["all_option_strings"])
    modules = [json.loads(a) for a in args[args.index("--lora-modules") + 1:]]
    assert [(m["name"], m["base_model_name"]) for m in modules] == [
        ("sql-v1", "llama-8b"), ("sql-v2", "llama-8b"), ("support-v1", "llama-8b")]
    # The S3 adapter's directory is named by its manifest's digest: a new pin is new flags, which roll the pods.
    assert [m["path"] for m in modules] == [
        *(f"/models/.lora/{ADAPTER_REPO}/{r}" for r in ADAPTER_REVISIONS), f"/models/.lora/.s3/{S3_MANIFEST_SHA256}"]
    assert args[args.index("--max-loras") + 1] == "2" and args[args.index("--max-lora-rank") + 1] == "16"
    assert args[args.index("--max-cpu-loras") + 1] == "4"
    # The model without adapters starts without LoRA.
    assert not [a for a in multi_model.manifest("Deployment", "llama-70b")["spec"]["template"]["spec"]["containers"][0]
                ["args"] if "lora" in a]


def test_no_render_lets_vllm_load_or_unload_adapters_at_runtime(multi_model, rendered):
    # With VLLM_ALLOW_RUNTIME_LORA_UPDATING unset or 0, vLLM 0.33.0 never registers /v1/load_lora_adapter and
    # /v1/unload_lora_adapter (vllm/envs.py; entrypoints/serve/lora/api_router.py).
    seen = 0
    for result in (multi_model, *rendered.values()):
        for doc in result.manifests:
            pod = (doc.get("spec", {}).get("template") or doc.get("spec", {}).get("leaderWorkerTemplate", {})
                   .get("workerTemplate") or {}).get("spec", {})
            for container in [*pod.get("containers", []), *pod.get("initContainers", [])]:
                values = [e.get("value") for e in container.get("env", [])
                          if e["name"] == "VLLM_ALLOW_RUNTIME_LORA_UPDATING"]
                assert values in ([], ["0"]), (result.stack, doc["metadata"]["name"])
                seen += len(values)
    assert seen >= 1  # the adapters' pods say so explicitly


def test_the_staging_job_stages_and_checks_the_adapters_before_the_model(multi_model):
    job = _stage_job(multi_model)
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["command"][-1] == stage_scripts.STAGE_SCRIPT_WITH_ADAPTERS
    env = {e["name"]: e.get("value") for e in container["env"]}
    (*hub, s3) = json.loads(env["ADAPTERS"])
    assert [(a["revision"], a["target"]) for a in hub] == [
        (r, f"/models/.lora/{ADAPTER_REPO}/{r}") for r in ADAPTER_REVISIONS]
    assert (s3["bucket"], s3["prefix"]) == ("example-adapters", "llama-3.1-8b/support-v1/")
    # The adapter on S3: the Job runs as the account its read role is bound to, after that role's admission guard.
    assert job["spec"]["template"]["spec"]["serviceAccountName"] == "llama-8b-stage-weights"
    depends = multi_model.wiring["kubernetes:batch/v1:Job::llama-8b-weights-stage"]["dependsOn"]
    assert "aws:eks/podIdentityAssociation:PodIdentityAssociation::llama-8b-adapter-sources-pod-identity" in depends
    assert env["MAX_LORA_RANK"] == "16" and env["MODEL_ID"] == MODEL_ID
    (volume,) = [v for v in job["spec"]["template"]["spec"]["volumes"] if v["name"] == "requirements"]
    config = multi_model.manifest("ConfigMap", volume["configMap"]["name"])
    assert config["data"]["stage_adapter.py"] == stage_scripts.STAGE_ADAPTER
    assert reference.kubernetes_object_errors(job, "1.34") == []


def _stage_job(result: RenderResult) -> dict[str, Any]:
    (job,) = [m for m in result.manifests if m["kind"] == "Job" and m["metadata"]["name"].startswith("llama-8b-stage-")]
    return job


# An adapter_config.json the staging Job accepts for llama-8b at maxLoraRank 16 (peft's keys that vLLM reads).
ADAPTER_CONFIG = {"peft_type": "LORA", "base_model_name_or_path": MODEL_ID, "r": 16, "lora_alpha": 32,
                  "target_modules": ["q_proj", "v_proj"], "bias": "none"}


def _hub_sibling(name: str, content: bytes) -> types.SimpleNamespace:
    """A file as the Hub's model_info(files_metadata=True) lists it: LFS files carry their SHA-256."""
    blob = hashlib.sha1(f"blob {len(content)}\0".encode() + content, usedforsecurity=False).hexdigest()
    lfs = (types.SimpleNamespace(sha256=hashlib.sha256(content).hexdigest(), size=len(content))
           if name.endswith(".safetensors") else None)
    return types.SimpleNamespace(rfilename=name, size=len(content), blob_id=blob, lfs=lfs)


def _run_rendered_adapter_stage(job: dict[str, Any], config_map: dict[str, Any], root: Path,
                                monkeypatch: pytest.MonkeyPatch, tampered: str | None) -> tuple[int, str]:
    """The adapter part of the rendered Job's script, run as the Job runs it: its own heredoc program, the verifier
    and config check from the rendered ConfigMap, its env with /models under `root`. The Hub (faked) records each
    revision's two files; it serves them as recorded, except `tampered`'s safetensors, one byte changed."""
    container = job["spec"]["template"]["spec"]["containers"][0]
    script = container["command"][-1]
    program = script[script.index("python3 - <<'PY'\n") + len("python3 - <<'PY'\n"):script.index("\nPY\n")]
    lib = root / "etc-stage"
    lib.mkdir()
    for name in ("stage_verify.py", "stage_adapter.py"):
        (lib / name).write_text(config_map["data"][name])
    recorded = {"adapter_config.json": json.dumps(ADAPTER_CONFIG).encode(),
                "adapter_model.safetensors": b"\x01" * 4096}

    class HfApi:
        def model_info(self, repo_id: str, revision: str, files_metadata: bool, token: Any) -> Any:
            assert files_metadata  # the record with each file's hash
            return types.SimpleNamespace(siblings=[_hub_sibling(n, c) for n, c in recorded.items()])

    def snapshot_download(repo_id: str, revision: str, local_dir: str, token: Any, allow_patterns: list) -> None:
        for name, content in recorded.items():
            if revision == tampered and name.endswith(".safetensors"):
                content = b"\x02" + content[1:]
            Path(local_dir).mkdir(parents=True, exist_ok=True)
            (Path(local_dir) / name).write_bytes(content)

    hub = types.ModuleType("huggingface_hub")
    hub.HfApi, hub.snapshot_download = HfApi, snapshot_download  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "huggingface_hub", hub)
    for module in ("stage_verify", "stage_adapter"):
        monkeypatch.delitem(sys.modules, module, raising=False)
    monkeypatch.syspath_prepend(str(lib))
    for env in container["env"]:
        if "value" in env:
            monkeypatch.setenv(env["name"], env["value"].replace("/models/", f"{root}/models/"))
    # The Hub's adapters only: the S3 one is staged against botocore's Stubber (tests/components/serving/
    # test_lora_s3.py), and this Job has no credentials here.
    hub_only = [a for a in json.loads(os.environ["ADAPTERS"]) if "bucket" not in a]
    monkeypatch.setenv("ADAPTERS", json.dumps(hub_only))
    (root / "program.py").write_text(program)
    out = io.StringIO()
    with redirect_stdout(out), redirect_stderr(out):
        try:
            runpy.run_path(str(root / "program.py"), run_name="__main__")
        except SystemExit as exit_:
            out.write(str(exit_.code))
            return (1 if exit_.code else 0), out.getvalue()
    return 0, out.getvalue()


@pytest.mark.parametrize("tampered", [None, 1], ids=["as-recorded", "sql-v2-tampered"])
def test_the_staging_job_marks_an_adapter_only_once_each_file_matches_the_hubs_hash(multi_model, tmp_path,
                                                                                     monkeypatch, tampered):
    """What the rendered Job stages for each adapter: adapter_config.json and adapter_model.safetensors of the
    pinned commit, each checked against the Hub's record (the safetensors' SHA-256), then the config against the
    model; its marker, which the serving pods wait for, only after both pass."""
    job = _stage_job(multi_model)
    (volume,) = [v for v in job["spec"]["template"]["spec"]["volumes"] if v["name"] == "requirements"]
    config_map = multi_model.manifest("ConfigMap", volume["configMap"]["name"])
    bad = None if tampered is None else ADAPTER_REVISIONS[tampered]
    code, output = _run_rendered_adapter_stage(job, config_map, tmp_path, monkeypatch, bad)
    targets = {r: tmp_path / "models" / ".lora" / ADAPTER_REPO / r for r in ADAPTER_REVISIONS}
    for revision, target in targets.items():
        marked = (target / ".llm-serving-complete").is_file()
        if revision == bad:
            assert code == 1 and "do not match the Hub's record" in output and not marked
            assert not (target / "adapter_model.safetensors").exists()  # discarded: the retry fetches it again
        else:
            assert marked, output
            assert sorted(p.name for p in target.iterdir()) == [
                ".llm-serving-complete", "adapter_config.json", "adapter_model.safetensors"]
    assert code == (0 if bad is None else 1)


def test_the_picker_scores_adapter_affinity_and_rewrites_the_alias_by_weight(multi_model):
    config = multi_model.manifest("ConfigMap", "llama-8b-epp")["data"]["config.yaml"]
    assert "- type: lora-affinity-scorer" in config and "  - pluginRef: lora-affinity-scorer" in config
    # Not for the model without adapters, in the same render.
    assert "lora-affinity-scorer" not in multi_model.manifest("ConfigMap", "llama-70b-epp")["data"]["config.yaml"]
    rewrite = multi_model.manifest("InferenceModelRewrite", "llama-8b-aliases")
    assert reference.custom_resource_errors(rewrite) == []
    (rule,) = rewrite["spec"]["rules"]
    assert rule["matches"] == [{"model": {"type": "Exact", "value": "sql"}}]
    assert rule["targets"] == [{"modelRewrite": "sql-v1", "weight": 90}, {"modelRewrite": "sql-v2", "weight": 10}]
    assert rewrite["spec"]["poolRef"]["name"] == "llama-8b"


def _plan(model: str, *options: str) -> tuple[str, dict[str, Any]]:
    from stacks.cli import plan

    text, document, err = io.StringIO(), io.StringIO(), io.StringIO()
    argv = ["--stack", str(MULTI_MODEL_EXAMPLE), "--model", model, *options]
    assert plan.main(argv, text, err) == 0, err.getvalue()
    assert plan.main([*argv, "--json"], document, err) == 0, err.getvalue()
    return text.getvalue(), json.loads(document.getvalue())


def test_the_plan_shows_the_adapters_gpu_buffers_beside_the_kv_room_with_and_without_them():
    text, found = _plan("llama-8b")
    lora = found["dynamics"]["lora"]
    assert found["lora_gib_per_gpu"] == lora["gpu_gib_per_gpu"] > 0
    assert lora["kv_gib_per_gpu_without_lora"] == pytest.approx(
        found["available_kv_gib_per_gpu"] + found["lora_gib_per_gpu"], abs=0.011)
    assert (f"LoRA buffers per GPU        {found['lora_gib_per_gpu']:.2f} GiB, taken from the KV cache (without them: "
            f"{lora['kv_gib_per_gpu_without_lora']:.2f} GiB)") in text
    assert "LoRA adapters               sql-v1, sql-v2, support-v1 (aliases sql)" in text
    # The stack's other model has no adapters: its KV room is all of it, and the plan says nothing of LoRA.
    plain_text, plain = _plan("llama-70b")
    assert plain["lora_gib_per_gpu"] == 0 and "LoRA" not in plain_text


def test_the_host_memory_row_adds_up_with_the_adapters_beside_the_cpu_kv_tier(variants_dir):
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


def test_alias_weights_reach_the_picker_only_after_the_replicas_serve_the_adapters(multi_model):
    """A weight on a new adapter applied while the replicas still run the old adapter set would send that share of
    the alias's requests to replicas that answer 404: the rewrite waits for the model's rollout."""
    wiring = multi_model.wiring
    (rewrite,) = [key for key in wiring if ":InferenceModelRewrite::" in key]
    assert "kubernetes:apps/v1:Deployment::llama-8b-deployment" in wiring[rewrite]["dependsOn"]


def test_the_gate_asks_each_adapter_everywhere_and_the_alias_through_the_edge(multi_model):
    """The deploy gate's settings (the ConfigMap the Job reads) carry the model's adapters and its alias over them,
    from the same `lora` the flags and the picker's rewrite come from; the alias is asked where the picker is."""
    probe = multi_model.resource("kubernetes:core/v1:ConfigMap", "llama-8b-verify-probe")
    settings = json.loads(probe["inputs"]["data"]["settings.json"])
    assert settings["adapters"] == ["sql-v1", "sql-v2", "support-v1"]
    assert settings["aliases"] == [{"name": "sql", "targets": ["sql-v1", "sql-v2"]}]
    assert {t["name"]: t["aliases"] for t in settings["targets"]} == {"edge": True, "service": False}
