"""Cross-field rules about the platform under the models: cluster version, node autoscaling, weights
storage (pure). rules/__init__.py runs them with the other rules; each returns problems, never raises.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

from llm_serving import gpu, storage
from llm_serving.cluster import ClusterMode, NetworkPolicyEnforcement
from llm_serving.gpu import AmiType, ExistingAutoscaler, NodeAutoscalingMode
from llm_serving.platform import addon_version, versions
from llm_serving.platform.args import Environment
from llm_serving.platform.problems import Problem
from llm_serving.serving import CapacityError
from llm_serving.stack.args import ServingStackArgs
from llm_serving.stack.planning import compile_cache_wiring, creates_nodes
from llm_serving.storage import StorageBackend

NG = "gpuNodeGroup"


def cluster_version_problem(config: ServingStackArgs, actual: str) -> Problem | None:
    """The looked-up cluster runs another minor than the stack file says: CreateNodegroup accepts only
    the control plane's version, Cluster Autoscaler must match it, and the objects were validated
    against the stack's version."""
    expected = config.cluster.kubernetes_version
    if actual == expected:
        return None
    return Problem("cluster.kubernetesVersion", f"cluster {config.cluster.name} runs Kubernetes {actual}", expected,
                   f"{actual!r} (with gpuNodeGroup.amiReleaseVersion a {actual} release, or unset); the GPU node "
                   "group then moves to a new generation beside the old one")


def network_policy_enforcement_problem(config: ServingStackArgs, vpc_cni_configuration: str | None) -> Problem | None:
    """The models' fences are NetworkPolicies, which the VPC CNI ignores unless its add-on configuration
    sets enableNetworkPolicy "true" (EKS user guide, cni-network-policy-configure): without it every
    pod in the cluster reaches vLLM and the staging Jobs."""
    if config.cluster.network_policy_enforcement is NetworkPolicyEnforcement.OTHER:
        return None
    try:
        values = json.loads(vpc_cni_configuration or "{}")
    except json.JSONDecodeError:
        values = {}
    enabled = isinstance(values, dict) and str(values.get("enableNetworkPolicy", "")).lower() == "true"
    if enabled:
        return None
    return Problem("cluster.networkPolicyEnforcement", f"the vpc-cni add-on of cluster {config.cluster.name} does "
                   "not enforce NetworkPolicies, so nothing fences the models", vpc_cni_configuration or None,
                   'enableNetworkPolicy: "true" in the add-on\'s configuration, or networkPolicyEnforcement: other')


def node_autoscaling_rules(config: ServingStackArgs) -> Iterator[Problem]:
    autoscaling = config.node_autoscaling
    minor = config.cluster.kubernetes_version
    if autoscaling.mode is NodeAutoscalingMode.EXISTING:
        if autoscaling.existing is None:
            yield Problem("nodeAutoscaling.existing", "mode existing needs the autoscaler the cluster runs", None,
                          "cluster-autoscaler")
        elif autoscaling.existing is ExistingAutoscaler.KARPENTER and creates_nodes(config):
            yield Problem("nodeAutoscaling.existing", "Karpenter launches its own nodes and never resizes an EKS "
                          "managed node group, so this program's GPU group would not grow", "karpenter",
                          "cluster-autoscaler, mode none (the group's fixed desiredNodes), or the nodes Karpenter "
                          "launches: gpuNodeGroup.mode existing")
    elif autoscaling.existing is not None:
        yield Problem("nodeAutoscaling.existing", f"only read with mode existing, not {autoscaling.mode.value}",
                      autoscaling.existing.value, "unset")
    if autoscaling.mode is NodeAutoscalingMode.CLUSTER_AUTOSCALER and not creates_nodes(config):
        yield Problem("nodeAutoscaling.mode", "the stack installs Cluster Autoscaler for a node group of its own; "
                      "existing GPU nodes grow with the cluster's own autoscaler", autoscaling.mode.value,
                      "existing (with existing: karpenter or cluster-autoscaler), or none")
    elif autoscaling.mode is NodeAutoscalingMode.CLUSTER_AUTOSCALER:
        try:
            gpu.image_tag_for(minor, versions.CLUSTER_AUTOSCALER_IMAGE_TAGS)
        except ValueError as error:
            yield Problem("cluster.kubernetesVersion", str(error), minor,
                          ", ".join(sorted(versions.CLUSTER_AUTOSCALER_IMAGE_TAGS)))
    release = config.gpu_node_group.ami_release_version
    al2023 = config.gpu_node_group.ami_type is AmiType.AL2023_X86_64_NVIDIA
    if creates_nodes(config) and al2023 and release is not None and not release.startswith(f"{minor}."):
        # EKS AL2023 AMI releases are named <kubernetes minor>.<patch>-<date>; CreateNodegroup rejects
        # a release of another minor. Bottlerocket releases carry the OS version (e.g. 1.47.0-6154605b).
        yield Problem(f"{NG}.amiReleaseVersion", f"not a release for Kubernetes {minor} (cluster.kubernetesVersion)",
                      release, f"a {minor}.x release, or unset")


