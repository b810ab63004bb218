"""`plan --model-config`: a model the catalog lacks, planned from its config.json (a local snapshot, or the Hub
through a local server on 127.0.0.1), and the architecture block it prints plans the same in a stack."""

from __future__ import annotations

import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from llm_serving.serving import ModelConfigError, architecture_from_config, lookup_model
from tests.conftest import PROJECT_DIR
from tests.support import stack_variants
from tests.support.cli import run_stacks
from tests.support.local_http import serving

SNAPSHOT = PROJECT_DIR / "tests" / "fixtures" / "hf" / "Llama-3.2-3B-Instruct"
MODEL = "meta-llama/Llama-3.2-3B-Instruct"
CONFIG = json.loads((SNAPSHOT / "config.json").read_text())
TOTAL_SIZE = json.loads((SNAPSHOT / "model.safetensors.index.json").read_text())["metadata"]["total_size"]
TOKEN = "hf_test_token"
GIB = 1024**3


def _plan(*argv: str) -> tuple[int, str, str]:
    ran = run_stacks("plan", *argv)
    return ran.returncode, ran.stdout, ran.stderr


def _json_plan(*argv: str) -> dict[str, Any]:
    code, out, err = _plan(*argv, "--json")
    assert (code, err) == (0, ""), err
    return json.loads(out)


def test_a_model_outside_the_catalog_is_planned_from_its_local_config_json():
    assert lookup_model(MODEL) is None  # the point: the catalog does not know it
    data = _json_plan("--model", MODEL, "--model-config", str(SNAPSHOT), "--gpu", "p5.4xlarge",
                      "--max-model-len", "16384")
    block = data["architecture"]
    assert (block["numLayers"], block["numAttentionHeads"], block["numKvHeads"], block["headDim"],
            block["hiddenSize"], block["maxContextTokens"]) == (
        CONFIG["num_hidden_layers"], CONFIG["num_attention_heads"], CONFIG["num_key_value_heads"],
        CONFIG["head_dim"], CONFIG["hidden_size"], CONFIG["max_position_embeddings"])
    assert block["weightGib"] * GIB >= TOTAL_SIZE > (block["weightGib"] - 0.01) * GIB  # rounded up, to 0.01 GiB
    assert block["parametersBillion"] == round(TOTAL_SIZE / 2 / 1e9, 2)  # bf16: two bytes a parameter
    # The KV per token follows from the config: 2 (K and V) x layers x KV heads x head dim x 2 bytes (bf16).
    assert data["kv_bytes_per_token_per_gpu"] == 2 * 28 * 8 * 128 * 2
    assert data["tensor_parallel_size"] == 1 and data["kv_cache_tokens"] > 16384
    # A config.json file names the same snapshot as its directory.
    assert _json_plan("--model", MODEL, "--model-config", str(SNAPSHOT / "config.json"), "--gpu", "p5.4xlarge",
                      "--max-model-len", "16384")["kv_cache_tokens"] == data["kv_cache_tokens"]
    code, text, _ = _plan("--model", MODEL, "--model-config", str(SNAPSHOT), "--gpu", "p5.4xlarge",
                          "--max-model-len", "16384")
    (line,) = [line for line in text.splitlines() if line.startswith("  architecture: ")]
    assert code == 0 and json.loads(line.removeprefix("  architecture: ")) == block


def test_the_printed_block_plans_the_model_in_a_stack_as_the_config_did(variants_dir: Path):
    block = _json_plan("--model", MODEL, "--model-config", str(SNAPSHOT), "--gpu", "p5.4xlarge",
                       "--max-model-len", "8192")["architecture"]
    path = stack_variants.write(variants_dir, "dev-llama-3b", {
        "grafanaAdminPassword": {"secure": "v1:x"},
        "models": [{"name": "llama-8b", "modelId": MODEL, "architecture": block}]}, extends="dev")
    in_stack = _json_plan("--stack", str(path), "--model", "llama-8b")
    direct = _json_plan("--model", MODEL, "--model-config", str(SNAPSHOT), "--gpu", "p5.4xlarge",
                        "--max-model-len", "8192", "--tp", "1")
    assert in_stack["kv_bytes_per_token_per_gpu"] == direct["kv_bytes_per_token_per_gpu"]
    # The block has no vocabulary size and rounds the weights up: the stack never plans more KV than the config.
    assert 0 < direct["kv_cache_tokens"] - in_stack["kv_cache_tokens"] < direct["kv_cache_tokens"] * 0.02


