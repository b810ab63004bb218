"""How much of a node's disk pods may request as ephemeral storage, and the disk a request needs.

The scheduler places a pod only on a node whose allocatable `ephemeral-storage` covers its request; the
kubelet derives it from the filesystem of its root directory: capacity minus kube-reserved and the hard
eviction threshold (Kubernetes docs, reserve-compute-resources, "Node Allocatable"). The figures are the ones
the EKS AMIs' nodeadm writes into every node's kubelet configuration.
"""

from __future__ import annotations

import math

# nodeadm's kubelet defaults (awslabs/amazon-eks-ami nodeadm/internal/kubelet/config.go at v20260724):
# kubeReserved "ephemeral-storage": "1Gi", evictionHard "nodefs.available": "10%".
KUBE_RESERVED_EPHEMERAL_GIB = 1
NODEFS_EVICTION_FRACTION = 0.10
# The EKS AL2023 AMI's own root volume (awslabs/amazon-eks-ami templates/al2023/variables-default.json at v20260724,
# launch_block_device_mappings_volume_size "20"): the OS and the images baked in. The images every pod on the node
# pulls come on top; this is the least the OS side of the disk holds, so a pod filling its request to the brim does
# not push the node under the eviction threshold.
EKS_AMI_ROOT_GIB = 20


def allocatable_ephemeral_gib(disk_gib: float) -> float:
    """What pods may request of a node whose kubelet directory sits on a `disk_gib` volume."""
    return disk_gib * (1 - NODEFS_EVICTION_FRACTION) - KUBE_RESERVED_EPHEMERAL_GIB


def disk_for_ephemeral_gib(request_gib: float) -> int:
    """The smallest volume (GiB) on which a pod requesting `request_gib` is scheduled, and on which filling it
    beside the OS keeps the node above the eviction threshold: both hold once (request + reserve + OS) fits in
    the 90% the threshold leaves."""
    return math.ceil((request_gib + KUBE_RESERVED_EPHEMERAL_GIB + EKS_AMI_ROOT_GIB) / (1 - NODEFS_EVICTION_FRACTION))