def gpu_nodes_rules(config: ServingStackArgs) -> Iterator[Problem]:
    """A created group needs its scaling; existing nodes need what the stack cannot find out about them, and
    cannot host what only a created group provides (EFA and one placement group for multi-node replicas)."""
    group = config.gpu_node_group
    if creates_nodes(config):
        if group.scaling is None:
            yield Problem(f"{NG}.scaling", "mode create needs the node counts", None,
                          "{minNodes: <n>, maxNodes: <n>, desiredNodes: <n>}")
        if group.existing is not None:
            yield Problem(f"{NG}.existing", "only read with mode existing", "set", "unset, or mode existing")
        return
    if group.existing is None:
        yield Problem(f"{NG}.existing", "mode existing needs the most nodes the models may occupy", None,
                      "{maxNodes: <n>} (nodeSelector and tolerations have defaults)")
        return
    if group.scaling is not None:
        yield Problem(f"{NG}.scaling", "only read with mode create (existing nodes: existing.maxNodes)", "set",
                      "unset")
    backend = config.weights_storage.backend
    if backend in (StorageBackend.EFS, StorageBackend.FSX_LUSTRE) and not group.subnets:
        yield Problem(f"{NG}.subnets", f"{backend.value} puts a mount target in each zone the GPU nodes run in",
                      [], "the nodes' subnets, each {id, availabilityZone}")
    if backend is StorageBackend.EFS:
        for key, value in (("nodeRoleArn", group.existing.node_role_arn),
                           ("securityGroupId", group.existing.security_group_id)):
            if value is None:
                yield Problem(f"{NG}.existing.{key}", "EFS admits the GPU nodes by their role (the file-system "
                              "policy) and a security group of theirs (the mount targets)", None,
                              "the nodes' IAM role ARN and one of their security groups")
    for model in config.models:
        if model.pipeline_parallel_size > 1:
            yield Problem(f"models[{model.name}].pipelineParallelSize", "a replica over several nodes needs EFA and "
                          "one placement group, which only a node group the stack creates provides",
                          model.pipeline_parallel_size, "1, or gpuNodeGroup.mode create")


def weights_storage_rules(config: ServingStackArgs) -> Iterator[Problem]:
    weights = config.weights_storage
    if weights.backend is StorageBackend.EXISTING_STORAGE_CLASS and weights.existing_storage_class is None:
        yield Problem("weightsStorage.existingStorageClass", "backend existingStorageClass needs the class and the "
                      "read speed it gives", None, "{name: <class>, readMibPerSecond: <MiB/s>}")
    if weights.backend is StorageBackend.FSX_LUSTRE:
        problem = storage.lustre_capacity_problem(weights.fsx_lustre.storage_capacity_gib)
        if problem:
            yield Problem("weightsStorage.fsxLustre.storageCapacityGib", problem,
                          weights.fsx_lustre.storage_capacity_gib, "1200, 2400, 4800, 7200, ...")
    # A created cluster's CPU nodes are the program's own: their role and security group stand in.
    vouched = config.environment is not Environment.DEV and config.cluster.mode is ClusterMode.EXISTING
    if weights.backend is StorageBackend.EFS and weights.efs.staging_node_role_arn is None and vouched:
        # Without it there is no file-system policy: any node that can reach a mount target could
        # rewrite the weights every replica serves.
        yield Problem("weightsStorage.efs.stagingNodeRoleArn", f"{config.environment.value} needs the staging "
                      "nodes' role so the file-system policy lets only it write the weights", None,
                      "the IAM role ARN of the nodes the staging Jobs run on")
    if weights.backend is StorageBackend.EFS and not weights.efs.staging_node_selector and vouched:
        # The file-system policy lets only the staging role write and the mount targets admit only the
        # staging nodes' group: a Job scheduled on any other node could not mount the weights at all.
        yield Problem("weightsStorage.efs.stagingNodeSelector", f"{config.environment.value} needs the staging "
                      "nodes' labels so the staging Job runs where the file-system policy and the mount targets let "
                      "it write", {}, "the labels of the nodes whose role is stagingNodeRoleArn, e.g. "
                      "{eks.amazonaws.com/nodegroup: <the CPU node group>}")
    if weights.backend is StorageBackend.S3:
        yield from s3_rules(config)
    if weights.backend is StorageBackend.EFS:
        yield from efs_policy_rules(config)
    if weights.backend is StorageBackend.EFS and not weights.efs.staging_node_security_group_ids and vouched:
        # Without it NFS would be admitted from the cluster security group: every node and the control plane.
        yield Problem("weightsStorage.efs.stagingNodeSecurityGroupIds", f"{config.environment.value} needs the "
                      "staging nodes' own security group so the mount targets admit NFS only from them and the GPU "
                      "nodes", [], "the id of a security group the staging nodes carry besides the cluster's, e.g. "
                      "[sg-0123456789abcdef0]")
    if weights.backend is not StorageBackend.EXISTING_STORAGE_CLASS and weights.existing_storage_class is not None:
        yield Problem("weightsStorage.existingStorageClass", "only read with backend existingStorageClass",
                      weights.existing_storage_class.name, "unset, or backend existingStorageClass")


