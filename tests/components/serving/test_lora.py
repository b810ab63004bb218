"""LoRA adapters on a model: their vLLM flags against the pinned engine's argument list, their GPU buffers taken from
the KV room and their pinned host memory from the pod's limit, the staging Job's checks of each adapter, and the
stack's rules. The stack's render with adapters is tests/stacks/test_lora_render.py."""

from __future__ import annotations

import copy
import hashlib
import io
import json
import runpy
import sys
import types
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import pydantic
import pytest

from llm_serving import serving
from llm_serving.serving import lora, stage_adapter, stage_scripts, stage_verify, weights
from llm_serving.serving.models import lookup_model
from llm_serving.stack import planning, rules
from tests.support import stack_variants
from tests.support.components import committed_args
from tests.support.reference import vllm_flag_errors

LLAMA_8B = lookup_model("meta-llama/Llama-3.1-8B-Instruct")
LLAMA_70B = lookup_model("meta-llama/Llama-3.1-70B-Instruct")
REVISION = "a" * 40


def _lora(**values: Any) -> serving.LoraArgs:
    return pydantic.TypeAdapter(serving.LoraArgs).validate_python(
        {"adapters": [{"name": "sql-v1", "modelId": "org/sql-lora", "revision": REVISION}], **values})


def dev_with(lora_values: dict[str, Any], **sections: Any) -> Any:
    return committed_args("dev", models=[{"name": "llama-8b", "lora": lora_values}], **sections)


def problems(args: Any) -> list[str]:
    return [p.line() for p in rules.check(args)]


# --- memory ------------------------------------------------------------------------------------------------------


def test_the_mlp_width_comes_out_of_the_parameter_count_as_config_json_has_it():
    # meta-llama/Llama-3.1-8B and -70B config.json: intermediate_size 14336 and 28672.
    assert lora.intermediate_size(LLAMA_8B) == 14336
    assert lora.intermediate_size(LLAMA_70B) == 28672


def test_gpu_buffers_follow_vllms_preallocation():
    # Llama-3.1-8B, max_loras 4, rank 16, bf16: 81,920 elements per layer per rank unit (qkv 3x4096 + 6144,
    # o 8192, gate_up 2x4096 + 28672, down 14336 + 4096) x 32 layers x 16 x 4 x 2 bytes = 320 MiB.
    assert lora.elements_per_rank_unit(LLAMA_8B, lora.ALL_TARGET_MODULES, 1) == 81920
    every = [m.value for m in lora.ALL_TARGET_MODULES]
    decoder = lora.gpu_bytes_per_gpu(LLAMA_8B, _lora(maxLoras=4, targetModules=every), tp=1)
    assert decoder == 320 * 1024**2
    # Without target modules vLLM also wraps embed_tokens and lm_head, whole on every rank: 2 x (128,256 vocab + 4,096
    # hidden) elements per slot and rank unit, x 16 x 4 x 2 bytes = 33,882,112 bytes more.
    assert lora.gpu_bytes_per_gpu(LLAMA_8B, _lora(maxLoras=4), tp=1) - decoder == 2 * (128256 + 4096) * 16 * 4 * 2
    assert lora.gpu_bytes_per_gpu(LLAMA_8B, _lora(maxLoras=4), tp=4) - lora.gpu_bytes_per_gpu(
        LLAMA_8B, _lora(maxLoras=4, targetModules=every), tp=4) == 2 * (128256 + 4096) * 16 * 4 * 2


def test_target_modules_and_tensor_parallelism_narrow_the_buffers():
    everything = lora.gpu_bytes_per_gpu(LLAMA_70B, _lora(), tp=1)
    attention = lora.gpu_bytes_per_gpu(LLAMA_70B, _lora(targetModules=["qkv_proj", "o_proj"]), tp=1)
    sharded = lora.gpu_bytes_per_gpu(LLAMA_70B, _lora(), tp=4)
    assert attention < everything and everything / 4 < sharded < everything  # half of each layer stays whole


