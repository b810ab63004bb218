"""Cross-field rules of the node group, capacity, instance, observability and model sections.

Each rule returns problems instead of raising, so a stack file with three mistakes gets three
lines at once, and each names the key to change. rules/__init__.py lists every rule.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Iterator
from urllib.parse import urlsplit

from llm_serving import gpu, serving
from llm_serving.gpu import AmiType, CapacityType, ContainerStorage, PlacementStrategy
from llm_serving.observability import PrometheusMode
from llm_serving.platform.problems import Problem
from llm_serving.serving import AccessMode, ModelArgs
from llm_serving.stack.args import ServingStackArgs
from llm_serving.stack.planning import (
    creates_nodes,
    host_memory,
    model_architecture,
    model_plan,
    replica_bounds,
    resolve_instance_type,
    rollout_strategies,
    storage_backend_label,
    supply_key,
)
from llm_serving.stack.rules.platform import NG
from llm_serving.storage import StorageBackend

# The vLLM image is about 10 GB compressed; containerd keeps the compressed layers while it unpacks
# them, and the node also pulls the device plugin, DCGM exporter and system images. Below this an
# EBS-only node hits DiskPressure and evicts pods during the first pull (community GPU templates use
# 200-256 GiB gp3 when instance storage is not used, e.g. 256 GiB in clowdhaus/cookiecluster
# cookiecluster/templates/node-group-accel.tpl @ 0a519c10).
MIN_ROOT_VOLUME_FOR_IMAGES_GIB = 100



def scaling_rules(config: ServingStackArgs) -> Iterator[Problem]:
    s = config.gpu_node_group.scaling
    if s is None:
        return  # gpu_nodes_rules reports a created group without it
    if s.min_nodes > s.max_nodes:
        yield Problem(f"{NG}.scaling.minNodes", "must not exceed maxNodes", s.min_nodes,
                      f"<= maxNodes ({s.max_nodes})")
    if not s.min_nodes <= s.desired_nodes <= s.max_nodes:
        yield Problem(f"{NG}.scaling.desiredNodes", "must lie between minNodes and maxNodes",
                      s.desired_nodes, f"{s.min_nodes}..{s.max_nodes}")


def capacity_rules(config: ServingStackArgs) -> Iterator[Problem]:
    group = config.gpu_node_group
    if not creates_nodes(config):
        return  # how existing nodes are bought is their owner's
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


def instance_rules(config: ServingStackArgs) -> Iterator[Problem]:
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
    if not creates_nodes(config):
        return  # existing nodes boot and store what their owner chose
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


def observability_rules(config: ServingStackArgs) -> Iterator[Problem]:
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


def models_rules(config: ServingStackArgs) -> Iterator[Problem]:
    found = list(_each_model(config))
    yield from found
    # Packing and rollouts only mean something once every model has a plan and sane bounds.
    if not found and resolve_instance_type(config) is not None:
        yield from _rollouts(config)


def _rollouts(config: ServingStackArgs) -> Iterator[Problem]:
    try:
        rollout_strategies(config)
    except serving.RolloutError as error:
        key, nodes = supply_key(config)
        expected = f">= {error.nodes_needed}" if error.nodes_needed else "a setting the message names"
        yield Problem(key, str(error), nodes, expected)


def _each_model(config: ServingStackArgs) -> Iterator[Problem]:
    names = [m.name for m in config.models]
    for name in sorted({n for n in names if names.count(n) > 1}):
        yield Problem("models", f"two models are named {name}", name, "unique model names")
    for model in config.models:
        at = f"models[{model.name}]"
        if model_architecture(model) is None:
            # A typo of a catalog id is the likelier mistake than a new model: suggest the near id first.
            near = difflib.get_close_matches(model.model_id, serving.known_model_ids(), n=1, cutoff=0.8)
            yield Problem(f"{at}.modelId", (f"not in the model catalog (did you mean {near[0]}?); or, for another "
                                            "model, give its facts in architecture" if near else
                                            "not in the model catalog; give its facts in architecture (`python -m "
                                            "stacks plan --model <id> --model-config <config.json>` prints them)"),
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
        if resolve_instance_type(config) is None:
            continue
        try:
            plan = model_plan(config, model)
        except serving.CapacityError as error:
            settings = (f"tensorParallelSize={model.tensor_parallel_size or 'auto'} maxModelLen={model.max_model_len} "
                        f"gpuMemoryUtilization={model.gpu_memory_utilization:g} "
                        f"kvCacheDtype={model.kv_cache_dtype.value}")
            yield Problem(at, f"cannot serve on {config.gpu_node_group.instance_type}: {error}", settings,
                          "settings whose weights and one max-length request fit (see python -m stacks plan)")
            continue
        yield from _scaling_bounds(config, model, plan)
        yield from _streamer_memory(config, model, plan)
        ceiling = config.weights_storage.max_cold_start_seconds
        if plan.cold_start_seconds > ceiling:
            yield Problem(at, f"its planned cold start is {plan.cold_start_seconds} s ({architecture_bytes(model)} "
                          f"from {storage_backend_label(config, model)}, plus engine start), above "
                          "weightsStorage.maxColdStartSeconds", ceiling,
                          "faster storage, a smaller checkpoint, or a higher ceiling")


# The share of a serving pod's memory the streamer's CPU buffers may take; the rest is vLLM's own: each
# rank's process, the tokenizer and the pinned host buffers CUDA uses (our margin, not a published figure).
STREAMER_MEMORY_SHARE = 0.5


def _streamer_memory(config: ServingStackArgs, model: ModelArgs, plan: serving.CapacityPlan) -> Iterator[Problem]:
    """On S3 every rank holds its own `memory_limit` buffer (vLLM sets RUNAI_STREAMER_MEMORY_LIMIT per
    process): TP of them must fit the pod's memory limit, or the pod is OOM-killed while it loads."""
    if config.weights_storage.backend is not StorageBackend.S3:
        return
    instance = resolve_instance_type(config)
    assert instance is not None  # the caller skips a stack without one
    pod_gib = serving.pod_memory_gib(instance.memory_gib, instance.gpu_count, plan.tensor_parallel_size)
    limit = config.weights_storage.s3.streamer_memory_limit_gib
    allowed = math.floor(pod_gib * STREAMER_MEMORY_SHARE / plan.tensor_parallel_size)
    if limit > allowed:
        yield Problem("weightsStorage.s3.streamerMemoryLimitGib", f"each of the {plan.tensor_parallel_size} "
                      f"ranks of models[{model.name}] holds this buffer: {plan.tensor_parallel_size} x {limit} GiB "
                      f"is over half the pod's {pod_gib} GiB memory limit, and the pod could be OOM-killed while "
                      "it loads", limit, f"<= {allowed}")