class _Hub(BaseHTTPRequestHandler):
    """The Hub's resolve URLs for one repository: config.json always, the index only when `index` is set,
    model.safetensors as the LFS redirect with X-Linked-Size; every file needs the token (a gated model)."""

    files: dict[str, bytes] = {}
    single_size: int | None = None
    seen: list[str] = []

    def _authorized(self) -> bool:
        if self.headers.get("Authorization") == f"Bearer {TOKEN}":
            return True
        self.send_response(401)
        self.end_headers()
        return False

    def _answer(self, with_body: bool) -> None:
        self.seen.append(f"{self.command} {self.path}")
        if not self._authorized():
            return
        prefix = f"/{MODEL}/resolve/0e9e39f/"
        name = self.path.removeprefix(prefix) if self.path.startswith(prefix) else None
        if name == "model.safetensors" and self.single_size is not None:
            self.send_response(302)
            self.send_header("Location", "https://cdn.example/blob")
            self.send_header("X-Linked-Size", str(self.single_size))
            self.end_headers()
            return
        body = self.files.get(name or "")
        if body is None:
            self.send_response(404)
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if with_body:
            self.wfile.write(body)

    def do_GET(self) -> None:
        self._answer(with_body=True)

    def do_HEAD(self) -> None:
        self._answer(with_body=False)

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch) -> Iterator[type[_Hub]]:
    handler = type("Hub", (_Hub,), {"files": {"config.json": (SNAPSHOT / "config.json").read_bytes(),
                                              "model.safetensors.index.json":
                                              (SNAPSHOT / "model.safetensors.index.json").read_bytes()},
                                    "seen": [], "single_size": None})
    with serving(ThreadingHTTPServer(("127.0.0.1", 0), handler)) as httpd:
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{httpd.server_address[1]}")
        monkeypatch.delenv("HF_TOKEN", raising=False)
        yield handler


HUB_ARGS = ("--model", MODEL, "--model-config", "hub", "--revision", "0e9e39f", "--gpu", "p5.4xlarge",
            "--max-model-len", "16384")