def test_the_plan_takes_the_buffers_from_the_kv_room_and_shows_both():
    model = committed_args("dev").models[0]
    plain = planning.model_plan(committed_args("dev"), model)
    config = dev_with({"maxLoras": 4, "maxLoraRank": 64,
                       "adapters": [{"name": "sql-v1", "modelId": "org/sql-lora", "revision": REVISION}]})
    with_lora = planning.model_plan(config, config.models[0])
    buffers = lora.gpu_bytes_per_gpu(LLAMA_8B, config.models[0].lora, tp=1)
    assert with_lora.lora_gib_per_gpu == pytest.approx(buffers / 1024**3)
    assert with_lora.available_kv_gib_per_gpu == pytest.approx(plain.available_kv_gib_per_gpu - buffers / 1024**3)
    assert with_lora.kv_cache_tokens < plain.kv_cache_tokens
    assert plain.to_json()["lora_gib_per_gpu"] == 0 and with_lora.to_json()["lora_gib_per_gpu"] > 1


def test_adapters_that_leave_too_little_kv_for_the_concurrency_are_refused_with_the_numbers():
    plain = planning.model_plan(committed_args("dev"), committed_args("dev").models[0])
    # Without LoRA this many full requests fit; 32 slots at rank 256 take 40 GiB of the KV room.
    fits = int(plain.max_concurrency)
    assert not problems(committed_args("dev", models=[{"name": "llama-8b", "targetConcurrency": fits}]))
    config = committed_args("dev", models=[{"name": "llama-8b", "targetConcurrency": fits, "lora": {
        "maxLoras": 32, "maxLoraRank": 256, "maxCpuLoras": 32,
        "adapters": [{"name": "sql-v1", "modelId": "org/sql-lora", "revision": REVISION}]}}])
    (line,) = [p for p in problems(config) if p.startswith("llm-serving:models[llama-8b]:")]
    assert "of LoRA buffers per GPU" in line and f"{fits} requests at --max-model-len 8192" in line
    assert "maxLoras" in line


def test_the_host_memory_of_cpu_adapters_counts_against_the_pods_limit():
    small = dev_with({"maxLoras": 1, "maxCpuLoras": 1,
                      "adapters": [{"name": "sql-v1", "modelId": "org/sql-lora", "revision": REVISION}]})
    memory = planning.host_memory(small, small.models[0])
    assert memory.lora_gib >= 1 and memory.free_gib >= 0
    huge = dev_with({"maxLoras": 1, "maxLoraRank": 512, "maxCpuLoras": 1024,
                     "adapters": [{"name": "sql-v1", "modelId": "org/sql-lora", "revision": REVISION}]})
    lines = [p for p in problems(huge) if "lora.maxCpuLoras" in p]
    assert lines and "pinned host memory" in lines[0]


# --- flags -------------------------------------------------------------------------------------------------------


def test_the_flags_are_the_pinned_engines_and_load_each_adapter_under_the_served_model():
    lora_args = _lora(maxLoras=2, maxCpuLoras=4, targetModules=["qkv_proj", "o_proj"], adapters=[
        {"name": "sql-v1", "modelId": "org/sql-lora", "revision": REVISION},
        {"name": "sql-v2", "modelId": "org/sql-lora", "revision": "b" * 40}])
    args = serving.lora_args(lora_args, "llama-8b")
    assert vllm_flag_errors(["/models/m", *args]) == []
    modules = args[args.index("--lora-modules") + 1:]
    assert [json.loads(m) for m in modules] == [
        {"name": "sql-v1", "path": f"/models/.lora/org/sql-lora/{REVISION}", "base_model_name": "llama-8b"},
        {"name": "sql-v2", "path": f"/models/.lora/org/sql-lora/{'b' * 40}", "base_model_name": "llama-8b"}]
    assert args[args.index("--max-cpu-loras") + 1] == "4"


def test_extra_args_cannot_set_a_lora_flag_a_second_time():
    assert serving.managed_flag_conflicts(["--enable-lora", "--max-loras=8", "--lora-modules=x=/y"]) == [
        "--enable-lora", "--max-loras=8", "--lora-modules=x=/y"]


