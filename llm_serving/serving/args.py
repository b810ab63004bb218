"""What a stack says about each model it serves, the way its users think of it: the Hugging Face model and its
pinned revisions, the context it must serve, its latency objectives and replicas, the engine knobs worth
setting, its route and its scaling. The planner derives the rest (tensor parallelism, KV room, probes,
drains, rollout). Shapes and ranges only; relations are the stack's rules (llm_serving.stack.rules).

Length: every section of a model's args (image, architecture, route, scaling, storage, KV tier, LoRA adapters) is
declared here, so the configuration reference and the package schema read one model from one module."""

import re
from enum import StrEnum
from typing import Any

from pydantic import Field, field_validator, model_validator

from llm_serving.platform import versions
from llm_serving.platform.args import (
    DNS_LABEL,
    HOSTNAME,
    IMAGE_DIGEST,
    IMAGE_TAG,
    PATH_PREFIX,
    Constraint,
    args_type,
    check_each,
    pydantic_core_error,
)

from .capacity import DEFAULT_MAX_NUM_SEQS

MODEL_ID: Constraint = {"pattern": r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$"}
REVISION: Constraint = {"pattern": r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,99}$"}
ENGINE_FLAG: Constraint = {"pattern": r"^--[a-z0-9][a-z0-9-]*(\.[a-z0-9-]+)*(=.*)?$"}


class WeightsFormat(StrEnum):
    """How a checkpoint's weights are stored on the Hub."""

    SAFETENSORS = "safetensors"
    PYTORCH = "pytorch"
    GGUF = "gguf"


class KvCacheDtype(StrEnum):
    """KV cache storage type; fp8 halves KV memory but needs evidence that quality holds."""

    AUTO = "auto"
    BFLOAT16 = "bfloat16"
    FP8 = "fp8"
    FP8_E4M3 = "fp8_e4m3"
    FP8_E5M2 = "fp8_e5m2"


@args_type
class VllmImageArgs:
    """The vLLM server image, pinned by tag and optionally by digest."""

    repository: str = versions.VLLM_IMAGE_REPOSITORY
    """Image repository."""
    tag: str = Field(default=versions.VLLM_IMAGE_TAG, **IMAGE_TAG)
    """Image tag; never `latest`."""
    digest: str | None = Field(default=None, **IMAGE_DIGEST)
    """Image digest (`sha256:...`); when set the image is pulled by digest."""
    efa_capable: bool = False
    """The image carries libfabric and aws-ofi-nccl, so NCCL can use EFA (the `vllm/vllm-openai` image does not; e.g.
    AWS's vLLM Deep Learning Container does). Multi-node models over EFA need it."""
    s3_streamer: bool | None = None
    """The image carries the Run:ai Model Streamer with its S3 backend (`runai-model-streamer[s3]`), which
    `weightsStorage.backend: s3` loads with. Unset: true for `vllm/vllm-openai` (its Dockerfile installs it), false
    for any other repository until you say so."""


class CompileCacheMode(StrEnum):
    """Whether replicas share one torch.compile cache per (model, revision, engine, layout, GPU)."""

    AUTO = "auto"
    SHARED = "shared"
    OFF = "off"


@args_type
class ModelArchitectureArgs:
    """Architecture facts for a model the built-in catalog does not know."""

    parameters_billion: float = Field(gt=0)
    """Total parameters, in billions."""
    num_layers: int = Field(ge=1)
    """Transformer layers holding a KV cache."""
    num_attention_heads: int = Field(ge=1)
    """Query heads."""
    num_kv_heads: int = Field(ge=1)
    """Key/value heads (GQA)."""
    head_dim: int = Field(ge=1)
    """Dimension of one attention head."""
    hidden_size: int = Field(ge=1)
    """Hidden size."""
    weight_gib: float = Field(gt=0)
    """Size of the checkpoint's weights, in GiB."""
    max_context_tokens: int = Field(ge=1)
    """Longest context the model supports, in tokens."""
    native_dtype: str = "bfloat16"
    """Storage type of the weights."""
    is_moe: bool = False
    """Whether the model is a mixture of experts."""


class RoutingMode(StrEnum):
    """How the gateway picks a replica: by the engine's state, or at random through the Service."""

    INFERENCE_POOL = "inferencePool"
    SERVICE = "service"


@args_type
class RouteArgs:
    """Where the edge publishes a model's OpenAI API (`<pathPrefix>/v1/...`)."""

    host: str | None = Field(default=None, **HOSTNAME)
    """Hostname; unset uses `edge.host`."""
    path_prefix: str = Field(default="/", **PATH_PREFIX)
    """Path prefix before `/v1`, e.g. `/` or `/llama-70b`."""
    max_stream_seconds: int | None = Field(default=None, ge=600, le=3600)
    """The longest a request may run at the edge, in seconds: the route's request timeout, and what every drain on the
    path (vLLM's shutdown timeout, grace periods, the endpoint picker, Envoy, the load balancer's deregistration
    delay) lets a running stream finish through a rollout, scale-down or node replacement; unset: `maxModelLen`
    tokens at `slo.itlP95Seconds` after `slo.ttftP95Seconds`, plus 10 %, within 600..3600 (the load balancers'
    longest deregistration delay)."""
    priority: int | None = Field(default=None, ge=-1000, le=1000)
    """InferenceObjective priority of all the model's requests (routing `inferencePool`): higher leaves the picker's
    overload queue first; negative marks them sheddable, refused first (429) while the pool is saturated; unset:
    none (priority 0)."""
    routing: RoutingMode | None = None
    """`inferencePool` (an endpoint picker scores replicas on prefix cache, queue and KV-cache usage) or `service` (the
    Service spreads requests at random); unset: `inferencePool` in gateway mode with an installed controller when
    the model can run more than one replica, else `service`."""


@args_type
class ScaleToZeroArgs:
    """An idle model gives its GPUs back: KEDA scales it to zero after `idleSeconds` without load, and the endpoint
    picker holds the first requests (instead of refusing them) while it wakes; its waiting requests wake it."""

    idle_seconds: int = Field(default=1800, ge=300, le=86400)
    """How long the model must go without a request before it scales to zero (KEDA's cooldownPeriod)."""
    wake_on_waiting: int = Field(default=1, ge=1, le=1000)
    """Requests held in the picker's queue that wake the model (KEDA's activation: more than this minus one)."""
    in_production: bool = False
    """Allow scale to zero in prod and staging, where a first request after an idle hour waits for the wake:
    refused there unless set."""


@args_type
class ModelScalingArgs:
    """How one model scales: queue depth first, KV-cache usage second, never CPU or GPU utilisation."""

    min_replicas: int | None = Field(default=None, ge=0, le=64)
    """Fewest replicas; unset: `replicas`. 0 (scale to zero) needs `scaleToZero`: at zero replicas no vLLM pod reports
    a queue, so the picker's queue of held requests wakes the model."""
    scale_to_zero: ScaleToZeroArgs | None = None
    """With `minReplicas: 0`: the idle time before zero and what wakes the model; unset: no scale to zero."""
    max_replicas: int | None = Field(default=None, ge=1, le=64)
    """Most replicas; unset: `replicas`."""
    waiting_per_replica_target: float = Field(default=5, gt=0, le=10000)
    """Waiting requests per replica the autoscaler aims for."""
    waiting_activation: float = Field(default=1, ge=0, le=10000)
    """Waiting requests at which the queue trigger becomes active."""
    kv_usage_target: float = Field(default=0.8, gt=0, le=1)
    """Mean KV-cache usage (0..1) across replicas the autoscaler aims for."""
    kv_usage_activation: float = Field(default=0.5, ge=0, le=1)
    """KV-cache usage that activates scaling."""
    scale_down_window_seconds: int | None = Field(default=None, ge=60, le=3600)
    """Load must stay low this long before a replica is removed (then one per 2 minutes); unset: the time to add a
    replica (a new GPU node, the image pull, the cold start and `minReadySeconds`; at least 300, at most 3600).
    Shorter than adding a replica takes is rejected: a burst would pay for a replica and lose it before it served."""
    scale_up_window_seconds: int = Field(default=0, ge=0, le=600)
    """Stabilization before scaling up; 0 reacts at once."""
    ttft_target_fraction: float = Field(default=0.8, gt=0, le=1)
    """Scale out when p95 time to first token passes this fraction of `slo.ttftP95Seconds`: the queue only grows once a
    replica is saturated, so latency would break the SLO before it."""


@args_type
class SloArgs:
    """Latency objectives the serving alerts check."""

    ttft_p95_seconds: float = Field(default=2.0, gt=0, le=600)
    """Time to first token, p95, in seconds."""
    itl_p95_seconds: float = Field(default=0.1, gt=0, le=60)
    """Inter-token latency, p95, in seconds."""


class AccessMode(StrEnum):
    """How the weights volume is shared: many replicas need ReadWriteMany (e.g. EFS)."""

    READ_WRITE_MANY = "ReadWriteMany"
    READ_WRITE_ONCE = "ReadWriteOnce"


@args_type
class ModelStorageArgs:
    """One model's weights claim on the stack's weights storage (`weightsStorage`)."""

    access_mode: AccessMode = AccessMode.READ_WRITE_MANY
    """ReadWriteMany lets every replica, on any node, mount the same weights. ReadWriteOnce (an EBS class under
    `existingStorageClass`) allows one replica, pinned to the node group's first zone."""
    size_gib: int | None = Field(default=None, ge=1, le=65536)
    """Claim size in GiB, required with `existingStorageClass` (EFS ignores it; FSx uses the file system's capacity).
    Size it for two revisions; never lower it for an existing claim: Kubernetes refuses."""


@args_type
class KvOffloadArgs:
    """A tier of the KV cache in host memory: blocks evicted from the GPUs stay there and a later request with the
    same prefix loads them instead of running its prefill again (vLLM's native offloading)."""

    size_gib: int | None = Field(default=None, ge=0, le=16384)
    """GiB of host memory per replica, summed over its TP ranks (vLLM `--kv-offloading-size`), held in the pod's
    `/dev/shm`; 0: no CPU tier; unset: the planner's size: none in dev, elsewhere half of the host memory the
    pod's share of the node leaves after the engine, `/dev/shm`'s transport and the S3 streamer."""


class LoraTargetModule(StrEnum):
    """A layer vLLM wraps for LoRA, by vLLM's packed module name (`--lora-target-modules`; vllm 0.33.0
    lora/model_manager.py matches these suffixes). The planner sizes the Llama-style decoder's four."""

    QKV_PROJ = "qkv_proj"
    """q_proj, k_proj and v_proj of PEFT, packed."""
    O_PROJ = "o_proj"
    """The attention output projection."""
    GATE_UP_PROJ = "gate_up_proj"
    """gate_proj and up_proj of PEFT, packed."""
    DOWN_PROJ = "down_proj"
    """The MLP's down projection."""


# `--max-lora-rank` choices in vLLM 0.33.0 (tests/fixtures/reference/vllm/0.33.0/flags.json; vllm/config/lora.py
# MaxLoRARanks).
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
HUB_COMMIT: Constraint = {"pattern": r"^[0-9a-f]{40}$"}


# S3's bucket naming rules (S3 user guide, bucketnamingrules.html): 3-63 lowercase letters, digits, dots and hyphens,
# beginning and ending with a letter or digit.
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
# A prefix of S3's "safe characters" (S3 user guide, object-keys.html, "Object key naming guidelines") without `*`:
# the prefix becomes the role's Resource ARN, where `*` and `?` are wildcards and `${...}` a policy variable (IAM user
# guide, reference_policies_elements_resource.html and reference_policies_variables.html), which would widen the grant.
_PREFIX = re.compile(r"^[A-Za-z0-9!_.'()/-]+$")
SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")


@args_type
class LoraS3SourceArgs:
    """An adapter's files under an S3 prefix, pinned by the SHA-256 of the prefix's `SHA256SUMS` manifest (the output
    of `sha256sum`: one `<sha256>  <path>` line per file). The staging Job reads the manifest, checks its digest, then
    downloads exactly the files it lists and checks each: the prefix holding anything else, missing a file, or a
    file with another digest fails the Job before the adapter's marker."""

    uri: str
    """The prefix, `s3://<bucket>/<prefix>/`, ending in `/` (so `.../sql-v2/` never also grants `.../sql-v2-old/`). The
    staging Job's role may read objects under it and list it, nothing else; a bucket of another account must grant
    that role in its bucket policy."""
    manifest_sha256: str
    """SHA-256 of the prefix's `SHA256SUMS` (`sha256sum SHA256SUMS`), 64 lowercase hex digits: what makes the adapter
    immutable. A manifest with another digest fails the staging Job; a new digest is a new staged directory and
    rolls the model's pods."""

    @field_validator("uri")
    @classmethod
    def _an_s3_prefix(cls, value: str) -> str:
        bucket, _, prefix = value.removeprefix("s3://").partition("/")
        if not value.startswith("s3://"):
            raise ValueError(f"uri {value!r} must be s3://<bucket>/<prefix>/")
        if not _BUCKET.match(bucket) or ".." in bucket:
            raise ValueError(f"bucket {bucket!r} is not an S3 bucket name (3-63 lowercase letters, digits, '.', '-')")
        if not prefix:
            raise ValueError(f"uri {value!r} names a whole bucket; name the adapter's own prefix, s3://{bucket}/<prefix>/")
        if not prefix.endswith("/"):
            raise ValueError(f"uri {value!r} must end with '/': without it the grant would cover every key beginning "
                             f"{prefix!r}")
        if not _PREFIX.match(prefix):
            raise ValueError(f"prefix {prefix!r} may hold letters, digits and !_.'()/- only ('*', '?' and '$' would be "
                             "IAM wildcards or variables in the role's grant)")
        if any(part in ("", ".", "..") for part in prefix[:-1].split("/")):
            raise ValueError(f"prefix {prefix!r} has an empty, '.' or '..' segment")
        return value

    @field_validator("manifest_sha256")
    @classmethod
    def _a_sha256(cls, value: str) -> str:
        if not SHA256_HEX.match(value):
            raise ValueError("manifestSha256 must be 64 lowercase hex digits, as `sha256sum SHA256SUMS` prints them")
        return value

    @property
    def bucket(self) -> str:
        return self.uri.removeprefix("s3://").partition("/")[0]

    @property
    def prefix(self) -> str:
        return self.uri.removeprefix("s3://").partition("/")[2]


@args_type
class LoraAdapterArgs:
    """One LoRA adapter from one source: a PEFT repository on the Hugging Face Hub at a pinned commit (`modelId` with
    `revision`), or an S3 prefix pinned by its manifest's SHA-256 (`s3`). The staging Job stages it beside the weights
    (every file checked against the Hub's record or the manifest, `adapter_config.json` checked against the model,
    before the adapter's completion marker) and vLLM serves it under its own name."""

    name: str = Field(**DNS_LABEL)
    """The served name clients put in the request's `model` (vLLM `--lora-modules` name)."""
    model_id: str | None = Field(default=None, **MODEL_ID)
    """Hugging Face repository of the adapter, e.g. `org/llama-3.1-8b-sql-lora`, with `revision`; unset: the adapter
    comes from `s3`."""
    revision: str | None = Field(default=None, **HUB_COMMIT)
    """The adapter's 40-character commit, with `modelId`: a tag or branch could change what is served under the same
    name; unset: the adapter comes from `s3`."""
    s3: LoraS3SourceArgs | None = None
    """The adapter's S3 prefix and its manifest's digest, instead of `modelId` and `revision`; unset: the adapter comes
    from the Hub."""

    @model_validator(mode="after")
    def _one_source(self) -> "LoraAdapterArgs":
        hub = self.model_id is not None or self.revision is not None
        if self.s3 is not None and hub:
            raise ValueError(f"adapter {self.name} names two sources: modelId with revision (the Hub) or s3 (an S3 "
                             "prefix), not both")
        if self.s3 is None and not hub:
            raise ValueError(f"adapter {self.name} names no source: modelId with revision (a Hub repository at a "
                             "commit) or s3 (a prefix with its manifest's SHA-256)")
        if self.s3 is None and self.revision is None:
            raise ValueError(f"adapter {self.name}: modelId needs revision, the repository's 40-character commit")
        if self.s3 is None and self.model_id is None:
            raise ValueError(f"adapter {self.name}: revision needs modelId, the Hub repository it is a commit of")
        return self


@args_type
class LoraAliasTargetArgs:
    """One adapter behind an alias, with its share of the alias's requests."""

    adapter: str = Field(**DNS_LABEL)
    """An adapter of this model (`lora.adapters[].name`)."""
    weight: int | None = Field(default=None, ge=1, le=1000000)
    """Relative share of the alias's requests (InferenceModelRewrite target weight, 1..1000000); unset on every
    target of the alias: uniform. Set on some targets only is refused (the picker would never choose the others)."""


@args_type
class LoraAliasArgs:
    """A name clients call that the endpoint picker rewrites to one of several adapters, by weight: one alias,
    two adapter versions behind it, for a rollout (llm-d-router's InferenceModelRewrite)."""

    name: str = Field(**DNS_LABEL)
    """The served name clients put in the request's `model`."""
    targets: list[LoraAliasTargetArgs] = Field(min_length=1)
    """The adapters the alias's requests go to."""


@args_type
class LoraArgs:
    """LoRA adapters served on top of the model by vLLM (`--enable-lora`, static `--lora-modules`; the runtime
    load/unload endpoints stay off). Their GPU buffers come out of the KV cache's room, and the plan shows both."""

    adapters: list[LoraAdapterArgs] = Field(min_length=1)
    """The adapters, each loaded at start-up (a start fails if one cannot load)."""
    max_loras: int = Field(default=1, ge=1, le=64)
    """`--max-loras`: adapters one batch can use at once; vLLM preallocates GPU buffers for this many at
    `maxLoraRank` (default 1, vLLM's own)."""
    max_lora_rank: int = 16
    """`--max-lora-rank`: one of 1, 8, 16, 32, 64, 128, 256, 320, 512 (default 16, vLLM's own); an adapter whose
    rank (`r`, or its largest `rank_pattern`) is higher is refused by the staging Job."""
    max_cpu_loras: int | None = Field(default=None, ge=1, le=1024)
    """`--max-cpu-loras`: adapters kept in the pod's pinned host memory; at least `maxLoras`; unset: `maxLoras`
    (vLLM's default)."""
    target_modules: list[LoraTargetModule] | None = None
    """`--lora-target-modules`: the only layers vLLM wraps for LoRA and allocates buffers for, which narrows GPU
    memory; unset: all four, and the embedding and lm_head too where the architecture lists them (vLLM wraps every
    supported module without the flag; the planner counts the embedding and lm_head for every model)."""
    aliases: list[LoraAliasArgs] = Field(default_factory=list)
    """Names that split requests over adapters by weight (routing `inferencePool` only); none by default."""

    @field_validator("max_lora_rank")
    @classmethod
    def _a_vllm_rank(cls, value: int) -> int:
        if value not in LORA_RANKS:
            raise ValueError(f"maxLoraRank must be one of {', '.join(map(str, LORA_RANKS))} (vLLM 0.33.0)")
        return value


# At most two revisions run side by side: the one serving and the one proving itself (issue #41).
MAX_REVISIONS = 2


@args_type
class RevisionArgs:
    """One revision of a model running beside another, with its own workload, Service, weights, scaling object and
    (routing `inferencePool`) InferencePool and endpoint picker, and its share of the model's route. Each field left
    unset is the model's own."""

    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]{0,14}[a-z0-9])?$", max_length=16)
    """The revision's name, e.g. `stable` or `canary`: the value of the `x-llm-serving-revision` header that reaches it
    directly. The first revision runs as the model's own objects (their names unchanged); the second one's objects
    are named `<model>-<name>`, so the name must not be one of the suffixes the program derives (`epp`, `weights`,
    `compile`, `stage`, `verify`, ...). Its vLLM also answers to `<model>-<name>` in a request's `model`, but only a
    request with the header reaches it for sure: the weighted split cannot read the body, and the first revision
    answers that name with a 404."""
    weight: int = Field(ge=0, le=100)
    """Percent of the route's requests this revision gets; the revisions' weights sum to 100. 0 keeps it running and
    reachable only through its header, and a second revision's deploy gate then loads it at its own planned
    concurrency, held to the objectives; above 0 the gate loads it no more than an in-place update's gate does."""
    revision: str | None = Field(default=None, **REVISION)
    """Model revision (a second one is staged by its own Job beside the first); unset: the model's `revision`."""
    tokenizer_revision: str | None = Field(default=None, **REVISION)
    """Tokenizer revision; unset: the model's `tokenizerRevision`."""
    image: VllmImageArgs | None = None
    """The vLLM image, whole (a key left out takes the image's default, not the model's); unset: the model's
    `image`."""
    quantization: str | None = Field(default=None, pattern=r"^[a-z0-9_-]+$")
    """`--quantization`; unset: the model's `quantization`."""
    kv_cache_dtype: KvCacheDtype | None = None
    """`--kv-cache-dtype`; unset: the model's `kvCacheDtype`."""
    extra_args: list[str] | None = None
    """Other `vllm serve` flags, instead of the model's `extraArgs` (not added to them); unset: the model's."""

    @field_validator("extra_args")
    @classmethod
    def _flags(cls, value: list[str] | None) -> list[str] | None:
        for flag in value or []:
            if not re.fullmatch(ENGINE_FLAG["pattern"], flag):
                raise pydantic_core_error(f"item {flag!r} is not valid", ENGINE_FLAG["pattern"])
        return value