def _region(config: ServingStackArgs) -> str | None:
    """The stack's region as its zones name it (an availability zone is its region and a letter: EC2 user guide,
    using-regions-availability-zones.html); None when the stack names no zone."""
    zones = [s.availability_zone for s in config.gpu_node_group.subnets]
    if not zones and config.cluster.create is not None:
        zones = list(config.cluster.create.zones)
    return zones[0][:-1] if zones else None


def efs_policy_length(config: ServingStackArgs, models: int, cache_models: int) -> int | None:
    """The length of the policy this stack's weights file system would get (llm_serving/storage/policy_size.py) with
    `models` models, `cache_models` of them keeping a shared compile cache; None without a policy (no staging role:
    dev) or a region."""
    region = _region(config)
    staging = config.weights_storage.efs.staging_node_role_arn
    if region is None or (staging is None and config.cluster.mode is not ClusterMode.CREATE):
        return None
    existing = config.gpu_node_group.existing
    reader = existing.node_role_arn if existing is not None and not creates_nodes(config) else None
    return storage.file_system_policy_length(region, reader_role_arns=[reader], writer_role_arn=staging,
                                             serving_access_points=models, compile_cache_access_points=cache_models)


def efs_policy_ceiling(config: ServingStackArgs, *, with_caches: bool) -> int | None:
    """The most models, each with a shared compile cache or none with one, whose policy fits EFS's limit (the docs'
    figure); None without a policy."""
    limit = storage.FILE_SYSTEM_POLICY_MAX_CHARS
    if efs_policy_length(config, 1, int(with_caches)) is None:
        return None
    count = 1
    while (efs_policy_length(config, count + 1, (count + 1) * with_caches) or 0) <= limit:
        count += 1
    return count


def efs_policy_rules(config: ServingStackArgs) -> Iterator[Problem]:
    """The weights file system's policy names every model's access points and must fit in EFS's 20,000 characters
    (PutFileSystemPolicy): past it `pulumi up` would fail after creating every access point."""
    try:
        caches = sum(1 for m in config.models if compile_cache_wiring(config, m) is not None)
    except CapacityError:
        return  # the capacity rule reports the plan itself
    models = len(config.models)
    length = efs_policy_length(config, models, caches)
    limit = storage.FILE_SYSTEM_POLICY_MAX_CHARS
    if length is None or length <= limit:
        return
    fitting = next((n for n in range(caches, -1, -1) if (efs_policy_length(config, models, n) or 0) <= limit), None)
    fix = (f"compileCache off on {caches - fitting} of them, or fewer models on this file system"
           if fitting is not None else "fewer models on this file system")
    yield Problem("models", f"the weights file system's policy would be {length:,} characters, over the {limit:,} "
                  "EFS takes: it names each model's serving access point twice and each shared compile cache's "
                  "access point five times", f"{models} models, {caches} with a shared compile cache", fix)


# What the Run:ai Model Streamer reads: safetensors only (vLLM's runai_model_streamer page: "vLLM supports
# loading weights in Safetensors format using the Run:ai Model Streamer").
STREAMER_FORMATS = ("safetensors",)