def test_only_vllms_ranks_and_pinned_commits_are_accepted():
    with pytest.raises(pydantic.ValidationError, match="maxLoraRank must be one of"):
        _lora(maxLoraRank=24)
    with pytest.raises(pydantic.ValidationError):
        _lora(adapters=[{"name": "sql-v1", "modelId": "org/sql-lora", "revision": "main"}])


def test_served_names_are_the_model_its_adapters_and_its_aliases():
    config = dev_with(stack_variants.DEV_LORA)
    assert config.models[0].served_names() == ["llama-8b", "sql-v1", "sql-v2", "sql"]
    assert committed_args("dev").models[0].served_names() == ["llama-8b"]


# --- rules -------------------------------------------------------------------------------------------------------


def test_the_dev_variant_is_clean():
    assert problems(dev_with(stack_variants.DEV_LORA)) == []


def test_aliases_name_the_models_adapters_with_weights_on_all_targets_or_none():
    values = copy.deepcopy(stack_variants.DEV_LORA)
    values["aliases"] = [{"name": "sql", "targets": [{"adapter": "sql-v1", "weight": 90}, {"adapter": "sql-v3"}]}]
    lines = problems(dev_with(values))
    assert any("aliases[sql].targets: names no adapter" in line for line in lines)
    assert any("weights on some targets only" in line for line in lines)


def test_a_name_served_twice_is_refused():
    values = copy.deepcopy(stack_variants.DEV_LORA)
    values["aliases"] = [{"name": "llama-8b", "targets": [{"adapter": "sql-v1"}]}]
    assert any("aliases[llama-8b].name: is served under another" in line for line in problems(dev_with(values)))


def test_fewer_cpu_adapters_than_gpu_slots_is_refused_as_vllm_would():
    values = {**stack_variants.DEV_LORA, "maxLoras": 4, "maxCpuLoras": 2}
    assert any("lora.maxCpuLoras: vLLM refuses" in line for line in problems(dev_with(values)))


def test_adapters_need_a_volume_and_aliases_need_the_picker():
    on_s3 = committed_args("prod", weightsStorage={"backend": "s3"},
                           models=[{"name": "llama-70b", "lora": stack_variants.DEV_LORA}])
    assert any("weightsStorage.backend s3 has none" in line for line in problems(on_s3))
    awake = committed_args("dev", models=[{"name": "llama-8b", "lora": stack_variants.DEV_LORA,
                                           "route": {"routing": "service"},
                                           "autoscaling": {"minReplicas": None, "maxReplicas": None,
                                                           "scaleToZero": None}}])
    assert any("an alias is the endpoint picker's rewrite" in line for line in problems(awake))


# --- the adapter's config, checked by the staging Job ---------------------------------------------------------------

BASE = {"peft_type": "LORA", "base_model_name_or_path": "meta-llama/Llama-3.1-8B-Instruct", "r": 16,
        "lora_alpha": 32, "target_modules": ["q_proj", "v_proj"], "bias": "none"}


@pytest.mark.parametrize("base", [
    "meta-llama/Llama-3.1-8B-Instruct",
    "/root/.cache/huggingface/hub/models--meta-llama--Llama-3.1-8B-Instruct/snapshots/0e9e39f249a16976918f6564b8830bc894c89659",
    "/data/models/meta-llama/Llama-3.1-8B-Instruct/",
])
def test_the_base_model_matches_as_a_hub_id_a_hub_cache_path_or_a_local_copy(base):
    assert stage_adapter.config_problems({**BASE, "base_model_name_or_path": base},
                                         "meta-llama/Llama-3.1-8B-Instruct", 16) == []