class EvalDataFormat(StrEnum):
    """How a task's data files are read: the packaged builder of Hugging Face `datasets` the harness loads them with."""

    PARQUET = "parquet"
    JSON = "json"
    """JSON Lines (one document per line) or a JSON array."""
    CSV = "csv"


@args_type
class EvalFileArgs:
    """One data file of a task, from a Hugging Face dataset repository at a pinned commit."""

    split: str = Field(pattern=r"^[a-z][a-z0-9_]{0,31}$")
    """The split the file holds, as the task names it: `test` (scored), and `train` or `validation` when the task
    draws few-shot examples from one (lm-evaluation-harness task YAML `test_split`, `fewshot_split`)."""
    path: str = Field(pattern=r"^[A-Za-z0-9_][A-Za-z0-9._/=-]{0,199}$")
    """The file's path in the repository, e.g. `main/test-00000-of-00001.parquet`."""
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    """SHA-256 of the file (64 lowercase hex digits, `sha256sum <file>`; the Hub shows it on an LFS file's page): the
    staging Job refuses a file with another digest, so the scored samples cannot change under the gate."""

    @model_validator(mode="after")
    def _no_parent(self) -> "EvalFileArgs":
        if any(part in ("", ".", "..") for part in self.path.split("/")):
            raise ValueError(f"path {self.path!r} has an empty, '.' or '..' segment")
        return self


