"""Cross-field rules of a stack's configuration, checked after the types are known to be right.

Each rule returns problems instead of raising, so a stack file with three mistakes gets three
lines at once, and each names the key to change.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator
from urllib.parse import urlsplit

from components import gpu, serving
from stacks import platform_checks, serving_checks
from stacks.config import (
    AccessMode,
    AmiType,
    CapacityType,
    ContainerStorage,
    ControllerMode,
    EdgeAuth,
    EdgeMode,
    Environment,
    KvCacheDtype,
    ModelConfig,
    NodeAutoscalingMode,
    PlacementStrategy,
    PrometheusMode,
    StackConfig,
    StorageBackend,
)
from stacks.planning import (
    MAX_SCALE_DOWN_WINDOW_SECONDS,
    model_architecture,
    model_plan,
    replica_add_seconds,
    replica_bounds,
    resolve_instance_type,
    rollout_strategies,
    storage_backend_label,
)
from stacks.platform_checks import NG
from stacks.problems import Problem

# The vLLM image is about 10 GB compressed; containerd keeps the compressed layers while it unpacks
# them, and the node also pulls the device plugin, DCGM exporter and system images. Below this an
# EBS-only node hits DiskPressure and evicts pods during the first pull (facts.md §5: community GPU
# templates use 200-256 GiB gp3 when instance storage is not used).
MIN_ROOT_VOLUME_FOR_IMAGES_GIB = 100



def _scaling(config: StackConfig) -> Iterator[Problem]:
    s = config.gpu_node_group.scaling
    if s.min_nodes > s.max_nodes:
        yield Problem(f"{NG}.scaling.minNodes", "must not exceed maxNodes", s.min_nodes,
                      f"<= maxNodes ({s.max_nodes})")
    if not s.min_nodes <= s.desired_nodes <= s.max_nodes:
        yield Problem(f"{NG}.scaling.desiredNodes", "must lie between minNodes and maxNodes",
                      s.desired_nodes, f"{s.min_nodes}..{s.max_nodes}")


def _capacity(config: StackConfig) -> Iterator[Problem]:
    group = config.gpu_node_group
    if group.capacity_type is CapacityType.CAPACITY_BLOCK:
        if group.capacity_reservation_id is None:
            yield Problem(f"{NG}.capacityReservationId", "CAPACITY_BLOCK needs the capacity block's "
                          "reservation id", None, "a reservation id like cr-0123456789abcdef0")
        zones = sorted({s.availability_zone for s in group.subnets})
        if len(zones) > 1:
            # A capacity block lives in one availability zone; EKS only launches it from subnets
            # there (EKS user guide, capacity-blocks-mng).
            yield Problem(f"{NG}.subnets", "CAPACITY_BLOCK needs every subnet in the reservation's "
                          "single availability zone", zones, "subnets of one availability zone")
    if group.placement is PlacementStrategy.CLUSTER and len({s.availability_zone for s in group.subnets}) > 1:
        # A cluster placement group lives in one availability zone; launches elsewhere fail.
        yield Problem(f"{NG}.subnets", "placement cluster needs every subnet in one availability zone",
                      sorted({s.availability_zone for s in group.subnets}), "subnets of one availability zone")
    if group.capacity_type is CapacityType.SPOT and group.capacity_reservation_id is not None:
        yield Problem(f"{NG}.capacityReservationId", "SPOT capacity cannot launch into a capacity "
                      "reservation", group.capacity_reservation_id, "no reservation with SPOT")


def _instance(config: StackConfig) -> Iterator[Problem]:
    group = config.gpu_node_group
    known = gpu.lookup_instance_type(group.instance_type)
    if known is not None and group.custom_instance is not None:
        yield Problem(f"{NG}.customInstance", f"{group.instance_type} is in the GPU catalog; "
                      "customInstance is only for instance types missing from it", "a customInstance",
                      "no customInstance")
    try:
        instance = resolve_instance_type(config)
    except ValueError as error:
        yield Problem(f"{NG}.customInstance", f"not a usable GPU description: {error}",
                      "a customInstance", "consistent GPU facts")
        return
    if instance is None:
        yield Problem(f"{NG}.instanceType", "not a GPU instance type in the catalog; give its GPU facts "
                      "in gpuNodeGroup.customInstance if it has GPUs", group.instance_type,
                      "one of " + ", ".join(gpu.known_instance_type_names()))
        return
    if (group.container_storage is ContainerStorage.INSTANCE_NVME
            and group.ami_type is AmiType.BOTTLEROCKET_X86_64_NVIDIA):
        # Our NVMe setup is an AL2023 nodeadm NodeConfig; Bottlerocket is configured differently.
        yield Problem(f"{NG}.containerStorage", "instance-nvme is implemented for AL2023 AMIs only",
                      group.container_storage.value, "ebs with a Bottlerocket AMI")
    if group.container_storage is ContainerStorage.INSTANCE_NVME and instance.local_nvme_gib == 0:
        yield Problem(f"{NG}.containerStorage", f"{instance.name} has no instance-store NVMe",
                      group.container_storage.value, "ebs")
    if (group.container_storage is ContainerStorage.EBS
            and group.root_volume_gib < MIN_ROOT_VOLUME_FOR_IMAGES_GIB):
        yield Problem(f"{NG}.rootVolumeGib", "too small to hold the vLLM image (about 10 GB compressed, "
                      "unpacked beside its layers) and the GPU add-on images", group.root_volume_gib,
                      f">= {MIN_ROOT_VOLUME_FOR_IMAGES_GIB}")
    if group.efa_interfaces > instance.efa_interfaces:
        yield Problem(f"{NG}.efaInterfaces", f"{instance.name} supports at most "
                      f"{instance.efa_interfaces} EFA interfaces", group.efa_interfaces,
                      f"0..{instance.efa_interfaces}")


def _observability(config: StackConfig) -> Iterator[Problem]:
    prometheus = config.observability.prometheus
    if prometheus.mode is PrometheusMode.EXISTING and prometheus.url is None:
        yield Problem("observability.prometheus.url", "an existing Prometheus needs its query URL",
                      None, "a URL like http://prometheus-operated.monitoring.svc:9090")
    if prometheus.url is not None:
        host = urlsplit(prometheus.url).hostname or ""
        parts = host.split(".")
        # An in-cluster URL names the namespace; the NetworkPolicy admits scrapes from `namespace`,
        # so a mismatch silently blocks scraping (and the autoscaler then sees an empty queue).
        if len(parts) >= 3 and parts[2] == "svc" and parts[1] != prometheus.namespace:
            yield Problem("observability.prometheus.namespace", f"the URL points at namespace {parts[1]}",
                          prometheus.namespace, parts[1])
    if prometheus.mode is PrometheusMode.INSTALL and config.grafana_admin_password is None:
        # kube-prometheus-stack's Grafana otherwise starts with the chart's well-known password.
        yield Problem("grafanaAdminPassword", "required when observability.prometheus.mode is install",
                      None, "a secret: `pulumi config set --secret llm-serving:grafanaAdminPassword ...`")


COMMIT_SHA = re.compile(r"^[0-9a-f]{40}$")
# Tags that move: a pod rescheduled tomorrow would run a different engine than the one reviewed.
MOVING_TAGS = frozenset({"latest", "nightly", "main", "stable"})


def _models(config: StackConfig) -> Iterator[Problem]:
    found = list(_each_model(config))
    yield from found
    # Packing and rollouts only mean something once every model has a plan and sane bounds.
    if not found and resolve_instance_type(config) is not None:
        yield from _rollouts(config)


def _rollouts(config: StackConfig) -> Iterator[Problem]:
    try:
        rollout_strategies(config)
    except serving.RolloutError as error:
        scaling = config.gpu_node_group.scaling
        if config.node_autoscaling.mode is NodeAutoscalingMode.NONE:
            key, nodes = "desiredNodes", scaling.desired_nodes
        else:
            key, nodes = "maxNodes", scaling.max_nodes
        expected = f">= {error.nodes_needed}" if error.nodes_needed else "a setting the message names"
        yield Problem(f"{NG}.scaling.{key}", str(error), nodes, expected)


def _each_model(config: StackConfig) -> Iterator[Problem]:
    names = [m.name for m in config.models]
    for name in sorted({n for n in names if names.count(n) > 1}):
        yield Problem("models", f"two models are named {name}", name, "unique model names")
    for model in config.models:
        at = f"models[{model.name}]"
        if model_architecture(model) is None:
            yield Problem(f"{at}.modelId", "not in the model catalog; give its facts in architecture",
                          model.model_id, "a catalog model or an architecture block")
            continue
        if model.storage.access_mode is AccessMode.READ_WRITE_ONCE and replica_bounds(model)[1] > 1:
            yield Problem(f"{at}.storage.accessMode", "replicas on several nodes cannot share a ReadWriteOnce "
                          "volume", model.storage.access_mode.value,
                          "ReadWriteMany, or replicas and autoscaling.maxReplicas 1")
        backend = config.weights_storage.backend
        if backend is StorageBackend.EXISTING_STORAGE_CLASS and model.storage.size_gib is None:
            yield Problem(f"{at}.storage.sizeGib", "required with an existing StorageClass: a size that followed the "
                          "checkpoint would shrink the claim when a smaller model moves in, which Kubernetes refuses",
                          None, "a size in GiB you only ever raise")
        if backend is not StorageBackend.EXISTING_STORAGE_CLASS:
            shown = "EFS" if backend is StorageBackend.EFS else "FSx for Lustre"
            if model.storage.access_mode is AccessMode.READ_WRITE_ONCE:
                yield Problem(f"{at}.storage.accessMode", f"{shown} claims are ReadWriteMany", "ReadWriteOnce",
                              "ReadWriteMany, or weightsStorage.backend existingStorageClass with an EBS class")
            if model.storage.size_gib is not None:
                why = ("EFS ignores a claim's size (it grows with its data); a size here would only risk a shrink"
                       if backend is StorageBackend.EFS else "the claim is the file system's capacity "
                       "(weightsStorage.fsxLustre.storageCapacityGib)")
                yield Problem(f"{at}.storage.sizeGib", why, model.storage.size_gib, "unset")
        if model.image.tag in MOVING_TAGS:
            yield Problem(f"{at}.image.tag", "a moving tag; pin the engine version", model.image.tag,
                          "a release tag like v0.33.0")
        conflicts = serving.managed_flag_conflicts(model.extra_args)
        if conflicts:
            yield Problem(f"{at}.extraArgs", "sets flags that typed keys own", conflicts,
                          "only flags without a key of their own")
        if config.production_like:
            for key, value in (("revision", model.revision), ("tokenizerRevision", model.tokenizer_revision)):
                if value is not None and not COMMIT_SHA.match(value):
                    yield Problem(f"{at}.{key}", f"{config.environment.value} needs a pinned commit, not a "
                                  "branch or tag (a silent upstream change would change outputs)", value,
                                  "a 40-character commit SHA")
        if config.environment is Environment.PROD and model.quality_eval is None:
            if model.kv_cache_dtype not in (KvCacheDtype.AUTO, KvCacheDtype.BFLOAT16):
                yield Problem(f"{at}.qualityEval", f"kvCacheDtype {model.kv_cache_dtype.value} in prod needs "
                              "the eval that showed quality holds", None, "the eval's name or URL")
            if model.quantization is not None:
                yield Problem(f"{at}.qualityEval", f"quantization {model.quantization} in prod needs the "
                              "eval that showed quality holds", None, "the eval's name or URL")
        if resolve_instance_type(config) is None:
            continue
        try:
            plan = model_plan(config, model)
        except serving.CapacityError as error:
            settings = (f"tensorParallelSize={model.tensor_parallel_size} maxModelLen={model.max_model_len} "
                        f"gpuMemoryUtilization={model.gpu_memory_utilization:g} "
                        f"kvCacheDtype={model.kv_cache_dtype.value}")
            yield Problem(at, f"cannot serve on {config.gpu_node_group.instance_type}: {error}", settings,
                          "settings whose weights and one max-length request fit (see python -m stacks plan)")
            continue
        yield from _scaling_bounds(config, model, plan)
        ceiling = config.weights_storage.max_cold_start_seconds
        if plan.cold_start_seconds > ceiling:
            yield Problem(at, f"its planned cold start is {plan.cold_start_seconds} s ({architecture_bytes(model)} "
                          f"from {storage_backend_label(config)}, plus engine start), above "
                          "weightsStorage.maxColdStartSeconds", ceiling,
                          "faster storage, a smaller checkpoint, or a higher ceiling")


def architecture_bytes(model: ModelConfig) -> str:
    architecture = model_architecture(model)
    return f"{architecture.weight_bytes / 1e9:.0f} GB" if architecture else "its weights"


def _scaling_bounds(config: StackConfig, model: ModelConfig, plan: serving.CapacityPlan) -> Iterator[Problem]:
    at = f"models[{model.name}]"
    low, high = replica_bounds(model)
    if low > high:
        yield Problem(f"{at}.autoscaling.minReplicas", "must not exceed maxReplicas", low, f"<= maxReplicas ({high})")
    elif not low <= model.replicas <= high:
        yield Problem(f"{at}.replicas", "must lie between the autoscaling bounds", model.replicas, f"{low}..{high}")
    window = model.autoscaling.scale_down_window_seconds
    needed = min(replica_add_seconds(config, model, plan), MAX_SCALE_DOWN_WINDOW_SECONDS)
    if window is not None and window < needed:
        yield Problem(f"{at}.autoscaling.scaleDownWindowSeconds", f"shorter than adding a replica takes ({needed} s: "
                      "a node, the image pull and the cold start): a burst would pay for a replica and lose it before "
                      "it served", window, f">= {needed}, or unset")


# Where each mode's controller conventionally runs: Envoy Gateway's quickstart namespace, the
# ALB controller's documented install namespace, and the ingress-nginx chart's usual namespace.
DEFAULT_EDGE_NAMESPACE = {
    EdgeMode.GATEWAY: "envoy-gateway-system",
    EdgeMode.ALB: "kube-system",
    EdgeMode.INGRESS_NGINX: "ingress-nginx",
}


def edge_namespace(config: StackConfig) -> str:
    return config.edge.namespace or DEFAULT_EDGE_NAMESPACE[config.edge.mode]


def route_host(config: StackConfig, model: ModelConfig) -> str:
    return model.route.host or config.edge.host


# No edge timeout below 10 minutes, whatever the arithmetic says: queueing and prefill under load
# come on top of decode time. The policy pack's `edge-non-buffering` rule enforces the same floor.
MIN_EDGE_TIMEOUT_SECONDS = 600


def generation_seconds(config: StackConfig, model: ModelConfig) -> int:
    """Time to generate max-model-len tokens at the slowest decode speed we allow for."""
    return math.ceil(model.max_model_len / config.edge.min_decode_tokens_per_second)


def edge_timeout_floor(config: StackConfig, model: ModelConfig) -> int:
    """The shortest edge timeout a model's route may have."""
    return max(MIN_EDGE_TIMEOUT_SECONDS, generation_seconds(config, model))


