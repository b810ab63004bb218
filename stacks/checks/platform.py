"""Cross-field rules about the platform under the models: cluster version, node autoscaling, weights
storage (pure). stacks/checks/ runs them with its own rules; each returns problems, never raises.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

from components import gpu, storage
from components.platform import addon_version, versions
from stacks.config import (
    AmiType,
    ClusterMode,
    Environment,
    ExistingAutoscaler,
    NetworkPolicyEnforcement,
    NodeAutoscalingMode,
    StackConfig,
    StorageBackend,
)
from stacks.config.problems import Problem

NG = "gpuNodeGroup"


def cluster_version_problem(config: StackConfig, actual: str) -> Problem | None:
    """The looked-up cluster runs another minor than the stack file says: CreateNodegroup accepts only
    the control plane's version, Cluster Autoscaler must match it, and the objects were validated
    against the stack's version."""
    expected = config.cluster.kubernetes_version
    if actual == expected:
        return None
    return Problem("cluster.kubernetesVersion", f"cluster {config.cluster.name} runs Kubernetes {actual}", expected,
                   f"{actual!r} (with gpuNodeGroup.amiReleaseVersion a {actual} release, or unset); the GPU node "
                   "group then moves to a new generation beside the old one")


def network_policy_enforcement_problem(config: StackConfig, vpc_cni_configuration: str | None) -> Problem | None:
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


def node_autoscaling_rules(config: StackConfig) -> Iterator[Problem]:
    autoscaling = config.node_autoscaling
    minor = config.cluster.kubernetes_version
    if autoscaling.mode is NodeAutoscalingMode.EXISTING:
        if autoscaling.existing is None:
            yield Problem("nodeAutoscaling.existing", "mode existing needs the autoscaler the cluster runs", None,
                          "cluster-autoscaler")
        elif autoscaling.existing is ExistingAutoscaler.KARPENTER:
            yield Problem("nodeAutoscaling.existing", "Karpenter launches its own nodes and never resizes an EKS "
                          "managed node group, so this program's GPU group would not grow", "karpenter",
                          "cluster-autoscaler, or mode none (the group's fixed desiredNodes)")
    elif autoscaling.existing is not None:
        yield Problem("nodeAutoscaling.existing", f"only read with mode existing, not {autoscaling.mode.value}",
                      autoscaling.existing.value, "unset")
    if autoscaling.mode is NodeAutoscalingMode.CLUSTER_AUTOSCALER:
        try:
            gpu.image_tag_for(minor, versions.CLUSTER_AUTOSCALER_IMAGE_TAGS)
        except ValueError as error:
            yield Problem("cluster.kubernetesVersion", str(error), minor,
                          ", ".join(sorted(versions.CLUSTER_AUTOSCALER_IMAGE_TAGS)))
    release = config.gpu_node_group.ami_release_version
    al2023 = config.gpu_node_group.ami_type is AmiType.AL2023_X86_64_NVIDIA
    if al2023 and release is not None and not release.startswith(f"{minor}."):
        # EKS AL2023 AMI releases are named <kubernetes minor>.<patch>-<date>; CreateNodegroup rejects
        # a release of another minor. Bottlerocket releases carry the OS version (e.g. 1.47.0-6154605b).
        yield Problem(f"{NG}.amiReleaseVersion", f"not a release for Kubernetes {minor} (cluster.kubernetesVersion)",
                      release, f"a {minor}.x release, or unset")


def weights_storage_rules(config: StackConfig) -> Iterator[Problem]:
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
    if weights.backend is StorageBackend.EFS and not weights.efs.staging_node_security_group_ids and vouched:
        # Without it NFS would be admitted from the cluster security group: every node and the control plane.
        yield Problem("weightsStorage.efs.stagingNodeSecurityGroupIds", f"{config.environment.value} needs the "
                      "staging nodes' own security group so the mount targets admit NFS only from them and the GPU "
                      "nodes", [], "the id of a security group the staging nodes carry besides the cluster's, e.g. "
                      "[sg-0123456789abcdef0]")
    if weights.backend is not StorageBackend.EXISTING_STORAGE_CLASS and weights.existing_storage_class is not None:
        yield Problem("weightsStorage.existingStorageClass", "only read with backend existingStorageClass",
                      weights.existing_storage_class.name, "unset, or backend existingStorageClass")


def addon_version_rules(config: StackConfig) -> Iterator[Problem]:
    """Every EKS add-on the stack creates has a build pinned for the cluster's minor (versions.py)."""
    minor = config.cluster.kubernetes_version
    weights = config.weights_storage
    installed = {
        "eks-node-monitoring-agent": (f"{NG}.autoRepair.installMonitoringAgent",
                                      config.gpu_node_group.auto_repair.enabled
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