@args_type
class EvalTaskArgs:
    """One task of the accuracy gate: an lm-evaluation-harness task (generate_until: the Job holds no tokenizer, so
    tasks scored by loglikelihood are refused by the harness run) whose data come from pinned files staged on the
    weights volume instead of the Hub at run time."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_.-]{0,63}$")
    """The harness's task name, e.g. `gsm8k` (lm-evaluation-harness 0.4.13, lm_eval/tasks/)."""
    dataset: str = Field(**MODEL_ID)
    """The Hugging Face dataset repository holding the files, e.g. `openai/gsm8k`."""
    revision: str = Field(**HUB_COMMIT)
    """The dataset repository's commit (40 hex digits): the files are read at it."""
    format: EvalDataFormat = EvalDataFormat.PARQUET
    """How the files are read (`parquet`, `json`, `csv`)."""
    files: list[EvalFileArgs] = Field(min_length=1, max_length=4)
    """The task's files, one per split, a `test` split among them."""
    metric: str = Field(default="exact_match", pattern=r"^[a-z0-9_]{1,64}$")
    """The harness metric compared (a key of the task's `metric_list`)."""
    filter: str = Field(default="none", pattern=r"^[a-z0-9_-]{1,64}$")
    """The task's filter whose score is compared (its `filter_list` name, e.g. gsm8k's `strict-match`); `none` for a
    task without filters."""
    num_fewshot: int | None = Field(default=None, ge=0, le=32)
    """Few-shot examples per prompt; unset: the task's own (gsm8k: 5, drawn from its `train` file)."""
    min_score: float | None = Field(default=None, ge=0, le=1)
    """The lowest score (0-1) any revision may have; unset: no floor. A model that runs one revision is compared with
    nothing else, so its prod eval needs a floor on every task."""

    @model_validator(mode="after")
    def _a_test_split(self) -> "EvalTaskArgs":
        splits = [f.split for f in self.files]
        if "test" not in splits:
            raise ValueError(f"files name splits {splits}; the scored one, `test`, is missing")
        if len(set(splits)) != len(splits):
            raise ValueError(f"files name a split twice: {splits}")
        return self