def architecture_bytes(model: ModelArgs) -> str:
    architecture = model_architecture(model)
    return f"{architecture.weight_bytes / 1e9:.0f} GB" if architecture else "its weights"


def _scaling_bounds(config: ServingStackArgs, model: ModelArgs, plan: serving.CapacityPlan) -> Iterator[Problem]:
    at = f"models[{model.name}]"
    low, high = replica_bounds(model)
    if low > high:
        yield Problem(f"{at}.autoscaling.minReplicas", "must not exceed maxReplicas", low, f"<= maxReplicas ({high})")
    elif not low <= model.replicas <= high:
        yield Problem(f"{at}.replicas", "must lie between the autoscaling bounds", model.replicas, f"{low}..{high}")
    # The scale-down window against the time to add a replica is a timing rule (llm_serving/stack/timing.py).


def kv_offload_rules(config: ServingStackArgs) -> Iterator[Problem]:
    """A CPU tier of the KV cache must fit the pod's memory limit beside the engine, /dev/shm's transport and the
    S3 streamer (else vLLM is OOM-killed at start: it fills the whole tier then), on one pod per replica, and be
    the only KV connector."""
    for model in config.models:
        at = f"models[{model.name}].kvOffload.sizeGib"
        try:
            plan = model_plan(config, model)
        except serving.CapacityError:
            continue  # capacity_rules reports it
        memory = host_memory(config, model, plan)
        if memory.tier_gib == 0:
            continue
        if plan.pipeline_parallel_size > 1:
            yield Problem(at, "a multi-node group's pods do not take a CPU KV tier here", memory.tier_gib,
                          "0, or unset")
            continue
        if memory.spare_gib < 0:
            yield Problem(at, f"the tier does not fit the pod's {memory.pod_gib} GiB memory limit beside the engine "
                          f"({memory.engine_gib} GiB), /dev/shm's transport ({memory.transport_gib} GiB) and the S3 "
                          f"streamer ({memory.streamer_gib} GiB): vLLM fills it at start and is OOM-killed",
                          memory.tier_gib, f"<= {memory.free_gib}")
        if any(arg.split("=", 1)[0] == "--kv-transfer-config" for arg in model.extra_args):
            yield Problem(f"models[{model.name}].extraArgs", "a CPU KV tier is vLLM's own KV connector: a second "
                          "--kv-transfer-config would replace it", "--kv-transfer-config",
                          "no --kv-transfer-config, or kvOffload.sizeGib: 0")
