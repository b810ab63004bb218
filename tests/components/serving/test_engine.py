"""Engine arguments, probe budgets, drain timings and sizing, as plain tables."""

from __future__ import annotations

import pytest

from llm_serving.serving import engine as vllm_engine
from llm_serving.serving.engine import EngineSettings
from tests.support import reference

PROD = EngineSettings(
    model_path="/models/meta-llama/Llama-3.1-70B-Instruct/1605565b47bb9346c5515c34102e054115b4f98b",
    served_model_name="llama-70b",
    max_model_len=16384,
    gpu_memory_utilization=0.92,
    tensor_parallel_size=4,
    kv_cache_dtype="auto",
    max_num_seqs=256,
    max_num_batched_tokens=8192,
    enable_prefix_caching=True,
    shutdown_timeout_seconds=300,
)


def test_prod_engine_args_are_explicit_and_exist_in_the_pinned_vllm():
    args = vllm_engine.engine_args(PROD)
    assert args == [
        PROD.model_path,
        "--served-model-name", "llama-70b",
        "--max-model-len", "16384",
        "--gpu-memory-utilization", "0.92",
        "--tensor-parallel-size", "4",
        "--kv-cache-dtype", "auto",
        "--max-num-seqs", "256",
        "--max-num-batched-tokens", "8192",
        "--enable-prefix-caching",
        "--port", "8000",
        "--shutdown-timeout", "300",
        # Keep-alive comments on idle streams: the pinned vLLM has the flag (serve-flags 0.33.0).
        "--sse-keep-alive-interval", "15",
    ]
    assert reference.vllm_flag_errors(args) == []


def test_optional_settings_add_their_flags_and_stay_valid():
    settings = EngineSettings(
        **{**PROD.__dict__, "kv_cache_dtype": "fp8", "quantization": "fp8", "enable_prefix_caching": False,
           "tokenizer_path": "/models/x/tokenizer-abc", "chat_template_path": vllm_engine.CHAT_TEMPLATE_PATH,
           "extra_args": ("--enable-log-requests", "--max-num-queued-reqs=512")}
    )
    args = vllm_engine.engine_args(settings)
    assert args[-8:] == [
        "--quantization", "fp8",
        "--tokenizer", "/models/x/tokenizer-abc",
        "--chat-template", vllm_engine.CHAT_TEMPLATE_PATH,
        "--enable-log-requests", "--max-num-queued-reqs=512",
    ]
    assert "--no-enable-prefix-caching" in args
    assert reference.vllm_flag_errors(args) == []


def test_extra_args_may_not_override_typed_settings():
    with pytest.raises(ValueError, match="--max-model-len=4096, -tp"):
        vllm_engine.engine_args(
            EngineSettings(**{**PROD.__dict__, "extra_args": ("--max-model-len=4096", "-tp", "--enable-log-requests")})
        )


def test_probes_follow_the_seed():
    probes = vllm_engine.probes(2640)
    assert probes.startup_budget_seconds == 2640
    assert (probes.startup_period_seconds, probes.startup_failure_threshold) == (10, 264)
    assert probes.liveness_timeout_seconds >= 10
    assert probes.liveness_window_seconds == 90
    assert (probes.readiness_period_seconds, probes.readiness_failure_threshold) == (10, 5)
    # Readiness tolerates a busy engine, and still gives up before liveness restarts one.
    assert probes.readiness_timeout_seconds == 10
    assert 10 * 5 < probes.liveness_window_seconds


def test_startup_budget_rounds_up_to_a_whole_period():
    assert vllm_engine.probes(601).startup_failure_threshold == 61


def test_termination_grace_outlasts_prestop_and_vllm_shutdown():
    # SIGKILL comes after preStop and vLLM's whole shutdown timeout, with room for the process to exit.
    assert vllm_engine.termination_grace_seconds(300) > vllm_engine.PRE_STOP_SECONDS + 300


@pytest.mark.parametrize(("tp", "gib"), [(1, 4), (2, 8), (4, 16), (8, 32)])
def test_shm_grows_with_tensor_parallelism(tp, gib):
    assert vllm_engine.shm_size_gib(tp) == gib


def test_resources_take_the_node_share_of_the_gpus():
    # p5.48xlarge: 192 vCPU, 2048 GiB, 8 GPUs; TP4 takes half, less 10 % for the node's own needs.
    assert vllm_engine.pod_resources(192, 2048, 8, 4) == {
        "requests": {"cpu": "86", "memory": "921Gi", "nvidia.com/gpu": "4"},
        "limits": {"memory": "921Gi", "nvidia.com/gpu": "4"},
    }


def test_weights_volume_holds_two_revisions():
    assert vllm_engine.weights_volume_gib(141_107_412_992) == 290  # Llama 3.1 70B BF16


def test_revisions_stage_into_their_own_directories():
    assert vllm_engine.staged_model_path("org/m", "abc") == "/models/org/m/abc"
    assert vllm_engine.staged_tokenizer_path("org/m", "def") == "/models/org/m/tokenizer-def"