@args_type
class EvalArgs:
    """The accuracy gate (docs/verification.md, "The accuracy gate"): an eval Job runs lm-evaluation-harness over a
    pinned task set against the revision under test and, with two revisions, against the other one, on the same
    samples, and fails the `up` (as the deploy gate does, `verification.mode`) when a score drops more than allowed
    or falls below its floor. The task files and the harness's wheels are staged on the weights volume first."""

    tasks: list[EvalTaskArgs] = Field(min_length=1, max_length=8)
    """The task set."""
    limit: int = Field(default=200, ge=1, le=100000)
    """Samples per task: the first `limit` of its test split, the same for both revisions."""
    max_drop_points: float = Field(default=2.0, ge=0, le=100)
    """How far (in percentage points) the revision under test may score below the other revision on any task."""
    concurrency: int = Field(default=8, ge=1, le=256)
    """Requests at once against each revision. Against pods that serve users, at most one replica's spare batch (as
    the deploy gate), and one request at a time when there is none."""


@args_type
class ModelArgs:
    """One served model: its pinned artifacts, engine settings and replicas."""

    name: str = Field(**DNS_LABEL)
    """Name of the model's Kubernetes objects and its served model name."""
    model_id: str = Field(**MODEL_ID)
    """Hugging Face repository, e.g. `meta-llama/Llama-3.1-70B-Instruct`."""
    revision: str = Field(**REVISION)
    """Model revision; a 40-character commit SHA in prod and staging."""
    tokenizer_revision: str | None = Field(default=None, **REVISION)
    """Tokenizer revision when it differs from the model's; a commit SHA in prod."""
    architecture: ModelArchitectureArgs | None = None
    """Architecture facts for a model missing from the catalog; required only then."""
    replicas: int = Field(default=1, ge=1, le=64)
    """Serving replicas (pods), each one TP group."""
    max_model_len: int = Field(ge=256, le=10000000)
    """`--max-model-len` in tokens: what the product needs, no default."""
    gpu_memory_utilization: float = Field(default=0.92, gt=0, le=0.98)
    """`--gpu-memory-utilization`: fraction of GPU memory for vLLM."""
    tensor_parallel_size: int | None = Field(default=None, ge=1, le=64)
    """`--tensor-parallel-size`: 1, 2, 4 or 8; unset (or `auto` in a stack file): the smallest that leaves KV room."""

    @field_validator("tensor_parallel_size", mode="before")
    @classmethod
    def _auto_is_unset(cls, value: Any) -> Any:
        # Stack files have always spelled the planner's choice `auto`.
        return None if value == "auto" else value
    pipeline_parallel_size: int = Field(default=1, ge=1, le=16)
    """`--pipeline-parallel-size`: above 1, each replica is a LeaderWorkerSet group of this many nodes, TP = the node's
    GPUs within each (for a model larger than one node)."""
    target_concurrency: int = Field(default=1, ge=1, le=100000)
    """Requests at max-model-len the KV cache must hold (for `auto`)."""
    kv_cache_dtype: KvCacheDtype = KvCacheDtype.AUTO
    """`--kv-cache-dtype`."""
    kv_offload: KvOffloadArgs = Field(default_factory=KvOffloadArgs)
    """A CPU tier of the KV cache (`--kv-offloading-size`, native backend)."""
    weights_format: WeightsFormat = WeightsFormat.SAFETENSORS
    """How the checkpoint's weights are stored on the Hub: `safetensors` (what the staging Job fetches and the Run:ai
    Model Streamer reads), `pytorch` (.bin/.pt) or `gguf`; weightsStorage.backend s3 needs safetensors."""
    quantization: str | None = Field(default=None, pattern=r"^[a-z0-9_-]+$")
    """`--quantization`; unset lets vLLM read the checkpoint's own config."""
    max_num_seqs: int = Field(default=DEFAULT_MAX_NUM_SEQS, ge=1, le=65536)
    """`--max-num-seqs`, set explicitly."""
    max_num_batched_tokens: int = Field(default=8192, ge=256, le=1048576)
    """`--max-num-batched-tokens`, set explicitly."""
    enable_prefix_caching: bool = True
    """`--enable-prefix-caching` (or disable)."""
    chat_template: str | None = None
    """Jinja chat template, mounted from a ConfigMap; unset uses the tokenizer's."""
    shutdown_timeout_seconds: int | None = Field(default=None, ge=1, le=3600)
    """`--shutdown-timeout`: seconds vLLM lets in-flight requests finish on SIGTERM; unset: the route's stream bound
    (`route.maxStreamSeconds`). Shorter than the bound is refused: it would cut streams."""
    extra_args: list[str] = Field(default_factory=list)
    """Other `vllm serve` flags as `--flag` or `--flag=value`; flags set by keys above are refused."""
    storage: ModelStorageArgs = Field(default_factory=ModelStorageArgs)
    """The pre-staged weights volume."""
    allow_workload_replacement: bool = False
    """Let the next `up` delete or replace this model's serving workload. In prod and staging the Deployment (or
    LeaderWorkerSet) is protected: a change that replaces it (its selector, a rename) deletes it before creating the
    new one, every replica drains and then cold-starts, a full outage; removing the model deletes it. The preview
    refuses either until this is set for the model by name; set it, preview, up, then unset it."""
    compile_cache: CompileCacheMode = CompileCacheMode.AUTO
    """`shared`: one Job compiles the model once per (revision, image, layout, GPU, engine flags) into the model's own
    cache (EFS: its own access point and claim; S3: the prefix `compile-cache/<name>/`; FSx or an existing class: the
    weights claim) and every later replica copies it, each file checked against the producer's SHA-256 manifest,
    instead of compiling (a mismatch copies nothing: the pod compiles); `auto`:
    shared where the key is pinned, the producer may write the storage and the node group has room for the producer
    beside the rollout, else off; `off`: every pod compiles."""
    cache_volume_gib: int = Field(default=20, ge=1, le=1000)
    """Per-pod disk emptyDir for HOME and the compile, kernel and Hub caches (the root filesystem is read-only)."""
    tmp_volume_gib: int = Field(default=8, ge=1, le=1000)
    """Per-pod disk emptyDir mounted at /tmp."""
    image: VllmImageArgs = Field(default_factory=VllmImageArgs)
    """The vLLM image."""
    route: RouteArgs = Field(default_factory=RouteArgs)
    """How the edge publishes the model."""
    autoscaling: ModelScalingArgs = Field(default_factory=ModelScalingArgs)
    """Replica bounds and scaling targets."""
    slo: SloArgs = Field(default_factory=SloArgs)
    """Latency SLOs for the serving alerts."""
    lora: LoraArgs | None = None
    """LoRA adapters on this model, and aliases over them; unset: none (vLLM starts without LoRA)."""
    eval: EvalArgs | None = None
    """The accuracy gate over a pinned task set; unset: none. Prod requires it for fp8 KV, quantization, and a second
    revision that changes the weights, quantization or KV dtype."""
    revisions: list[RevisionArgs] = Field(default_factory=list, max_length=MAX_REVISIONS)
    """Two revisions side by side behind the model's route, split by weight (edge mode gateway, routing perModel),
    e.g. `[{name: stable, weight: 90}, {name: canary, weight: 10, revision: <sha>}]`; each revision's unset fields are
    the model's. Empty (the default): the model runs one revision, from its own fields."""
    _check_extra_args = check_each("extra_args", ENGINE_FLAG)

    def served_names(self) -> list[str]:
        """Every name a request's `model` may carry for this model: its own, its adapters' and its aliases'."""
        if self.lora is None:
            return [self.name]
        return [self.name, *(a.name for a in self.lora.adapters), *(a.name for a in self.lora.aliases)]


@args_type
class ServingArgs:
    """Where the models run."""

    namespace: str = Field(default="llm-serving", **DNS_LABEL)
    """Namespace of the vLLM workloads."""
