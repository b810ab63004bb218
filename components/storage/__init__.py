"""Where model weights live: an EFS file system the program owns (or a StorageClass the operator
vouches for), with the throughput the capacity planner plans cold starts on."""

from .efs import WeightsFileSystem, WeightsFileSystemArgs
from .objects import EFS_CLAIM_PLACEHOLDER_GIB, EFS_READ_MIB_PER_SECOND, mount_target_subnets, storage_class

__all__ = [
    "EFS_CLAIM_PLACEHOLDER_GIB",
    "EFS_READ_MIB_PER_SECOND",
    "WeightsFileSystem",
    "WeightsFileSystemArgs",
    "mount_target_subnets",
    "storage_class",
]
