"""Where model weights live: an EFS file system the program owns (or a StorageClass the operator
vouches for), with the throughput the capacity planner plans cold starts on."""

from .efs import ServingMount, WeightsFileSystem, WeightsFileSystemArgs
from .fsx import WeightsLustre, WeightsLustreArgs
from .objects import (
    CSI_ADDON,
    EFS_CLAIM_PLACEHOLDER_GIB,
    EFS_READ_MIB_PER_SECOND,
    FSX_CSI_ADDON,
    LUSTRE_THROUGHPUTS,
    lustre_capacity_problem,
    lustre_read_mib_per_second,
    mount_target_subnets,
    storage_class,
)

__all__ = [
    "CSI_ADDON",
    "FSX_CSI_ADDON",
    "EFS_CLAIM_PLACEHOLDER_GIB",
    "EFS_READ_MIB_PER_SECOND",
    "LUSTRE_THROUGHPUTS",
    "ServingMount",
    "WeightsFileSystem",
    "WeightsFileSystemArgs",
    "WeightsLustre",
    "WeightsLustreArgs",
    "lustre_capacity_problem",
    "lustre_read_mib_per_second",
    "mount_target_subnets",
    "storage_class",
]
