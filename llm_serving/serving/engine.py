"""vLLM engine arguments, probe budgets, drain timings and pod sizing (pure, no Pulumi import).

Everything a vLLM pod's spec is computed from, as plain functions a table test can check: the
`vllm serve` arguments, the seed's probe rules, graceful drain, and resources from the node share.

Length: the settings a model's args give (`model_settings`) and the flags they become (`engine_args`) stay in
one module, so a new engine option is a field in args.py and its field, reading and flag here.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field

from .args import LoraAdapterArgs, LoraArgs, ModelArgs

PORT = 8000
MODELS_MOUNT = "/models"  # the weights volume, read-only in serving pods
# A per-pod disk emptyDir: HOME and every cache vLLM, PyTorch, Triton, FlashInfer and Hugging Face
# write (the root filesystem is read-only). Per pod, so replicas never write one compile cache at once.
CACHE_MOUNT = "/var/cache/vllm"
TMP_MOUNT = "/tmp"
CHAT_TEMPLATE_PATH = "/etc/vllm/chat-template.jinja"
COMPLETE_MARKER = ".llm-serving-complete"  # written last by the pre-staging Job

# Flags the typed settings own; the escape hatch may not set them a second time (vLLM would take
# the last one silently, so a stray extra arg could undo a reviewed setting).
MANAGED_FLAGS = frozenset(
    {
        "--model", "--served-model-name", "--max-model-len", "--gpu-memory-utilization",
        "--tensor-parallel-size", "-tp", "--kv-cache-dtype", "--quantization", "-q", "--max-num-seqs",
        "--max-num-batched-tokens", "--enable-prefix-caching", "--no-enable-prefix-caching",
        "--disable-prefix-caching", "--chat-template", "--tokenizer", "--port", "--host", "--api-key",
        "--shutdown-timeout", "--sse-keep-alive-interval", "--kv-offloading-size", "--kv-offloading-backend",
        "--revision", "--tokenizer-revision", "--download-dir",
        "--load-format", "--model-loader-extra-config",
        "--pipeline-parallel-size", "-pp", "--nnodes", "-n", "--node-rank", "-r", "--master-addr",
        "--master-port", "--headless", "--distributed-executor-backend",
        # models[].lora (lora.py): the adapters' flags.
        "--enable-lora", "--no-enable-lora", "--disable-lora", "--max-loras", "--max-lora-rank", "--max-cpu-loras",
        "--lora-target-modules", "--lora-modules",
    }
)
# `--quantization` methods vLLM 0.33.0 accepts (its flag list's post-parse known values; a test
# compares this with the pinned flag list): `plan` refuses anything else instead of planning it.
VLLM_QUANTIZATION_METHODS = tuple(
    (
        "auto_awq",
        "auto_gptq",
        "awq",
        "awq_marlin",
        "compressed-tensors",
        "deepseek_v4_fp8",
        "experts_int8",
        "fbgemm_fp8",
        "fp8",
        "fp8_per_block",
        "fp8_per_channel",
        "fp8_per_tensor",
        "fp_quant",
        "gpt_oss_mxfp4",
        "gptq",
        "gptq_marlin",
        "humming",
        "inc",
        "int8_per_channel_weight_only",
        "modelopt",
        "modelopt_fp4",
        "modelopt_mixed",
        "modelopt_mxfp8",
        "moe_wna16",
        "mxfp4",
        "mxfp8",
        "nvfp4_per_token",
        "online",
        "quark",
        "torchao",
    )
)
# `--block-size` values: the pinned flag list declares an int with no choices, and vLLM's CacheConfig
# has long typed it as BlockSize = Literal[1, 8, 16, 32, 64, 128] (256 for MLA backends); the
# planner counts KV in whole blocks, so a size outside these plans a cache vLLM would not build.
VLLM_BLOCK_SIZES = (1, 8, 16, 32, 64, 128, 256)
# vLLM 0.33.0 `--sse-keep-alive-interval` (serve-flags.json: "Send an SSE keep-alive comment line every
# this many seconds when a ... streaming response is idle (queued, prefill, or between tokens)"; the
# default 0 sends none). Far below every idle timeout on the path (timing.edge_relations checks it).
SSE_KEEP_ALIVE_SECONDS = 15
# torch.distributed's rendezvous port on the leader (vLLM's --master-port default, serve-flags 0.33.0).
MASTER_PORT = 29501


@dataclass(frozen=True)
class EngineSettings:
    """The typed settings `vllm serve` is started with."""

    model_path: str
    served_model_name: str
    max_model_len: int
    gpu_memory_utilization: float
    tensor_parallel_size: int
    kv_cache_dtype: str
    max_num_seqs: int
    max_num_batched_tokens: int
    enable_prefix_caching: bool
    shutdown_timeout_seconds: int
    quantization: str | None = None
    pipeline_parallel_size: int = 1  # > 1: stages on whole nodes, one LeaderWorkerSet group per replica
    tokenizer_path: str | None = None
    chat_template_path: str | None = None
    extra_args: tuple[str, ...] = field(default_factory=tuple)
    # S3 backend: `runai_streamer` with the streamer's settings as JSON (streamer_extra_config); None: the
    # default loader reads the staged files from the weights volume.
    load_format: str | None = None
    model_loader_extra_config: str | None = None
    # A CPU tier of the KV cache, GiB summed over the ranks (native offloading; 0: none): /dev/shm grows by it.
    kv_offloading_gib: int = 0
    # The LoRA adapters' flags (lora_args); () : no LoRA. Out of the repr, which names what a verification Job
    # checked (stack.py `deployed`): that names them itself when there are any, so a stack without adapters keeps
    # its verification Job.
    lora_args: tuple[str, ...] = field(default=(), repr=False)
    # Further names requests may carry in `model`, after served_model_name, the one vLLM's responses and its metrics'
    # `model_name` label carry (vLLM 0.33.0 `--served-model-name`: "The model name in the model field of a response
    # will be the first name in this list ... metrics tag will take the first one"). Out of the repr, like lora_args: a
    # stack without revisions keeps its verification Jobs' names.
    also_served_as: tuple[str, ...] = field(default=(), repr=False)


# The chat template's digest on the pod template: its ConfigMap keeps its name and is mounted with subPath, which a
# running container never sees updated (Kubernetes docs, ConfigMaps: "A container using a ConfigMap as a subPath
# volume mount will not receive ConfigMap updates"), so without it a new template would reach only new pods.
CHAT_TEMPLATE_ANNOTATION = "llm-serving/chat-template-sha256"


def chat_template_annotation(chat_template: str | None) -> dict[str, str]:
    """The pod-template annotation that rolls the pods when the chat template changes; none without one."""
    if chat_template is None:
        return {}
    return {CHAT_TEMPLATE_ANNOTATION: hashlib.sha256(chat_template.encode()).hexdigest()}


def model_settings(model: ModelArgs, *, tensor_parallel_size: int, pipeline_parallel_size: int,
                   shutdown_timeout_seconds: int, tokenizer_revision: str | None = None,
                   load_format: str | None = None, model_loader_extra_config: str | None = None,
                   kv_offloading_gib: int = 0) -> EngineSettings:
    """The model's engine settings: its own knobs as the user set them (a new `vllm serve` option is a ModelArgs
    field read here and a flag in `engine_args`), and what the stack derives (the plan's TP and PP, the drain
    from the stream bound, the tokenizer's revision, the S3 streamer) as arguments."""
    return EngineSettings(
        model_path=staged_model_path(model.model_id, model.revision),
        served_model_name=model.name,
        max_model_len=model.max_model_len,
        gpu_memory_utilization=model.gpu_memory_utilization,
        tensor_parallel_size=tensor_parallel_size,
        pipeline_parallel_size=pipeline_parallel_size,
        kv_cache_dtype=model.kv_cache_dtype.value,
        max_num_seqs=model.max_num_seqs,
        max_num_batched_tokens=model.max_num_batched_tokens,
        enable_prefix_caching=model.enable_prefix_caching,
        shutdown_timeout_seconds=shutdown_timeout_seconds,
        quantization=model.quantization,
        tokenizer_path=staged_tokenizer_path(model.model_id, tokenizer_revision) if tokenizer_revision else None,
        chat_template_path=CHAT_TEMPLATE_PATH if model.chat_template is not None else None,
        extra_args=tuple(model.extra_args),
        load_format=load_format,
        model_loader_extra_config=model_loader_extra_config,
        kv_offloading_gib=kv_offloading_gib,
        lora_args=tuple(lora_args(model.lora, model.name)) if model.lora is not None else (),
    )


def staged_model_path(model_id: str, revision: str) -> str:
    """Where the pre-staging Job puts one revision: a new revision never overwrites the one serving."""
    return f"{MODELS_MOUNT}/{model_id}/{revision}"


def streamer_extra_config(concurrency: int, memory_limit_gib: int, *, distributed: bool = False) -> str:
    """`--model-loader-extra-config` for `--load-format runai_streamer` (vLLM's runai_model_streamer page:
    `concurrency`, the reader threads and for S3 the client connections; `memory_limit`, the CPU buffer
    the tensors pass through, in bytes).

    `distributed` (a pod of more than one rank, TP > 1): without it every rank of a pod streams every file
    whole and keeps its own slice (vllm 0.33.0 model_executor/model_loader/runai_streamer_loader.py:232-263 passes the
    full file list; runai-model-streamer 0.15.7-0.17.1 SafetensorsStreamer.stream_files reads every
    tensor of it), so a TP 8 pod reads the checkpoint 8 times. With it the ranks sharing a host split
    the files and broadcast what each read to the others over NCCL (runai-model-streamer
    distributed_streamer.py `create_local_distribution_group`, the default unless
    RUNAI_STREAMER_DIST_GLOBAL=1): each pod reads the checkpoint once. With pipeline parallelism vLLM
    keeps the whole file list on every rank (runai_streamer_loader.py:235-237), so each stage's pod
    still reads every file, not only its stage's (the planner counts that: capacity.plan)."""
    if concurrency < 1 or memory_limit_gib < 1:
        raise ValueError("streamer concurrency and memory limit must be positive")
    config: dict[str, object] = {"concurrency": concurrency, "memory_limit": memory_limit_gib * 1024**3}
    if distributed:
        config["distributed"] = True
    return json.dumps(config, separators=(",", ":"), sort_keys=True)


# LoRA adapters under the weights volume, beside the models: a dot directory, which no Hub repository id can begin
# with (args.MODEL_ID), so an adapter's directory never nests inside a model's (/models/<org>/<name>/<revision>).
ADAPTERS_DIR = f"{MODELS_MOUNT}/.lora"


# Adapters from S3, by their manifest's SHA-256: a dot directory again, so never a Hub repository's `<org>`.
S3_ADAPTERS_DIR = f"{ADAPTERS_DIR}/.s3"


def staged_adapter_path(adapter: LoraAdapterArgs) -> str:
    """One directory per adapter repository and revision, or per S3 manifest (its digest names the content: the
    same manifest is the same files, whichever prefix holds them): a new revision or manifest never overwrites the
    one serving, and changing it changes `--lora-modules`, which rolls the pods."""
    if adapter.s3 is not None:
        return f"{S3_ADAPTERS_DIR}/{adapter.s3.manifest_sha256}"
    return f"{ADAPTERS_DIR}/{adapter.model_id}/{adapter.revision}"


def max_cpu_loras(lora: LoraArgs) -> int:
    """`--max-cpu-loras`: as set, else `--max-loras` (vLLM 0.33.0 vllm/config/lora.py's default)."""
    return lora.max_cpu_loras if lora.max_cpu_loras is not None else lora.max_loras


def lora_args(lora: LoraArgs, served_model_name: str) -> list[str]:
    """The `vllm serve` flags of a model's adapters (vllm/entrypoints/common/cli_args.py, 0.33.0): each adapter
    one `--lora-modules` argument, a JSON object loaded at start from its staged path, with the model's served
    name as its parent in /v1/models (openai/models/protocol.py LoRAModulePath). The runtime load/unload
    endpoints stay unregistered: the pods set VLLM_ALLOW_RUNTIME_LORA_UPDATING=0 (deployment.py)."""
    args = ["--enable-lora", "--max-loras", str(lora.max_loras), "--max-lora-rank", str(lora.max_lora_rank),
            "--max-cpu-loras", str(max_cpu_loras(lora))]
    if lora.target_modules:
        args += ["--lora-target-modules", *(m.value for m in lora.target_modules)]
    args.append("--lora-modules")
    args += [json.dumps({"name": a.name, "path": staged_adapter_path(a), "base_model_name": served_model_name},
                        separators=(",", ":"), sort_keys=True) for a in lora.adapters]
    return args


# vllm 0.33.0 vllm/envs.py: 1 registers POST /v1/load_lora_adapter and /v1/unload_lora_adapter
# (entrypoints/serve/lora/api_router.py, "ONLY ... local development") and lets the LoRA resolvers load any
# adapter a request names. Said explicitly, 0, on every pod that serves adapters: those routes never exist, and
# the served adapters are exactly the reviewed, staged `--lora-modules`.
RUNTIME_LORA_UPDATING_ENV = "VLLM_ALLOW_RUNTIME_LORA_UPDATING"


def lora_env(s: EngineSettings) -> list[dict[str, str]]:
    """The serving container's LoRA environment: runtime adapter loading off (none without adapters)."""
    return [{"name": RUNTIME_LORA_UPDATING_ENV, "value": "0"}] if s.lora_args else []


def staged_tokenizer_path(model_id: str, tokenizer_revision: str) -> str:
    return f"{MODELS_MOUNT}/{model_id}/tokenizer-{tokenizer_revision}"


# vLLM's loader for safetensors streamed by the Run:ai Model Streamer (serve-flags 0.33.0 --load-format:
# "runai_streamer will load the Safetensors weights using Run:ai Model Streamer").
RUNAI_STREAMER = "runai_streamer"


def s3_model_prefix(model_id: str, revision: str) -> str:
    """Where one revision lives in the weights bucket (the same layout as on a volume, without /models)."""
    return f"{model_id}/{revision}/"


def s3_tokenizer_prefix(model_id: str, tokenizer_revision: str) -> str:
    return f"{model_id}/tokenizer-{tokenizer_revision}/"


def managed_flag_conflicts(extra_args: tuple[str, ...] | list[str]) -> list[str]:
    """Extra args that would override a typed setting."""
    return [arg for arg in extra_args if arg.split("=", 1)[0] in MANAGED_FLAGS]


def engine_args(s: EngineSettings) -> list[str]:
    """Container args for the `vllm/vllm-openai` image, whose entrypoint is `vllm serve`: the
    model first, then every flag that decides memory, concurrency and latency, set explicitly
    so an engine upgrade that changes a default cannot change behaviour unseen."""
    args = [
        s.model_path,
        "--served-model-name", s.served_model_name, *s.also_served_as,
        "--max-model-len", str(s.max_model_len),
        "--gpu-memory-utilization", f"{s.gpu_memory_utilization:g}",
        "--tensor-parallel-size", str(s.tensor_parallel_size),
        "--kv-cache-dtype", s.kv_cache_dtype,
        "--max-num-seqs", str(s.max_num_seqs),
        "--max-num-batched-tokens", str(s.max_num_batched_tokens),
        "--enable-prefix-caching" if s.enable_prefix_caching else "--no-enable-prefix-caching",
        "--port", str(PORT),
        # vLLM's default 0 aborts in-flight requests on SIGTERM, cutting every open stream during a
        # rollout (serve-flags.json 0.33.0: "0 = abort, >0 = wait"). The stream bound (timing.py).
        "--shutdown-timeout", str(s.shutdown_timeout_seconds),
        # A comment line while a stream waits in the queue, in prefill or between slow tokens, so no
        # idle timeout on the path (Envoy's stream idle, the NLB's 350 s) mistakes it for a dead one.
        "--sse-keep-alive-interval", str(SSE_KEEP_ALIVE_SECONDS),
    ]
    if s.pipeline_parallel_size > 1:
        args += ["--pipeline-parallel-size", str(s.pipeline_parallel_size)]
    if s.load_format:
        args += ["--load-format", s.load_format]
    if s.model_loader_extra_config:
        args += ["--model-loader-extra-config", s.model_loader_extra_config]
    if s.quantization:
        args += ["--quantization", s.quantization]
    if s.tokenizer_path:
        args += ["--tokenizer", s.tokenizer_path]
    if s.chat_template_path:
        args += ["--chat-template", s.chat_template_path]
    if s.kv_offloading_gib:
        # vLLM's own offloading connector (vllm/config/vllm.py turns these into an OffloadingConnector with
        # CPUOffloadingSpec); the size is GiB summed over the TP ranks (vllm/config/cache.py).
        args += ["--kv-offloading-size", str(s.kv_offloading_gib), "--kv-offloading-backend", "native"]
    args += list(s.lora_args)
    conflicts = managed_flag_conflicts(s.extra_args)
    if conflicts:
        raise ValueError(f"extra args override typed settings: {', '.join(conflicts)}")
    return args + list(s.extra_args)


def multinode_args(s: EngineSettings, leader: bool) -> list[str]:
    """What makes one pod of a LeaderWorkerSet group a rank of one multi-node engine.

    vLLM's own multiprocessing launcher (`--distributed-executor-backend mp` with --nnodes,
    --node-rank and --master-addr; serve-flags 0.33.0 and vLLM's multi-node docs), not Ray: no Ray
    head and worker processes or extra ports to run and secure, and one process tree per pod, so a
    rank that dies ends its pod and LeaderWorkerSet recreates the group. Kubernetes expands
    $(LWS_...) from the variables LeaderWorkerSet injects into every container. Workers run headless:
    no API server, the leader serves the OpenAI API for the group.
    """
    args = [
        "--distributed-executor-backend", "mp",
        "--nnodes", str(s.pipeline_parallel_size),
        "--node-rank", "0" if leader else "$(LWS_WORKER_INDEX)",
        "--master-addr", "$(LWS_LEADER_ADDRESS)",
        "--master-port", str(MASTER_PORT),
    ]
    return args if leader else [*args, "--headless"]


@dataclass(frozen=True)
class Probes:
    """Probe settings (seconds) per the seed's rules."""

    startup_period_seconds: int
    startup_failure_threshold: int
    readiness_period_seconds: int
    readiness_failure_threshold: int
    readiness_timeout_seconds: int
    liveness_period_seconds: int
    liveness_failure_threshold: int
    liveness_timeout_seconds: int

    @property
    def startup_budget_seconds(self) -> int:
        return self.startup_period_seconds * self.startup_failure_threshold

    @property
    def liveness_window_seconds(self) -> int:
        return self.liveness_period_seconds * self.liveness_failure_threshold


def probes(startup_budget_seconds: int) -> Probes:
    """Startup: the planner's budget, so a slow weight load is never mistaken for a crash (the most
    common complaint about existing charts). Readiness: /health answers only once weights are
    loaded and CUDA graphs captured (the server starts listening after warm-up); a 10 s timeout and a
    50 s window, because a saturated engine answers /health slowly and a pod marked unready under load
    leaves the Service and the InferencePool, shifting its load onto the others (llm-d/llm-d-benchmark
    PR #1734: 3 x 5 s with a 1 s timeout unreadied saturated vLLM pods; it moved to a 50 s window).
    Liveness: lenient, a 10 s timeout and a 90 s window, longer than readiness, because an engine at
    full load answers health checks slowly and killing it turns a spike into an outage."""
    period = 10
    return Probes(
        startup_period_seconds=period,
        startup_failure_threshold=math.ceil(startup_budget_seconds / period),
        readiness_period_seconds=10,
        readiness_failure_threshold=5,
        readiness_timeout_seconds=10,
        liveness_period_seconds=15,
        liveness_failure_threshold=6,
        liveness_timeout_seconds=10,
    )


# Endpoint removal reaches kube-proxy and gateways a few seconds after a pod starts terminating;
# sleeping first keeps the pod serving until no new request can be routed to it.
PRE_STOP_SECONDS = 15
# Time for the process to exit after the shutdown timeout (engine core teardown, NCCL).
EXIT_MARGIN_SECONDS = 30


def termination_grace_seconds(shutdown_timeout_seconds: int) -> int:
    """Longer than preStop plus vLLM's own shutdown timeout, so SIGKILL never cuts a drain short."""
    return PRE_STOP_SECONDS + shutdown_timeout_seconds + EXIT_MARGIN_SECONDS


def shm_size_gib(tensor_parallel_size: int) -> int:
    """/dev/shm for the TP workers' shared-memory transport: the 64 MiB default crashes TP > 1 with
    a bus error (vllm-project/production-stack PR #994); the seed gives 16 GiB to a TP4 pod."""
    return max(2, 4 * tensor_parallel_size)


def _node_share(node_gpus: int, tensor_parallel_size: int) -> float:
    # The GPUs taken, less 10 % of the node for the kubelet, system reserve and GPU daemons.
    return tensor_parallel_size / node_gpus * 0.9


def pod_memory_gib(node_memory_gib: int, node_gpus: int, tensor_parallel_size: int) -> int:
    """A serving pod's memory request and limit, in GiB (pod_resources)."""
    return max(8, math.floor(node_memory_gib * _node_share(node_gpus, tensor_parallel_size)))


def pod_resources(node_vcpus: int, node_memory_gib: int, node_gpus: int, tensor_parallel_size: int) -> dict:
    """GPUs = TP; CPU and memory in proportion to the GPUs taken, less 10 % of the node for the
    kubelet, system reserve and GPU daemons, so two TP4 pods fit one 8-GPU node."""
    cpu = max(1, math.floor(node_vcpus * _node_share(node_gpus, tensor_parallel_size)))
    memory_gib = pod_memory_gib(node_memory_gib, node_gpus, tensor_parallel_size)
    return {
        "requests": {"cpu": str(cpu), "memory": f"{memory_gib}Gi", "nvidia.com/gpu": str(tensor_parallel_size)},
        "limits": {"memory": f"{memory_gib}Gi", "nvidia.com/gpu": str(tensor_parallel_size)},
    }


def weights_volume_gib(weight_bytes: int) -> int:
    """Room for two revisions plus 10 %: a new revision is staged beside the one still serving,
    and each revision is its own directory (old ones are pruned by hand)."""
    return max(10, math.ceil(weight_bytes * 2.2 / 1024**3))


# Non-root identity of every pod of ours (restricted Pod Security Standard): the image's own `vllm`
# user, UID 2000 (vllm 0.33.0 docker/Dockerfile; docs/deployment/docker.md runs it as --user 2000).
# Its group is ours rather than the image's 0: HOME and every cache are redirected to our own
# volumes (writable_paths_env), so nothing needs the image's group-0-writable /home/vllm.
RUN_AS_UID = 2000
RUN_AS_GID = 2000


def pod_security_context() -> dict:
    """Pod-level part of the `restricted` profile: non-root, fixed IDs, RuntimeDefault seccomp.

    fsGroup makes the writable volumes group-owned by RUN_AS_GID; OnRootMismatch skips the recursive
    ownership walk once the volume root already has that group, so it never runs at every start.
    """
    return {
        "runAsNonRoot": True,
        "runAsUser": RUN_AS_UID,
        "runAsGroup": RUN_AS_GID,
        "fsGroup": RUN_AS_GID,
        "fsGroupChangePolicy": "OnRootMismatch",
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def container_security_context() -> dict:
    """Container-level part of the `restricted` profile, plus a read-only root filesystem."""
    return {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "privileged": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
    }


def writable_paths_env() -> list[dict[str, str]]:
    """Every directory the engine writes, under the per-pod cache volume or /tmp.

    With a read-only root filesystem each default under HOME (~/.cache, ~/.config, ~/.triton,
    ~/.nv) or the temp dir must land on a writable volume. Sources, vllm 0.33.0: envs.py (XDG-based
    cache and config roots; VLLM_ASSETS_CACHE follows XDG, not VLLM_CACHE_ROOT; VLLM_RPC_BASE_PATH
    is the temp dir), compilation/compiler_interface.py (Inductor cache), flashinfer jit/env.py
    (FLASHINFER_WORKSPACE_BASE), triton knobs.py (TRITON_HOME); vllm#10185 and kserve#5666 for the
    numba/outlines caches and getpass.getuser() failing without USER for a UID absent from passwd.
    """
    cache = CACHE_MOUNT
    return [
        {"name": "HOME", "value": cache},
        {"name": "USER", "value": "vllm"},
        {"name": "LOGNAME", "value": "vllm"},
        {"name": "TMPDIR", "value": TMP_MOUNT},
        {"name": "XDG_CACHE_HOME", "value": f"{cache}/.cache"},
        {"name": "XDG_CONFIG_HOME", "value": f"{cache}/.config"},
        {"name": "VLLM_CACHE_ROOT", "value": f"{cache}/vllm"},
        {"name": "VLLM_ASSETS_CACHE", "value": f"{cache}/vllm/assets"},
        {"name": "VLLM_CONFIG_ROOT", "value": f"{cache}/.config/vllm"},
        {"name": "VLLM_RPC_BASE_PATH", "value": TMP_MOUNT},
        {"name": "HF_HOME", "value": f"{cache}/.cache/huggingface"},
        {"name": "TORCHINDUCTOR_CACHE_DIR", "value": f"{cache}/torchinductor"},
        {"name": "TRITON_HOME", "value": cache},
        {"name": "FLASHINFER_WORKSPACE_BASE", "value": f"{cache}/flashinfer"},
        {"name": "CUDA_CACHE_PATH", "value": f"{cache}/.nv/ComputeCache"},
        {"name": "NUMBA_CACHE_DIR", "value": f"{TMP_MOUNT}/numba"},
        {"name": "OUTLINES_CACHE_DIR", "value": f"{TMP_MOUNT}/outlines"},
        {"name": "DO_NOT_TRACK", "value": "1"},
    ]
