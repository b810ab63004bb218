"""Where model weights live: an EFS file system the program owns (or a StorageClass the operator
vouches for), with the throughput the capacity planner plans cold starts on."""

from .efs import WeightsFileSystem, WeightsFileSystemArgs
from .fsx import WeightsLustre, WeightsLustreArgs
from .objects import (
    COMPILE_CACHE_CLAIM,
    COMPILE_CACHE_ROOT,
    CSI_ADDON,
    EFS_CLAIM_PLACEHOLDER_GIB,
    EFS_READ_MIB_PER_SECOND,
    FSX_CSI_ADDON,
    LUSTRE_THROUGHPUTS,
    compile_cache_claim,
    compile_cache_volume,
    lustre_capacity_problem,
    lustre_read_mib_per_second,
    mount_target_subnets,
    storage_class,
)

__all__ = [
    "COMPILE_CACHE_CLAIM",
    "COMPILE_CACHE_ROOT",
    "compile_cache_claim",
    "compile_cache_volume",
    "CSI_ADDON",
    "FSX_CSI_ADDON",
    "EFS_CLAIM_PLACEHOLDER_GIB",
    "EFS_READ_MIB_PER_SECOND",
    "LUSTRE_THROUGHPUTS",
    "WeightsFileSystem",
    "WeightsFileSystemArgs",
    "WeightsLustre",
    "WeightsLustreArgs",
    "lustre_capacity_problem",
    "lustre_read_mib_per_second",
    "mount_target_subnets",
    "storage_class",
]