@pytest.mark.parametrize(("change", "reason"), [
    ({"base_model_name_or_path": "meta-llama/Llama-3.1-70B-Instruct"}, "is not meta-llama/Llama-3.1-8B-Instruct"),
    ({"base_model_name_or_path": "meta-llama/llama-3.1-8b-instruct"}, "is not meta-llama"),
    ({"base_model_name_or_path": None}, "names no base_model_name_or_path"),
    ({"r": 32}, "rank 32"),
    ({"rank_pattern": {"q_proj": 64}}, "rank 64"),
    ({"use_dora": True}, "DoRA"),
    ({"bias": "all"}, "bias 'all'"),
    ({"lora_bias": True}, "lora_bias"),
    ({"modules_to_save": ["lm_head"]}, "modules_to_save"),
    ({"init_lora_weights": "pissa"}, "init_lora_weights"),
    ({"peft_type": "IA3"}, "peft_type"),
    ({"r": 0}, "must be positive integers"),
    ({"rank_pattern": {"q_proj": -4}}, "must be positive integers"),
])
def test_what_vllm_would_refuse_is_refused_before_the_marker(change, reason):
    (problem,) = stage_adapter.config_problems({**BASE, **change}, "meta-llama/Llama-3.1-8B-Instruct", 16)
    assert reason in problem


@pytest.mark.parametrize("key", ["r", "lora_alpha", "target_modules"])
def test_a_config_without_a_key_vllm_requires_is_refused(key):
    # vLLM's PEFTHelper.from_dict refuses an adapter_config.json without r, lora_alpha or target_modules.
    config = {k: v for k, v in BASE.items() if k != key}
    assert any(f"lacks {key}" in problem
               for problem in stage_adapter.config_problems(config, "meta-llama/Llama-3.1-8B-Instruct", 16))


def _sibling(name: str, content: bytes) -> types.SimpleNamespace:
    blob = hashlib.sha1(f"blob {len(content)}\0".encode() + content, usedforsecurity=False).hexdigest()
    lfs = (types.SimpleNamespace(sha256=hashlib.sha256(content).hexdigest(), size=len(content))
           if name.endswith(".safetensors") else None)
    return types.SimpleNamespace(rfilename=name, size=len(content), blob_id=blob, lfs=lfs)


def _run_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, recorded: dict[str, bytes],
             served: dict[str, bytes]) -> tuple[int, str, Path]:
    """The Job's adapter program, in-process: the Hub records `recorded` and serves `served`."""
    hub = types.ModuleType("huggingface_hub")

    class HfApi:
        def model_info(self, repo_id: str, revision: str, files_metadata: bool, token: Any) -> Any:
            return types.SimpleNamespace(siblings=[_sibling(n, c) for n, c in recorded.items()])

    def snapshot_download(repo_id: str, revision: str, local_dir: str, token: Any, allow_patterns: list) -> None:
        for name, content in served.items():
            (Path(local_dir) / name).parent.mkdir(parents=True, exist_ok=True)
            (Path(local_dir) / name).write_bytes(content)

    hub.HfApi = HfApi  # type: ignore[attr-defined]
    hub.snapshot_download = snapshot_download  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "huggingface_hub", hub)
    monkeypatch.setitem(sys.modules, "stage_verify", stage_verify)
    monkeypatch.setitem(sys.modules, "stage_adapter", stage_adapter)
    target = tmp_path / ".lora" / "org" / "sql-lora" / REVISION
    monkeypatch.setenv("ADAPTERS", json.dumps([{"model_id": "org/sql-lora", "revision": REVISION,
                                                "target": str(target)}]))
    monkeypatch.setenv("MODEL_ID", "meta-llama/Llama-3.1-8B-Instruct")
    monkeypatch.setenv("MAX_LORA_RANK", "16")
    program = tmp_path / "program.py"
    program.write_text(stage_scripts.ADAPTER_PROGRAM)
    out, err = io.StringIO(), io.StringIO()
    code = 0
    with redirect_stdout(out), redirect_stderr(err):
        try:
            runpy.run_path(str(program), run_name="__main__")
        except SystemExit as exit_:
            code = 1 if exit_.code else 0
            err.write(str(exit_.code))
    return code, out.getvalue() + err.getvalue(), target


ADAPTER = {"adapter_config.json": json.dumps(BASE).encode(), "adapter_model.safetensors": b"\x01" * 2048}