# AWS NLB TCP idle timeout (Network Load Balancer guide, "update-idle-timeout": 350 s default).
NLB_IDLE_SECONDS = 350

# ALB idle timeout upper bound (Elastic Load Balancing API, LoadBalancerAttribute
# idle_timeout.timeout_seconds: 1-4000).
ALB_MAX_IDLE_TIMEOUT_SECONDS = 4000


def _edge(config: StackConfig) -> Iterator[Problem]:
    edge = config.edge
    tls = edge.tls
    if edge.mode is EdgeMode.ALB:
        if tls.acm_certificate_arn is None:
            yield Problem("edge.tls.acmCertificateArn", "HTTPS on an ALB needs an ACM certificate", None,
                          "an ACM certificate ARN")
        if edge.controller is ControllerMode.INSTALL and edge.alb_controller_role_arn is None:
            yield Problem("edge.albControllerRoleArn", "installing the ALB controller needs its IAM role", None,
                          "the ARN of a role with the controller's IAM policy")
    elif tls.secret_name is None and tls.cert_manager_issuer is None:
        yield Problem("edge.tls", f"{edge.mode.value} mode needs a certificate source", "no secretName or "
                      "certManagerIssuer", "tls.secretName or tls.certManagerIssuer")
    elif tls.secret_name is not None and tls.cert_manager_issuer is not None:
        yield Problem("edge.tls", "two certificate sources", "secretName and certManagerIssuer", "one of them")
    if edge.auth is not EdgeAuth.VLLM_API_KEY and edge.mode is not EdgeMode.GATEWAY:
        yield Problem("edge.auth", f"gateway authentication needs mode gateway, not {edge.mode.value}",
                      edge.auth.value, "vllm-api-key")
    if edge.mode is EdgeMode.GATEWAY and edge.stream_idle_timeout_seconds >= NLB_IDLE_SECONDS:
        yield Problem("edge.streamIdleTimeoutSeconds", f"the NLB in front of Envoy drops flows silent for "
                      f"{NLB_IDLE_SECONDS} s without telling Envoy", edge.stream_idle_timeout_seconds,
                      f"< {NLB_IDLE_SECONDS}")
    if edge.auth is EdgeAuth.JWT and edge.jwt is None:
        yield Problem("edge.jwt", "auth jwt needs an issuer and a JWKS URI", None, "jwt.issuer and jwt.jwksUri")
    seen: dict[tuple[str, str], str] = {}
    for model in config.models:
        key = (route_host(config, model), model.route.path_prefix)
        if key in seen:
            yield Problem(f"models[{model.name}].route", f"same host and path as model {seen[key]}",
                          f"{key[0]}{key[1]}", "a distinct host or pathPrefix")
        seen.setdefault(key, model.name)
        if edge.mode is not EdgeMode.GATEWAY and model.route.path_prefix != "/":
            # Neither Ingress rewrites paths and vLLM serves /v1 at its root: a prefix would 404.
            yield Problem(f"models[{model.name}].route.pathPrefix", f"{edge.mode.value} mode cannot strip a path "
                          "prefix; give each model its own host", model.route.path_prefix, "/")
        needed = generation_seconds(config, model)
        floor = edge_timeout_floor(config, model)
        timeout = model.route.request_timeout_seconds
        if timeout and timeout < floor:
            yield Problem(f"models[{model.name}].route.requestTimeoutSeconds", f"cuts generations short: "
                          f"{model.max_model_len} tokens at {edge.min_decode_tokens_per_second:g} tokens/s take "
                          f"{needed} s, and no edge timeout may be under {MIN_EDGE_TIMEOUT_SECONDS} s", timeout,
                          f">= {floor}, or 0 to disable")
        if edge.mode is EdgeMode.ALB and needed > ALB_MAX_IDLE_TIMEOUT_SECONDS:
            yield Problem(f"models[{model.name}].maxModelLen", f"a non-streamed response of {model.max_model_len} "
                          f"tokens at {edge.min_decode_tokens_per_second:g} tokens/s takes {needed} s, beyond the "
                          f"ALB's {ALB_MAX_IDLE_TIMEOUT_SECONDS} s idle timeout", model.max_model_len,
                          "a gateway edge, or a shorter maxModelLen")


RULES: tuple[Callable[[StackConfig], Iterator[Problem]], ...] = (
    _scaling,
    platform_checks.weights_storage_rules,
    platform_checks.node_autoscaling_rules,
    _capacity,
    _instance,
    _observability,
    _models,
    _edge,
    serving_checks.routing_rules,
    serving_checks.multinode_rules,
)


def check(config: StackConfig) -> list[Problem]:
    """Every cross-field problem of a structurally valid config."""
    return [problem for rule in RULES for problem in rule(config)]
