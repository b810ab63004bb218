"""Labels, taint, selectors and tolerations that tie GPU workloads to the GPU node group.

One module owns them so the node group, the device plugin, the DCGM exporter and vLLM pods can
never disagree about which nodes are GPU nodes (a mismatch schedules a DaemonSet nowhere).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

# The taint keeps every pod that does not ask for a GPU off the most expensive nodes. Value "true"
# is the EKS convention (e.g. clowdhaus/cookiecluster cookiecluster/templates/node-group-accel.tpl
# @ 0a519c10); the NVIDIA charts' defaults assume other values, see below.
GPU_TAINT_KEY = "nvidia.com/gpu"
GPU_TAINT_VALUE = "true"
GPU_TAINT_EFFECT = "NoSchedule"
# The EKS API spells taint effects in upper snake case (CreateNodegroup API, Taint.effect).
GPU_TAINT_EFFECT_EKS = "NO_SCHEDULE"

# Set by the node group itself, so it exists from the node's first second: the device plugin's
# default affinity accepts it (chart values.yaml, nvidia-device-plugin 0.20.0), and it does not
# wait for node-feature-discovery to label the node.
GPU_PRESENT_LABEL = "nvidia.com/gpu.present"
# GPU feature discovery's product label; the seed's nodeSelector uses it.
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
# What an EFA node offers besides its GPUs, as the node template Cluster Autoscaler reads when a group
# has no node to look at: the device plugin's resource per EFA interface, and the 2 MiB huge pages
# the EFA-enabled EKS AMIs pre-allocate for libfabric (5128 x 2 MiB; EKS user guide, node-efa). A
# multi-node rank requests both (llm_serving/serving/multinode.py: every interface, 5120Mi).
EFA_RESOURCE = "vpc.amazonaws.com/efa"
EFA_NODE_HUGEPAGES_2MI = "10256Mi"
# Our own label naming the node group, so a workload lands on this group and not another GPU group.
NODE_GROUP_LABEL = "llm-serving/node-group"
# A hash of everything that decides what a node boots (Kubernetes version, AMI, launch template
# inputs). A change replaces the node group beside the old one, and since vLLM pods select the
# label, their Deployments roll onto the new nodes under their own strategy before the old group is
# deleted: no drain under a PodDisruptionBudget (docs/operations.md, "Node updates").
NODE_GENERATION_LABEL = "llm-serving/node-generation"


def node_generation(parts: dict[str, object]) -> str:
    """Ten hex digits of the SHA-256 of the sorted `parts`; stable across runs and Python versions."""
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:10]


# Cluster Autoscaler's AWS GPU label (cloudprovider/aws aws_cloud_provider.go GPULabel): a node
# carrying it with no allocatable GPU yet counts as not ready, so CA does not launch another node
# while the device plugin is still starting (its README, "Special note on GPU instances").
CLUSTER_AUTOSCALER_GPU_LABEL = "k8s.amazonaws.com/accelerator"


def node_labels(node_group: str, generation: str, accelerator: str,
                extra: dict[str, str] | None = None) -> dict[str, str]:
    """Labels the managed node group puts on every node it launches, from its first second."""
    return {**(extra or {}), GPU_PRESENT_LABEL: "true", NODE_GROUP_LABEL: node_group,
            NODE_GENERATION_LABEL: generation, CLUSTER_AUTOSCALER_GPU_LABEL: accelerator}


def gpu_tolerations() -> list[dict[str, str]]:
    """Tolerate the GPU taint whatever its value, as the NVIDIA charts do."""
    return [{"key": GPU_TAINT_KEY, "operator": "Exists", "effect": GPU_TAINT_EFFECT}]


def addon_node_selector() -> dict[str, str]:
    """Where GPU add-ons (device plugin, GFD, NFD worker, DCGM exporter) run: every GPU node."""
    return {GPU_PRESENT_LABEL: "true"}


def workload_node_selector(node_group: str, generation: str | None, gpu_product: str) -> dict[str, str]:
    """Where GPU workloads run: this node group's current generation, and only if GFD confirmed the
    GPU product. `generation` None: any generation of the group (a group updated in place, whose old
    and new nodes must both accept a replica while the update replaces them one by one)."""
    if generation is None:
        return {NODE_GROUP_LABEL: node_group, GPU_PRODUCT_LABEL: gpu_product}
    return {NODE_GROUP_LABEL: node_group, NODE_GENERATION_LABEL: generation, GPU_PRODUCT_LABEL: gpu_product}


def device_plugin_values(node_selector: dict[str, str] | None = None,
                         tolerations: list[dict[str, str]] | None = None) -> dict[str, Any]:
    """Helm values for nvidia-device-plugin that schedule it, GFD and NFD exactly on GPU nodes (the created
    group's, or existing nodes chosen by `node_selector` and `tolerations`).

    The chart's bundled NFD worker tolerates only `nvidia.com/gpu=present:NoSchedule` (chart
    values.yaml `nfd.worker.tolerations`, operator Equal), so on nodes tainted
    `nvidia.com/gpu=true:NoSchedule` NFD never runs, GFD gets no PCI labels and the seed's
    `nvidia.com/gpu.product` selector matches nothing. Helm replaces lists, so the toleration
    lists below are the effective ones.
    """
    selector = node_selector if node_selector is not None else addon_node_selector()
    tolerated = tolerations if tolerations is not None else gpu_tolerations()
    return {
        # GFD labels nvidia.com/gpu.product, .count, .memory; it brings NFD as a subchart.
        "gfd": {"enabled": True},
        "nodeSelector": selector,
        "tolerations": tolerated,
        "nfd": {
            "worker": {
                "nodeSelector": selector,
                "tolerations": tolerated,
            },
        },
    }
