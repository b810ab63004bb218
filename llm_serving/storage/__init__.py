"""Where model weights live: an EFS file system the program owns, FSx for Lustre, an S3 bucket the pods
stream from (or a StorageClass the operator vouches for), with the throughput cold starts are planned on."""

from .args import (
    EfsArgs,
    ExistingStorageClassArgs,
    FsxLustreArgs,
    S3Args,
    StorageBackend,
    WeightsStorageArgs,
)
from .buckets import adapter_source_policy, model_prefix, model_uri, s3_prefix_list_name
from .efs import CompileCacheMount, ServingMount, WeightsFileSystem, WeightsFileSystemArgs
from .fsx import WeightsLustre, WeightsLustreArgs
from .objects import (
    COMPILE_CACHE_ROOT,
    CSI_ADDON,
    EFS_CLAIM_PLACEHOLDER_GIB,
    EFS_READ_MIB_PER_SECOND,
    FSX_CSI_ADDON,
    LUSTRE_THROUGHPUTS,
    compile_cache_claim,
    compile_cache_claim_name,
    compile_cache_directory,
    compile_cache_volume,
    lustre_capacity_problem,
    lustre_read_mib_per_second,
    mount_target_subnets,
    storage_class,
)
from .policy_size import FILE_SYSTEM_POLICY_MAX_CHARS, file_system_policy_length
from .s3 import AdapterSources, AdapterSourcesArgs, BucketAccess, WeightsBucket, WeightsBucketArgs
from .s3_throughput import NODE_S3_GBPS, S3ReadEstimate, S3ReadTerm, s3_read_estimate, streamer_mib_per_second

__all__ = [
    "AdapterSources",
    "AdapterSourcesArgs",
    "BucketAccess",
    "COMPILE_CACHE_ROOT",
    "CSI_ADDON",
    "CompileCacheMount",
    "EFS_CLAIM_PLACEHOLDER_GIB",
    "EFS_READ_MIB_PER_SECOND",
    "EfsArgs",
    "ExistingStorageClassArgs",
    "FILE_SYSTEM_POLICY_MAX_CHARS",
    "FSX_CSI_ADDON",
    "FsxLustreArgs",
    "LUSTRE_THROUGHPUTS",
    "NODE_S3_GBPS",
    "S3Args",
    "S3ReadEstimate",
    "S3ReadTerm",
    "ServingMount",
    "StorageBackend",
    "WeightsBucket",
    "WeightsBucketArgs",
    "WeightsFileSystem",
    "WeightsFileSystemArgs",
    "WeightsLustre",
    "WeightsLustreArgs",
    "WeightsStorageArgs",
    "adapter_source_policy",
    "compile_cache_claim",
    "compile_cache_claim_name",
    "compile_cache_directory",
    "compile_cache_volume",
    "file_system_policy_length",
    "lustre_capacity_problem",
    "lustre_read_mib_per_second",
    "model_prefix",
    "model_uri",
    "mount_target_subnets",
    "s3_prefix_list_name",
    "s3_read_estimate",
    "storage_class",
    "streamer_mib_per_second",
]
