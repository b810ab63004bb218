"""What the planners decide for a stack: instance facts, each model's capacity plan, replica bounds,
the GPUs a rollout can count on, each model's rollout strategy and scale-down window (pure).

llm_serving/stack/rules/ turns their failures into problems; ServingStack feeds their results to the
components. Both read the same functions, so a preview and a deploy can never disagree.

Length: every planner input a stack decides (instance, storage speed, image pre-pull, compile cache)
is resolved here once; the compile-cache state feeds the cold start, the footprint and the rollout,
so moving it out would make this module and its new neighbour import each other.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from llm_serving import gpu, platform, serving, storage
from llm_serving.cluster import SYSTEM_ROOT_VOLUME_GIB, ClusterMode, LoadBalancerControllerMode, disk_for_ephemeral_gib
from llm_serving.edge import ControllerMode, EdgeMode
from llm_serving.gpu import GpuNodesMode, ImagePrePull, NodeAutoscalingMode
from llm_serving.platform.args import Environment
from llm_serving.serving import AccessMode, CompileCacheMode, ModelArchitecture, ModelArgs, RoutingMode, lookup_model
from llm_serving.stack.args import ServingStackArgs
from llm_serving.stack.memo import per_config
from llm_serving.storage import StorageBackend

# Where each mode's controller conventionally runs: Envoy Gateway's quickstart namespace, the
# ALB controller's documented install namespace, and the ingress-nginx chart's usual namespace.
DEFAULT_EDGE_NAMESPACE = {
    EdgeMode.GATEWAY: "envoy-gateway-system",
    EdgeMode.ALB: "kube-system",
    EdgeMode.INGRESS_NGINX: "ingress-nginx",
}


def edge_namespace(config: ServingStackArgs) -> str:
    return config.edge.namespace or DEFAULT_EDGE_NAMESPACE[config.edge.mode]


def load_balancer_controller(config: ServingStackArgs) -> LoadBalancerControllerMode:
    """`cluster.loadBalancerController`, or its default: a cluster the stack creates has no controller
    until the stack installs one; an existing cluster is expected to run its own."""
    chosen = config.cluster.load_balancer_controller
    if chosen is not None:
        return chosen
    if config.cluster.mode is ClusterMode.CREATE:
        return LoadBalancerControllerMode.INSTALL
    return LoadBalancerControllerMode.EXISTING


def installs_load_balancer_controller(config: ServingStackArgs) -> bool:
    return load_balancer_controller(config) is LoadBalancerControllerMode.INSTALL


def s3_through_gateway_endpoint(config: ServingStackArgs) -> bool:
    """On S3, whether the GPU subnets reach S3 through a gateway endpoint (`weightsStorage.s3.vpcEndpoint`, or its
    default: a created VPC has one on every private route table, llm_serving/cluster/cluster.py; an existing
    VPC's is not known here). The pods that stream from the bucket are then fenced to S3's prefix list."""
    if config.weights_storage.backend is not StorageBackend.S3:
        return False
    chosen = config.weights_storage.s3.vpc_endpoint
    return chosen if chosen is not None else config.cluster.mode is ClusterMode.CREATE


def route_host(config: ServingStackArgs, model: ModelArgs) -> str:
    return model.route.host or config.edge.host


# AWS NLB TCP idle timeout (Network Load Balancer guide, "update-idle-timeout": 350 s default).
NLB_IDLE_SECONDS = 350

# ALB idle timeout upper bound (Elastic Load Balancing API, LoadBalancerAttribute
# idle_timeout.timeout_seconds: 1-4000).
ALB_MAX_IDLE_TIMEOUT_SECONDS = 4000

# No edge timeout below 10 minutes, whatever the arithmetic says: queueing and prefill under load
# come on top of decode time. The policy pack's `edge-non-buffering` rule enforces the same floor.
MIN_EDGE_TIMEOUT_SECONDS = 600


def generation_seconds(config: ServingStackArgs, model: ModelArgs) -> int:
    """Time to generate max-model-len tokens at the slowest decode speed we allow for."""
    return math.ceil(model.max_model_len / config.edge.min_decode_tokens_per_second)


def edge_timeout_floor(config: ServingStackArgs, model: ModelArgs) -> int:
    """The shortest edge timeout a model's route may have."""
    return max(MIN_EDGE_TIMEOUT_SECONDS, generation_seconds(config, model))


def resolve_instance_type(config: ServingStackArgs) -> gpu.InstanceType | None:
    """The catalog entry, or one built from `customInstance`; None when neither applies."""
    group = config.gpu_node_group
    known = gpu.lookup_instance_type(group.instance_type)
    if known is not None:
        return known
    custom = group.custom_instance
    if custom is None:
        return None
    return gpu.instance_type_from_spec(
        group.instance_type.lower(),
        gpu_count=custom.gpu_count,
        gpu_memory_gib=custom.gpu_memory_gib,
        product_label=custom.gpu_product,
        vcpus=custom.vcpus,
        memory_gib=custom.memory_gib,
        efa_interfaces=custom.efa_interfaces,
        local_nvme_gib=custom.local_nvme_gib,
    )


def model_architecture(model: ModelArgs) -> ModelArchitecture | None:
    """The catalog entry, or one built from the model's `architecture` facts."""
    known = lookup_model(model.model_id)
    if known is not None or model.architecture is None:
        return known
    a = model.architecture
    return ModelArchitecture(
        model_id=model.model_id,
        parameters_billion=a.parameters_billion,
        num_layers=a.num_layers,
        num_attention_heads=a.num_attention_heads,
        num_kv_heads=a.num_kv_heads,
        head_dim=a.head_dim,
        hidden_size=a.hidden_size,
        native_dtype=a.native_dtype,
        weight_bytes=int(a.weight_gib * 1024**3),
        max_context_tokens=a.max_context_tokens,
        is_moe=a.is_moe,
    )


def storage_read_mib_per_second(config: ServingStackArgs, model: ModelArgs | None = None) -> float:
    """The read speed one pod's cold start is planned on: EFS's documented per-client figure, FSx's disk
    throughput, S3's cited estimate (s3_read_estimate) unless the operator measured one, or what the
    operator vouches for on an existing class. `model`: whose replicas share the node and the prefix on
    S3 (default the stack's first)."""
    weights = config.weights_storage
    if weights.backend is StorageBackend.FSX_LUSTRE:
        fsx = weights.fsx_lustre
        return storage.lustre_read_mib_per_second(fsx.storage_capacity_gib, fsx.per_unit_storage_throughput)
    if weights.backend is StorageBackend.S3:
        if weights.s3.read_mib_per_second is not None:
            return weights.s3.read_mib_per_second
        estimate = s3_read_estimate(config, model)
        # Without a cited figure the preview refuses the stack (platform.s3_rules); the EFS figure only
        # keeps the planner's other answers (and their messages) available meanwhile.
        return estimate.mib_per_second if estimate else storage.EFS_READ_MIB_PER_SECOND
    if weights.backend is StorageBackend.EFS or weights.existing_storage_class is None:
        return storage.EFS_READ_MIB_PER_SECOND
    return weights.existing_storage_class.read_mib_per_second


def s3_read_estimate(config: ServingStackArgs, model: ModelArgs | None = None) -> storage.S3ReadEstimate | None:
    """S3: the lowest of the streamer's measured rate, the pod's share of its node's bandwidth and its share
    of the prefix's requests (llm_serving/storage/s3_throughput), for `model` (default the first) at its
    tensor-parallel size and maximum replicas; None when the instance type's figure is not known."""
    instance = resolve_instance_type(config)
    if instance is None or not config.models:
        return None
    model = model or config.models[0]
    gpus = _gpus_per_replica(config, model)
    per_node = max(1, instance.gpu_count // gpus) if gpus else 1
    return storage.s3_read_estimate(instance.name, concurrency=config.weights_storage.s3.streamer_concurrency,
                                    replicas_per_node=per_node,
                                    # Every stage's pod reads the whole checkpoint (capacity.plan).
                                    replicas_reading_prefix=replica_bounds(model)[1] * model.pipeline_parallel_size)


def _gpus_per_replica(config: ServingStackArgs, model: ModelArgs) -> int | None:
    """GPUs of one replica's pod: the configured TP, or the one the planner picks (read speed does not
    change it); None when it cannot be planned."""
    if isinstance(model.tensor_parallel_size, int):
        return model.tensor_parallel_size
    try:
        return _plan(config, model, storage.EFS_READ_MIB_PER_SECOND).tensor_parallel_size
    except serving.CapacityError:
        return None


def storage_backend_label(config: ServingStackArgs, model: ModelArgs | None = None) -> str:
    weights = config.weights_storage
    if weights.backend is StorageBackend.FSX_LUSTRE:
        fsx = weights.fsx_lustre
        return (f"FSx for Lustre {fsx.storage_capacity_gib} GiB at {fsx.per_unit_storage_throughput} MB/s/TiB, "
                f"{storage_read_mib_per_second(config):g} MiB/s")
    if weights.backend is StorageBackend.S3:
        where = weights.s3.bucket_name or "a bucket of its own"
        speed = storage_read_mib_per_second(config, model)
        estimate = s3_read_estimate(config, model)
        if weights.s3.read_mib_per_second is not None:
            why = "operator's figure"
        elif estimate is not None:
            why = f"cited, bound by the {estimate.binding.name}: {estimate.binding.why}"
        else:
            why = f"no cited figure for {config.gpu_node_group.instance_type}"
        return (f"S3 ({where}) through the Run:ai Model Streamer at concurrency {weights.s3.streamer_concurrency}, "
                f"{speed:,.0f} MiB/s per pod ({why})")
    if weights.backend is StorageBackend.EFS or weights.existing_storage_class is None:
        return f"EFS Elastic, {storage.EFS_READ_MIB_PER_SECOND:g} MiB/s per pod"
    existing = weights.existing_storage_class
    return f"StorageClass {existing.name}, {existing.read_mib_per_second:g} MiB/s per pod (operator's figure)"


@per_config
def model_plan(config: ServingStackArgs, model: ModelArgs) -> serving.CapacityPlan:
    """The capacity plan of one model on the node group's GPUs; CapacityError when it cannot work. A CPU tier
    of the KV cache lengthens every start by the time vLLM takes to fill it."""
    read = storage_read_mib_per_second(config, model)
    base = _plan(config, model, read)
    tier = kv_offload_gib(config, model, base)
    if tier == 0:
        return base
    return _plan(config, model, read, engine_startup_seconds=serving.DEFAULT_ENGINE_STARTUP_SECONDS
                 + serving.offload_init_seconds(tier))


def host_memory(config: ServingStackArgs, model: ModelArgs, plan: serving.CapacityPlan | None = None,
                tier_gib: int | None = None) -> serving.HostMemory:
    """Where one serving pod's memory limit goes: the transport, the engine, the S3 streamer and the CPU tier."""
    plan = plan or model_plan(config, model)
    instance = resolve_instance_type(config)
    assert instance is not None  # the rules refuse an unknown instance type
    tp = plan.tensor_parallel_size
    streamer = (config.weights_storage.s3.streamer_memory_limit_gib
                if config.weights_storage.backend is StorageBackend.S3 else 0)
    return serving.HostMemory(
        pod_gib=serving.pod_memory_gib(instance.memory_gib, instance.gpu_count, tp),
        transport_gib=serving.shm_size_gib(tp), engine_gib=serving.engine_gib(tp), streamer_gib=streamer,
        lora_gib=lora_host_gib(config, model, plan),
        tier_gib=kv_offload_gib(config, model, plan) if tier_gib is None else tier_gib)


def kv_offload_gib(config: ServingStackArgs, model: ModelArgs, plan: serving.CapacityPlan | None = None) -> int:
    """The model's CPU KV tier per replica, in GiB: as set, else none in dev and for multi-node groups, and
    elsewhere the planner's share of what the pod's memory limit leaves free."""
    if model.kv_offload.size_gib is not None:
        return model.kv_offload.size_gib
    if config.environment is Environment.DEV:
        return 0
    plan = plan or model_plan(config, model)
    if plan.pipeline_parallel_size > 1:
        return 0
    return serving.auto_tier_gib(host_memory(config, model, plan, tier_gib=0).free_gib)


def cpu_kv_tokens(config: ServingStackArgs, model: ModelArgs) -> int:
    """Tokens the model's CPU tier holds per replica (0 without one)."""
    plan = model_plan(config, model)
    return serving.cpu_kv_tokens(kv_offload_gib(config, model, plan), plan.kv_bytes_per_token_per_gpu,
                                 plan.tensor_parallel_size)


def _plan(config: ServingStackArgs, model: ModelArgs, read_mib_per_second: float,
          engine_startup_seconds: float = serving.DEFAULT_ENGINE_STARTUP_SECONDS) -> serving.CapacityPlan:
    instance = resolve_instance_type(config)
    architecture = model_architecture(model)
    if instance is None or architecture is None:
        raise serving.CapacityError("no plan without a known instance type and model architecture")
    return serving.plan(
        architecture,
        instance,
        model.max_model_len,
        tp=model.tensor_parallel_size if model.tensor_parallel_size is not None else "auto",
        gpu_memory_utilization=model.gpu_memory_utilization,
        kv_cache_dtype=model.kv_cache_dtype.value,
        max_num_batched_tokens=model.max_num_batched_tokens,
        max_num_seqs=model.max_num_seqs,
        quantization=model.quantization,
        target_concurrency=model.target_concurrency,
        storage_read_mib_per_second=read_mib_per_second,
        pp=model.pipeline_parallel_size,
        engine_startup_seconds=engine_startup_seconds,
        lora_bytes_per_gpu=_lora_bytes(architecture, model.lora) if model.lora is not None else None,
        **extra_arg_knobs(model.extra_args),
    )


def _lora_bytes(architecture: ModelArchitecture, lora: serving.LoraArgs) -> Callable[[int, int], int]:
    """The adapters' GPU buffers per GPU at a (TP, PP) layout (llm_serving/serving/lora.py)."""
    return lambda tp, pp: serving.lora_gpu_bytes_per_gpu(architecture, lora, tp, pp)


def lora_host_gib(config: ServingStackArgs, model: ModelArgs, plan: serving.CapacityPlan | None = None) -> int:
    """The pinned host memory of the model's CPU adapter cache per pod, in whole GiB (0 without LoRA)."""
    architecture = model_architecture(model)
    if model.lora is None or architecture is None:
        return 0
    plan = plan or model_plan(config, model)
    return math.ceil(serving.lora_cpu_bytes_per_pod(architecture, model.lora, plan.tensor_parallel_size) / 1024**3)


def extra_arg_knobs(extra_args: list[str]) -> dict[str, Any]:
    """The planner's view of engine flags passed through `extraArgs`: `--block-size=N`,
    `--enforce-eager` and `--speculative-config` change memory or startup, so the plan follows them."""
    knobs: dict[str, Any] = {}
    for arg in extra_args:
        flag, _, value = arg.partition("=")
        if flag == "--block-size" and value.isdigit():
            knobs["block_size"] = int(value)
        elif flag == "--enforce-eager" and not value:
            knobs["enforce_eager"] = True
        elif flag == "--speculative-config":
            knobs["speculative_decoding"] = True
    return knobs


# autoscaling/v2 caps a stabilization window at one hour (MaxStabilizationWindowSeconds).
MAX_SCALE_DOWN_WINDOW_SECONDS = 3600
MIN_SCALE_DOWN_WINDOW_SECONDS = 300


def replica_add_seconds(config: ServingStackArgs, model: ModelArgs, plan: serving.CapacityPlan) -> int:
    """From a scale-up decision to a new replica serving, when it needs a new node: the longest case."""
    return serving.replica_add_seconds(footprint(config, model, plan), timing(config), needs_node=True)


def cold_starts(config: ServingStackArgs, model: ModelArgs,
                plan: serving.CapacityPlan) -> tuple[serving.ColdStart, serving.ColdStart]:
    """Adding one replica term by term, (with a free node, with a new node); the second's total is
    replica_add_seconds, which the scale-down window and the timing relations read."""
    steps = timing(config)
    # A replica added while the model serves finds its compile cache produced (scale_up_cold_start_seconds).
    compile_term = plan.compile_cached_seconds if compile_cache_state(config, model)[0] else plan.compile_seconds
    terms = (plan.weights_load_seconds, plan.engine_init_seconds, compile_term)
    return (serving.cold_start(*terms, steps, needs_node=False), serving.cold_start(*terms, steps, needs_node=True))


def scales_to_zero(model: ModelArgs) -> bool:
    """Whether the model goes to zero replicas when idle (`autoscaling.minReplicas: 0`)."""
    return replica_bounds(model)[0] == 0


def wake(config: ServingStackArgs, model: ModelArgs) -> serving.ColdStart:
    """From the first request to a model at zero replicas to its first token, term by term: a new GPU node when
    the group may be empty (its minimum is zero nodes), the image pull, the weights, engine start and compile, and
    readiness. The picker holds the request meanwhile, so every timeout on its path must outlast the total."""
    free, new_node = cold_starts(config, model, model_plan(config, model))
    return new_node if node_counts(config).min_nodes == 0 else free


def idle_usd_per_hour(config: ServingStackArgs, model: ModelArgs) -> float | None:
    """What an idle hour at zero saves: the GPUs of the replicas it would otherwise keep (`replicas`, at least one),
    at the instance's On-Demand price; None without a published price."""
    per_replica = usd_per_replica_hour(model_plan(config, model))
    if per_replica is None:
        return None
    return round(per_replica * max(1, model.replicas), 2)


def scale_down_window(config: ServingStackArgs, model: ModelArgs, plan: serving.CapacityPlan) -> int:
    """The configured window, else the time to add a replica within [300, 3600] s: removing a replica
    sooner than a new one takes to arrive turns every short burst into a wasted node and cold start."""
    configured = model.autoscaling.scale_down_window_seconds
    if configured is not None:
        return configured
    needed = replica_add_seconds(config, model, plan)
    return min(MAX_SCALE_DOWN_WINDOW_SECONDS, max(MIN_SCALE_DOWN_WINDOW_SECONDS, needed))


def system_root_volume_gib(config: ServingStackArgs) -> int:
    """The root volume of a created cluster's CPU nodes. With S3 weights the staging Job runs there (the GPU nodes
    are tainted, the Job tolerates nothing) and requests serving.S3_STAGE_EPHEMERAL_GIB of ephemeral storage, which
    a 50 GiB node cannot give (44 GiB allocatable): the volume is sized for it instead, since those nodes are the
    program's own and no stack key could fix it."""
    if config.weights_storage.backend is not StorageBackend.S3:
        return SYSTEM_ROOT_VOLUME_GIB
    return max(SYSTEM_ROOT_VOLUME_GIB, disk_for_ephemeral_gib(serving.S3_STAGE_EPHEMERAL_GIB))


def creates_nodes(config: ServingStackArgs) -> bool:
    """Whether the stack creates its GPU node group (else the cluster provides the nodes)."""
    return config.gpu_node_group.mode is GpuNodesMode.CREATE


@dataclass(frozen=True)
class NodeCounts:
    """The GPU nodes the stack plans with, and the key each count is set by."""

    min_nodes: int
    max_nodes: int
    desired_nodes: int
    max_key: str  # e.g. gpuNodeGroup.scaling.maxNodes
    desired_key: str


def node_counts(config: ServingStackArgs) -> NodeCounts:
    """A created group's scaling; existing nodes: none kept, `existing.maxNodes` at most (and, without a node
    autoscaler, the fixed count)."""
    group = config.gpu_node_group
    if creates_nodes(config):
        assert group.scaling is not None  # the rules require it with mode create
        scaling = group.scaling
        return NodeCounts(scaling.min_nodes, scaling.max_nodes, scaling.desired_nodes,
                          "gpuNodeGroup.scaling.maxNodes", "gpuNodeGroup.scaling.desiredNodes")
    assert group.existing is not None  # the rules require it with mode existing
    most = group.existing.max_nodes
    return NodeCounts(0, most, most, "gpuNodeGroup.existing.maxNodes", "gpuNodeGroup.existing.maxNodes")


# The well-known label every node carries (kubernetes.io/docs/reference/labels-annotations-taints,
# node.kubernetes.io/instance-type): existing GPU nodes are chosen by it unless the stack names labels.
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"


def existing_node_selector(config: ServingStackArgs) -> dict[str, str]:
    """The labels that choose existing GPU nodes (gpuNodeGroup.mode existing)."""
    existing = config.gpu_node_group.existing
    assert existing is not None  # the rules require it with mode existing
    return dict(existing.node_selector) or {INSTANCE_TYPE_LABEL: config.gpu_node_group.instance_type}


def serving_namespace_labels() -> dict[str, str]:
    """The labels of the namespace the models run in (ServingStack creates it, restricted profile)."""
    return platform.namespace_labels(platform.RESTRICTED)


def host_spread_domains(config: ServingStackArgs, model: ModelArgs) -> int:
    """The nodes a model's minimum replicas must spread over (a required hostname spread with minDomains), or 0 for
    a preference: only with two replicas or more to spread, single-node replicas, a node group that may run that
    many nodes, and one model on it. With several models a node holding none of this one's pods would cap every
    other node at one replica (the skew counts all nodes), which the rollout planner's packing does not model."""
    low, _ = replica_bounds(model)
    if low < 2 or model.pipeline_parallel_size > 1 or len(config.models) > 1:
        return 0
    return low if node_counts(config).max_nodes >= low else 0


def supply_key(config: ServingStackArgs) -> tuple[str, int]:
    """The key (and its value) that sets the GPU nodes a rollout or a peak can count on."""
    counts = node_counts(config)
    if config.node_autoscaling.mode is NodeAutoscalingMode.NONE:
        return counts.desired_key, counts.desired_nodes
    return counts.max_key, counts.max_nodes


def supply(config: ServingStackArgs) -> serving.Supply:
    """GPU nodes a rollout or a peak can count on: maxNodes with a node autoscaler, else desiredNodes."""
    instance = resolve_instance_type(config)
    assert instance is not None
    autoscaled = config.node_autoscaling.mode is not NodeAutoscalingMode.NONE
    return serving.Supply(gpus_per_node=instance.gpu_count, nodes=supply_key(config)[1],
                          instance_type=instance.name, autoscaled=autoscaled)


def timing(config: ServingStackArgs) -> serving.Timing:
    group = config.gpu_node_group
    return serving.Timing(node_ready_seconds=group.node_ready_seconds, image_pull_seconds=group.image_pull_seconds,
                          image_prepulled=group.image_pre_pull is ImagePrePull.DAEMON_SET)


def _shape(config: ServingStackArgs, model: ModelArgs) -> serving.Footprint:
    """The model's footprint without its compile cache's cold start (what packing and strategies read)."""
    plan = model_plan(config, model)
    low, high = replica_bounds(model)
    return serving.Footprint(
        name=model.name, tensor_parallel_size=plan.tensor_parallel_size, min_replicas=_rolled(low), max_replicas=high,
        cold_start_seconds=plan.cold_start_seconds,
        shared_weights=model.storage.access_mode is AccessMode.READ_WRITE_MANY,
        nodes_per_replica=plan.nodes_per_replica)


def _rolled(low: int) -> int:
    """The replicas a rollout or node update moves: a model at zero that is awake when it rolls has one."""
    return max(1, low)


def footprint(config: ServingStackArgs, model: ModelArgs, plan: serving.CapacityPlan) -> serving.Footprint:
    low, high = replica_bounds(model)
    shared, _ = compile_cache_state(config, model)
    return serving.Footprint(
        name=model.name, tensor_parallel_size=plan.tensor_parallel_size, min_replicas=_rolled(low), max_replicas=high,
        cold_start_seconds=plan.cold_start_seconds,
        shared_weights=model.storage.access_mode is AccessMode.READ_WRITE_MANY,
        nodes_per_replica=plan.nodes_per_replica,
        cached_cold_start_seconds=plan.cold_start_cached_seconds if shared else None,
    )


def compile_cache_key(config: ServingStackArgs, model: ModelArgs) -> serving.CompileCacheKey:
    """What the model's shared compile cache is keyed by (llm_serving/serving/compile_cache.py)."""
    plan = model_plan(config, model)
    instance = resolve_instance_type(config)
    assert instance is not None  # the stack validated
    # The KV connector is part of vLLM's own config hash: a tier's size is another cache.
    tier = kv_offload_gib(config, model, plan)
    return serving.CompileCacheKey(
        model_id=model.model_id, revision=model.revision, image_tag=model.image.tag, image_digest=model.image.digest,
        tensor_parallel_size=plan.tensor_parallel_size, pipeline_parallel_size=plan.pipeline_parallel_size,
        gpu_product=instance.gpu.product_label,
        # The flags decide vLLM's own hash; a flag change is a new directory rather than a stale one.
        engine_flags=tuple(str(value) for value in (
            model.max_model_len, model.gpu_memory_utilization, model.kv_cache_dtype.value, model.max_num_seqs,
            model.max_num_batched_tokens, model.enable_prefix_caching, model.quantization, *model.extra_args,
            *([f"kv-offloading-size={tier}"] if tier else []), *_lora_graph(model.lora))),
        model_name=model.name,
    )


def _lora_graph(lora: serving.LoraArgs | None) -> list[str]:
    """What of a model's LoRA settings shapes the compiled graph: vLLM 0.33.0 LoRAConfig.compute_hash hashes the
    slots, the rank and the target modules, not which adapters are loaded (vllm/config/lora.py)."""
    if lora is None:
        return []
    modules = ",".join(sorted(m.value for m in lora.target_modules)) if lora.target_modules else "all"
    return [f"lora={lora.max_loras}x{lora.max_lora_rank}:{modules}"]


def compile_cache_writer_problem(config: ServingStackArgs, model: ModelArgs) -> str | None:
    """Why the producer (a GPU pod) could not write the cache on this model's storage, or None when it can.
    EFS gets each model's cache its own access point, the only paths the file-system policy lets GPU nodes
    write; S3 each model's object prefix, which its producer's role alone may write."""
    if config.weights_storage.backend is StorageBackend.S3:
        return None
    if config.weights_storage.backend is StorageBackend.EFS:
        volume = compile_cache_volume_name(config, model)
        if volume == shared_compile_cache_volume_name(config):
            return (f"its cache volume would be named {volume}, as the shared cache's volume that a stack upgraded "
                    "from a release before per-model caches may still hold (retained, CHANGELOG): give the model "
                    "another name")
        return None
    if model.storage.access_mode is not AccessMode.READ_WRITE_MANY:
        return "a ReadWriteOnce weights claim cannot be mounted by the producer Job beside the replica"
    return None


def compile_cache_wiring(config: ServingStackArgs, model: ModelArgs) -> serving.CompileCacheKey | None:
    """The key the model's pods and producer use, with where the cache lives; None without a shared cache."""
    if not compile_cache_state(config, model)[0]:
        return None
    key = compile_cache_key(config, model)
    if config.weights_storage.backend is StorageBackend.EFS:
        return dataclasses.replace(key, mount_root=serving.COMPILE_CACHE_SHARED_MOUNT,
                                   claim_name=storage.compile_cache_claim_name(model.name))
    if config.weights_storage.backend is StorageBackend.S3:
        return dataclasses.replace(key, in_bucket=True)
    return key


def _cache_inputs_problems(config: ServingStackArgs, model: ModelArgs) -> list[str]:
    """Why the model's key or its producer's storage rules the cache out (the room for the producer aside)."""
    if model.compile_cache is CompileCacheMode.OFF:
        return ["off (models[].compileCache)"]
    if model_architecture(model) is None or resolve_instance_type(config) is None:
        return ["no plan"]
    problems = compile_cache_key(config, model).problems()
    writer = compile_cache_writer_problem(config, model)
    return [*problems, writer] if writer else problems


def producer_room(config: ServingStackArgs) -> serving.ProducerRoom | None:
    """Whether each would-be producer fits beside every model at peak and the rollouts' surge replicas
    (serving.producer_room); None when the rollout itself does not fit (the rollout rule reports that)."""
    shapes = [_shape(config, m) for m in config.models]
    try:
        strategies = serving.choose_strategies(shapes, supply(config), config.environment.value)
    except (serving.RolloutError, serving.CapacityError):
        return None
    producers = [f for m, f in zip(config.models, shapes, strict=True) if not _cache_inputs_problems(config, m)]
    return serving.producer_room(shapes, strategies, producers, supply(config))


@per_config
def compile_cache_state(config: ServingStackArgs, model: ModelArgs) -> tuple[bool, str]:
    """(shared, why): whether the model's replicas share a compile cache, and the reason when not."""
    problems = _cache_inputs_problems(config, model)
    if problems:
        return False, "; ".join(problems)
    room = producer_room(config)
    if room is not None and model.name in room.refused:
        return False, room.refused[model.name][0]
    return True, "shared"


def rollout_strategies(config: ServingStackArgs) -> dict[str, serving.Strategy]:
    """Per model, the Deployment strategy its rollout can afford (serving.choose_strategies)."""
    footprints = [footprint(config, m, model_plan(config, m)) for m in config.models]
    return serving.choose_strategies(footprints, supply(config), config.environment.value)


def rollout_crowded_out(config: ServingStackArgs) -> dict[str, str]:
    """Per model whose rollout the stack's other models make slower than it would be alone, why
    (serving.crowded_out): ServingStack warns with it, `plan --stack` prints it."""
    footprints = [footprint(config, m, model_plan(config, m)) for m in config.models]
    return serving.crowded_out(footprints, supply(config), config.environment.value)


def full_rollout_seconds(config: ServingStackArgs, model: ModelArgs) -> int:
    """The longest a rollout of every replica may take: each step at the startup budget (not the planned
    cold start) after a new node. It is also how long pods holding a rotated-out API key keep serving
    after `pulumi up` starts: vLLM reads its key once, and the last old pod goes with the last step."""
    plan = model_plan(config, model)
    step = dataclasses.replace(footprint(config, model, plan), cold_start_seconds=plan.startup_budget_seconds)
    steps = timing(config)
    return serving.rollout_seconds(step, rollout_strategies(config)[model.name], replica_bounds(model)[1],
                                   steps) + steps.node_ready_seconds


def usd_per_replica_hour(plan: serving.CapacityPlan) -> float | None:
    """The On-Demand price of the GPUs one replica occupies (its share of a node); None without a price."""
    price = gpu.instance_price(plan.gpu)
    if price is None or price.usd_per_hour is None:
        return None
    return round(price.usd_per_hour * plan.gpus_per_replica / plan.gpus_per_node, 2)


def resource_tags(config: ServingStackArgs) -> dict[str, str]:
    """Tags on every AWS resource the stack creates; `stacks preflight` tells its own add-ons by them."""
    return {"app.kubernetes.io/part-of": "llm-serving", "llm-serving/environment": config.environment.value}


def replica_bounds(model: ModelArgs) -> tuple[int, int]:
    """(min, max) replicas; both default to `replicas` (no scaling unless asked for)."""
    scaling = model.autoscaling
    low = model.replicas if scaling.min_replicas is None else scaling.min_replicas
    high = model.replicas if scaling.max_replicas is None else scaling.max_replicas
    return low, high


def routing_mode(config: ServingStackArgs, model: ModelArgs) -> RoutingMode:
    """The model's routing: as configured, else an InferencePool where the gateway can run one (gateway
    mode, controller installed here) and the model can have more than one replica to choose from, or none."""
    if model.route.routing is not None:
        return model.route.routing
    can = config.edge.mode is EdgeMode.GATEWAY and config.edge.controller is ControllerMode.INSTALL
    # A model at zero replicas needs the picker too: it holds the first requests while the model wakes.
    choose = replica_bounds(model)[1] > 1 or scales_to_zero(model)
    return RoutingMode.INFERENCE_POOL if can and choose else RoutingMode.SERVICE


def shared_claim_name(config: ServingStackArgs) -> str | None:
    """FSx for Lustre: one claim every model shares (one static volume per file system)."""
    return "weights-fsx" if config.weights_storage.backend is StorageBackend.FSX_LUSTRE else None


def stage_service_account(model: ModelArgs) -> str:
    """The staging Job's service account, bound by Pod Identity to the write role of its prefix (S3 backend) or to the
    role that reads its LoRA adapters from S3 (a volume backend)."""
    return f"{model.name}-stage-weights"


def serving_service_account(model: ModelArgs) -> str:
    """S3: the serving pods' service account, bound by Pod Identity to the read-only role of its prefix."""
    return f"{model.name}-vllm"


def compile_cache_service_account(model: ModelArgs) -> str:
    """S3: the compile-cache producer's service account, bound by Pod Identity to the role that writes only
    under the cache's prefix."""
    return f"{model.name}-compile-cache"


def weights_storage_class(config: ServingStackArgs) -> str:
    """Our EFS class (cluster-scoped, so named after the serving namespace) or the operator's."""
    existing = config.weights_storage.existing_storage_class
    if config.weights_storage.backend is StorageBackend.EXISTING_STORAGE_CLASS and existing is not None:
        return existing.name
    return f"{config.serving.namespace}-weights"


def compile_cache_volume_name(config: ServingStackArgs, model: ModelArgs) -> str:
    """The static volume of the model's cache on EFS (cluster-scoped, so named after the serving namespace)."""
    return f"{config.serving.namespace}-{storage.compile_cache_claim_name(model.name)}"


def shared_compile_cache_volume_name(config: ServingStackArgs) -> str:
    """The volume of the one cache every model shared before each had its own: `retainOnDelete`, so the upgrade
    dropped it from the state and left it in the cluster until deleted by hand (CHANGELOG). A model's own volume
    must never take its name: its create would fail with AlreadyExists."""
    return f"{weights_storage_class(config)}-compile-cache"


def claim_size_gib(config: ServingStackArgs, model: ModelArgs, weight_bytes: int) -> int:
    """The claim's size (0 on S3, which has no claim)."""
    if config.weights_storage.backend is StorageBackend.S3:
        return 0
    if config.weights_storage.backend is StorageBackend.FSX_LUSTRE:
        return config.weights_storage.fsx_lustre.storage_capacity_gib
    if config.weights_storage.backend is StorageBackend.EFS:
        return storage.EFS_CLAIM_PLACEHOLDER_GIB
    return model.storage.size_gib or serving.weights_volume_gib(weight_bytes)


@dataclass(frozen=True)
class StackCost:
    instance_type: str
    nodes_at_min: int  # GPU nodes with every model at its minimum replicas
    nodes_at_max: int
    usd_per_hour: float | None  # On-Demand, per node; None when the catalog has no price
    price_note: str
    # With shared compile caches: nodes while an `up` produces them (every model at peak, the rollouts' surge
    # replicas and one producer per cache, producer_room); None without one.
    nodes_producing: int | None = None
    producers: int = 0

    def at(self, nodes: int) -> float | None:
        return None if self.usd_per_hour is None else round(self.usd_per_hour * nodes, 2)


def stack_cost(config: ServingStackArgs) -> StackCost:
    """GPU nodes, and their On-Demand cost, with every model at its minimum and at its maximum replicas
    (packed as the rollout planner packs them; never fewer than minNodes, or desiredNodes without an
    autoscaler; existing nodes: the ones the models occupy)."""
    instance = resolve_instance_type(config)
    assert instance is not None
    counts = node_counts(config)
    plans = {m.name: model_plan(config, m) for m in config.models}
    bounds = [replica_bounds(m) for m in config.models]
    low = [plans[m.name].tensor_parallel_size for m, (lo, _) in zip(config.models, bounds, strict=True)
           for _ in range(lo * plans[m.name].nodes_per_replica)]
    high = [plans[m.name].tensor_parallel_size for m, (_, hi) in zip(config.models, bounds, strict=True)
            for _ in range(hi * plans[m.name].nodes_per_replica)]
    if creates_nodes(config) and config.node_autoscaling.mode is NodeAutoscalingMode.NONE:
        at_min = at_max = counts.desired_nodes
    else:
        at_min = max(counts.min_nodes, serving.nodes_needed(low, instance.gpu_count))
        at_max = max(counts.min_nodes, serving.nodes_needed(high, instance.gpu_count))
    price = gpu.instance_price(instance.name)
    capacity = config.gpu_node_group.capacity_type.value
    note = ""
    if price is None or price.usd_per_hour is None:
        note = f"no On-Demand price for {instance.name}" + (f" ({price.note})" if price and price.note else "")
    elif capacity != "ON_DEMAND":
        note = f"{capacity} capacity is priced differently; On-Demand shown"
    else:
        note = f"On-Demand, {price.region}, {price.date}"
    room = producer_room(config)
    producing = max(counts.min_nodes, room.nodes_needed) if room is not None and room.producers else None
    return StackCost(instance.name, at_min, at_max, price.usd_per_hour if price else None, note,
                     nodes_producing=producing, producers=len(room.producers) if room is not None else 0)