def test_the_job_stages_a_verified_adapter_and_marks_it(tmp_path, monkeypatch):
    code, output, target = _run_job(tmp_path, monkeypatch, ADAPTER, ADAPTER)
    assert code == 0, output
    assert (target / ".llm-serving-complete").is_file()


def test_a_tampered_adapter_file_gets_no_marker(tmp_path, monkeypatch):
    code, output, target = _run_job(tmp_path, monkeypatch, ADAPTER,
                                     {**ADAPTER, "adapter_model.safetensors": b"\x02" * 2048})
    assert code == 1 and "do not match the Hub's record" in output
    assert not (target / ".llm-serving-complete").exists()
    assert not (target / "adapter_model.safetensors").exists()  # discarded: the retry fetches it again


def test_an_adapter_for_another_base_model_gets_no_marker(tmp_path, monkeypatch):
    other = {**ADAPTER, "adapter_config.json": json.dumps(
        {**BASE, "base_model_name_or_path": "Qwen/Qwen2.5-7B-Instruct"}).encode()}
    code, output, target = _run_job(tmp_path, monkeypatch, other, other)
    assert code == 1 and "is not meta-llama/Llama-3.1-8B-Instruct" in output
    assert not (target / ".llm-serving-complete").exists()


def test_an_adapter_without_safetensors_is_refused(tmp_path, monkeypatch):
    pickled = {"adapter_config.json": ADAPTER["adapter_config.json"], "adapter_model.bin": b"\x00" * 64}
    code, output, target = _run_job(tmp_path, monkeypatch, pickled, pickled)
    assert code == 1 and "adapter_model.safetensors" in output
    assert not (target / ".llm-serving-complete").exists()


def test_the_job_checks_its_adapters_before_the_models_marker():
    script = stage_scripts.STAGE_SCRIPT_WITH_ADAPTERS
    assert script.startswith("set -eu\n")
    assert script.index("stage_adapter.config_problems") < script.index('"$TARGET/.llm-serving-complete"')
    # The model's own part is STAGE_SCRIPT's, byte for byte.
    assert script.endswith(stage_scripts.STAGE_SCRIPT[stage_scripts.STAGE_SCRIPT.index("python3 - <<'PY'"):])


def test_a_changed_adapter_is_a_new_job_and_a_model_without_adapters_keeps_its_job():
    one = (weights.StagedAdapter("org/sql-lora", REVISION, "/models/.lora/org/sql-lora/" + REVISION),)
    two = (weights.StagedAdapter("org/sql-lora", "b" * 40, "/models/.lora/org/sql-lora/" + "b" * 40),)
    plain = weights.job_name("llama-8b", REVISION, None)
    assert plain == "llama-8b-stage-" + hashlib.sha256(f"{REVISION}/".encode()).hexdigest()[:10]
    assert len({plain, weights.job_name("llama-8b", REVISION, None, one, 16),
                weights.job_name("llama-8b", REVISION, None, two, 16),
                weights.job_name("llama-8b", REVISION, None, one, 32)}) == 4
    assert weights.requirements_configmap_name("m") != weights.requirements_configmap_name("m", adapters=True)


def test_the_compile_cache_key_follows_the_lora_shape_not_the_adapters():
    plain = committed_args("dev")
    base = planning.compile_cache_key(plain, plain.models[0]).engine_flags
    config = dev_with(stack_variants.DEV_LORA)
    with_lora = planning.compile_cache_key(config, config.models[0]).engine_flags
    other_adapter = dev_with({**stack_variants.DEV_LORA, "adapters": [
        {"name": "sql-v1", "modelId": "org/other", "revision": REVISION},
        {"name": "sql-v2", "modelId": "org/other", "revision": "b" * 40}]})
    higher_rank = dev_with({**stack_variants.DEV_LORA, "maxLoraRank": 64})
    assert with_lora[:len(base)] == base and with_lora != base
    assert planning.compile_cache_key(other_adapter, other_adapter.models[0]).engine_flags == with_lora
    assert planning.compile_cache_key(higher_rank, higher_rank.models[0]).engine_flags != with_lora