def test_a_gated_model_on_the_hub_is_planned_with_the_token_and_refused_in_one_line_without(
        hub: type[_Hub], monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    code, out, err = _plan(*HUB_ARGS)
    assert (code, out) == (2, "")
    assert err.startswith("plan rejected: --model-config: http://127.0.0.1:") and err.endswith(
        "/config.json: HTTP 401: a gated or private model needs a token that can read it (HF_TOKEN, or "
        "--hf-token-file)\n")
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    from_hub = _json_plan(*HUB_ARGS)
    local = _json_plan("--model", MODEL, "--model-config", str(SNAPSHOT), "--gpu", "p5.4xlarge",
                       "--max-model-len", "16384")
    assert from_hub["architecture"] == local["architecture"]
    assert f"GET /{MODEL}/resolve/0e9e39f/model.safetensors.index.json" in hub.seen
    # The token from a file (what `pulumi config get hfToken` prints), not the environment.
    monkeypatch.delenv("HF_TOKEN")
    (tmp_path / "token").write_text(TOKEN + "\n")
    assert _json_plan(*HUB_ARGS, "--hf-token-file", str(tmp_path / "token"))["architecture"] == local["architecture"]


def test_a_single_file_checkpoint_on_the_hub_is_sized_from_its_lfs_redirect(hub: type[_Hub],
                                                                            monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    del hub.files["model.safetensors.index.json"]
    hub.single_size = TOTAL_SIZE
    data = _json_plan(*HUB_ARGS)
    assert data["architecture"]["weightGib"] * GIB >= TOTAL_SIZE
    assert f"HEAD /{MODEL}/resolve/0e9e39f/model.safetensors" in hub.seen
    hub.single_size = None
    code, _, err = _plan(*HUB_ARGS)
    assert code == 2 and "neither gives the checkpoint's weight bytes (HTTP 404)" in err


@pytest.mark.parametrize(("change", "message"), [
    ({"kv_lora_rank": 512}, "kv_lora_rank (multi-head latent attention) is not sized"),
    ({"quantization_config": {"quant_method": "awq"}}, "quant_method 'awq' is not one the planner sizes"),
    ({"num_hidden_layers": None}, "num_hidden_layers is None; expected a positive integer"),
    ({"torch_dtype": "int8"}, "torch_dtype 'int8'"),
    ({"torch_dtype": "float32"}, "vLLM serves it in bfloat16, half the bytes it reads"),
    # Qwen3-Next: linear-attention layers keep a per-sequence state, not a KV cache.
    ({"layer_types": ["linear_attention", "full_attention"] * 14}, "linear_attention (linear attention or "
     "state-space layers)"),
    ({"hybrid_override_pattern": "M-M-M*"}, "hybrid_override_pattern (linear attention or state-space layers)"),
    # Gemma 3's class defaults head_dim to 256, not hidden / heads: a config without it is not guessed.
    ({"model_type": "gemma3_text", "head_dim": None}, "no head_dim, and model_type 'gemma3_text' does not derive it"),
    ({"quantization_config": {"quant_method": "compressed-tensors", "config_groups": {"g": "int4"}}},
     "quant_method 'compressed-tensors' is not one the planner sizes"),
])
def test_a_config_the_planner_cannot_size_is_one_line_naming_the_field(tmp_path: Path, change: dict[str, Any],
                                                                       message: str):
    (tmp_path / "config.json").write_text(json.dumps({k: v for k, v in {**CONFIG, **change}.items() if v is not None}))
    (tmp_path / "model.safetensors.index.json").write_bytes((SNAPSHOT / "model.safetensors.index.json").read_bytes())
    code, out, err = _plan("--model", "acme/m", "--model-config", str(tmp_path), "--gpu", "p5.4xlarge",
                           "--max-model-len", "8192")
    assert (code, out) == (2, "") and message in err and err.count("\n") == 1


def test_weights_without_an_index_are_the_safetensors_files_and_none_at_all_is_refused(tmp_path: Path):
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    code, _, err = _plan("--model", "acme/m", "--model-config", str(tmp_path), "--gpu", "p5.4xlarge",
                         "--max-model-len", "8192")
    assert code == 2 and "neither model.safetensors.index.json nor .safetensors files" in err
    for shard, size in (("model-00001-of-00002.safetensors", 3 * GIB), ("model-00002-of-00002.safetensors", GIB)):
        with (tmp_path / shard).open("wb") as sparse:  # sizes only: no disk is written
            sparse.truncate(size)
    from stacks.cli import model_config

    assert model_config.from_path("acme/m", tmp_path).weight_bytes == 4 * GIB


def test_multimodal_moe_hybrid_and_fp8_configs_read_as_vllm_serves_them():
    # A multimodal checkpoint's language model sits under text_config (Llama 4, Gemma 3, Mistral 3).
    nested = architecture_from_config("acme/vl", {"text_config": {**CONFIG, "num_local_experts": 16},
                                                  "vision_config": {"hidden_size": 1408}}, TOTAL_SIZE)
    assert (nested.num_layers, nested.is_moe) == (CONFIG["num_hidden_layers"], True)
    # Hybrid attention (gpt-oss): the sliding layers and their window.
    hybrid = architecture_from_config("acme/h", {**CONFIG, "layer_types": ["sliding_attention", "full_attention"]
                                                 * 14, "sliding_window": 128}, TOTAL_SIZE)
    assert (hybrid.sliding_window_layers, hybrid.sliding_window_tokens) == (14, 128)
    # llm-compressor FP8 (compressed-tensors, 8-bit float weights): one byte a parameter.
    fp8 = architecture_from_config("acme/f", {**CONFIG, "quantization_config": {
        "quant_method": "compressed-tensors",
        "config_groups": {"group_0": {"weights": {"num_bits": 8, "type": "float"}}}}}, TOTAL_SIZE // 2)
    assert fp8.native_dtype == "fp8" and fp8.parameters_billion == round(TOTAL_SIZE / 2 / 1e9, 2)
    # The root's dtype wins over the text config's, as in vLLM (_find_dtype); a list of expert counts (Ernie) counts.
    rooted = architecture_from_config("acme/r", {"torch_dtype": "bfloat16", "text_config": {
        **CONFIG, "torch_dtype": None, "moe_num_experts": [64, 64]}}, TOTAL_SIZE)
    assert (rooted.native_dtype, rooted.is_moe) == ("bfloat16", True)
    # transformers >= 4.56 writes `dtype` instead of `torch_dtype`.
    renamed = {k: v for k, v in CONFIG.items() if k != "torch_dtype"} | {"dtype": "float16"}
    assert architecture_from_config("acme/d", renamed, TOTAL_SIZE).native_dtype == "float16"
    with pytest.raises(ModelConfigError, match="head_dim is None .hidden_size 3001, num_attention_heads 24."):
        architecture_from_config("acme/x", {k: v for k, v in CONFIG.items() if k != "head_dim"} | {
            "hidden_size": 3001}, TOTAL_SIZE)
    with pytest.raises(ModelConfigError, match="num_attention_heads .24. must be a multiple of num_kv_heads .7."):
        architecture_from_config("acme/y", {**CONFIG, "num_key_value_heads": 7}, TOTAL_SIZE)


def test_an_unknown_model_without_a_config_points_at_model_config():
    code, _, err = _plan("--model", MODEL, "--gpu", "p5.4xlarge", "--max-model-len", "8192")
    assert code == 2 and err.rstrip().endswith("or plan it from its config.json with --model-config")


def test_hub_options_need_the_hub_and_a_stack_takes_its_facts_from_its_file():
    code, _, err = _plan("--model", MODEL, "--model-config", str(SNAPSHOT), "--revision", "v1", "--gpu", "p5.4xlarge",
                         "--max-model-len", "8192")
    assert (code, err) == (2, "python -m stacks plan: argument --revision: only with --model-config hub\n")
    code, _, err = _plan("--stack", "dev", "--model", "llama-8b", "--model-config", str(SNAPSHOT))
    assert code == 2 and err.startswith("python -m stacks plan: argument --model-config: not a stack setting")


def test_a_model_id_that_is_no_hub_repository_is_refused_before_any_request(hub: type[_Hub]):
    code, _, err = _plan("--model", "acme/a b", "--model-config", "hub", "--gpu", "p5.4xlarge", "--max-model-len", "8K")
    assert (code, err) == (2, "plan rejected: --model-config: --model 'acme/a b': not a Hub repository id (<owner>/"
                              "<name>: letters, digits, '-', '_', '.')\n")
    assert hub.seen == []