def s3_rules(config: ServingStackArgs) -> Iterator[Problem]:
    """The S3 backend: a read figure to plan on (cited for the instance types llm_serving/storage/s3_throughput
    knows), an image with the streamer's S3 backend and checkpoints it can read. Multi-node groups stream
    too: each stage's pod reads the whole checkpoint once, split over its ranks
    (engine.streamer_extra_config), and the planner counts it (planning.model_plan)."""
    s3 = config.weights_storage.s3
    instance_type = config.gpu_node_group.instance_type.lower()
    if s3.read_mib_per_second is None and instance_type not in storage.NODE_S3_GBPS:
        yield Problem("weightsStorage.s3.readMibPerSecond", "backend s3 plans cold starts, probes and the "
                      f"scale-down window on the MiB/s one pod streams, and no cited S3 bandwidth of "
                      f"{instance_type} is built in", None,
                      f"the measured MiB/s per pod (e.g. 2000), or an instance type of {sorted(storage.NODE_S3_GBPS)}")
    if s3.bucket_region is not None and s3.bucket_name is None:
        yield Problem("weightsStorage.s3.bucketRegion", "only describes an existing bucket; the program creates "
                      "its bucket in the stack's region", s3.bucket_region, "unset, or with bucketName")
    if s3.vpc_endpoint is False and config.cluster.mode is ClusterMode.CREATE:
        yield Problem("weightsStorage.s3.vpcEndpoint", "cluster.mode create builds the VPC with an S3 gateway "
                      "endpoint on every private route table", s3.vpc_endpoint, "unset or true")
    for model in config.models:
        path = f"models[{model.name}]"
        image = model.image
        has_streamer = image.s3_streamer if image.s3_streamer is not None else (
            image.repository == versions.VLLM_IMAGE_REPOSITORY and versions.VLLM_IMAGE_HAS_S3_STREAMER)
        if not has_streamer:
            yield Problem(f"{path}.image.s3Streamer", f"backend s3 streams weights with the Run:ai Model Streamer's "
                          f"S3 backend, which {image.repository}:{image.tag} is not known to carry",
                          image.s3_streamer, "true, with an image that has runai-model-streamer[s3] "
                          "(vllm/vllm-openai does), or another weightsStorage.backend")
        if model.weights_format not in STREAMER_FORMATS:
            yield Problem(f"{path}.weightsFormat", "the Run:ai Model Streamer loads safetensors checkpoints only",
                          model.weights_format, "safetensors, or another weightsStorage.backend")

def existing_bucket_problems(name: str, found_region: str | None, stack_region: str) -> list[Problem]:
    """The preview's look-up of weightsStorage.s3.bucketName: missing (or not readable by the deployer), or
    in another region than the cluster (every cold start would stream across regions)."""
    key = "weightsStorage.s3.bucketName"
    if found_region is None:
        return [Problem(key, "no such bucket, or the deploying role cannot read it", name,
                        "an existing bucket in this account and region, or unset to create one")]
    if found_region != stack_region:
        return [Problem(key, f"the bucket is in {found_region}, the cluster in {stack_region}: every cold start "
                        "would stream across regions", name, f"a bucket in {stack_region}")]
    return []


def addon_version_rules(config: ServingStackArgs) -> Iterator[Problem]:
    """Every EKS add-on the stack creates has a build pinned for the cluster's minor (versions.py)."""
    minor = config.cluster.kubernetes_version
    weights = config.weights_storage
    installed = {
        "eks-node-monitoring-agent": (f"{NG}.autoRepair.installMonitoringAgent",
                                      creates_nodes(config) and config.gpu_node_group.auto_repair.enabled
                                      and config.gpu_node_group.auto_repair.install_monitoring_agent),
        storage.CSI_ADDON: ("weightsStorage.efs.installCsiDriver",
                            weights.backend is StorageBackend.EFS and weights.efs.install_csi_driver),
        storage.FSX_CSI_ADDON: ("weightsStorage.fsxLustre.installCsiDriver",
                                weights.backend is StorageBackend.FSX_LUSTRE and weights.fsx_lustre.install_csi_driver),
    }
    for addon, (key, wanted) in installed.items():
        if not wanted:
            continue
        try:
            addon_version(addon, minor)
        except ValueError as error:
            yield Problem("cluster.kubernetesVersion", str(error), minor,
                          f"{', '.join(sorted(versions.EKS_ADDON_VERSIONS[addon]))}, or {key}: false")
