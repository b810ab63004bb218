"""Configuration of where model weights are pre-staged: EFS, FSx for Lustre, an existing
StorageClass or an S3 bucket, and the claim the replicas share. Feeds components/storage.
Shapes and ranges only; relations are checked in stacks/checks/.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field

from components.platform import versions
from stacks.config.base import (
    AwsRegion,
    ConfigModel,
    DnsLabel,
    IamRoleArn,
    ImageDigest,
    LabelKey,
    LabelValue,
    S3BucketName,
    SecurityGroupId,
)


class AccessMode(StrEnum):
    """How the weights volume is shared: many replicas need ReadWriteMany (e.g. EFS)."""

    READ_WRITE_MANY = "ReadWriteMany"
    READ_WRITE_ONCE = "ReadWriteOnce"


class WeightsStorageConfig(ConfigModel):
    """One model's weights claim on the stack's weights storage (`weightsStorage`)."""

    access_mode: AccessMode = Field(
        default=AccessMode.READ_WRITE_MANY,
        description=(
            "ReadWriteMany lets every replica, on any node, mount the same weights. ReadWriteOnce (an EBS "
            "class under `existingStorageClass`) allows one replica, pinned to the node group's first zone."
        ),
    )
    size_gib: int | None = Field(
        default=None,
        ge=1,
        le=65536,
        description=(
            "Claim size in GiB, required with `existingStorageClass` (EFS ignores it; FSx uses the file system's "
            "capacity). Size it for two revisions; never lower it for an existing claim: Kubernetes refuses."
        ),
    )


class StorageBackend(StrEnum):
    """Where the weights live."""

    EFS = "efs"
    FSX_LUSTRE = "fsxLustre"
    EXISTING_STORAGE_CLASS = "existingStorageClass"
    S3 = "s3"


class EfsStorageConfig(ConfigModel):
    """The EFS file system this program creates for the weights."""

    install_csi_driver: bool = Field(
        default=True,
        description="Install the `aws-efs-csi-driver` EKS add-on; false when the cluster already has it.",
    )
    staging_node_role_arn: IamRoleArn | None = Field(
        default=None,
        description=(
            "IAM role of the CPU nodes the staging Jobs run on: the only principal the file-system policy "
            "lets write (mounts use the node's role, `iam` mount option). Required in prod and staging with "
            "cluster mode `existing`; with mode `create`, unset means the created CPU nodes' role; unset in dev "
            "with mode `existing`: no file-system policy."
        ),
    )
    # At most 5: a network interface carries at most 5 security groups by default (VPC quotas,
    # "Security groups per network interface"), so no node can carry more for this list to name.
    staging_node_security_group_ids: list[SecurityGroupId] = Field(
        default_factory=list,
        max_length=5,
        description=(
            "Security groups of those nodes of their own (not the cluster security group, which every node "
            "carries): the mount targets admit NFS only from these and the GPU nodes' group. Required in prod "
            "and staging with cluster mode `existing`; with mode `create`, empty means the created CPU nodes' "
            "group; empty in dev with mode `existing`: NFS from the cluster security group."
        ),
    )
    staging_node_selector: dict[LabelKey, LabelValue] = Field(
        default_factory=dict,
        description="Labels of those nodes, added to the staging Job's nodeSelector so it runs where it may write.",
    )


class FsxLustreConfig(ConfigModel):
    """The FSx for Lustre (PERSISTENT_2) file system this program creates for the weights."""

    storage_capacity_gib: int = Field(
        default=2400, ge=1200, le=4_000_000,
        description="Capacity in GiB: 1200, 2400 or a multiple of 2400; read speed grows with it.",
    )
    per_unit_storage_throughput: Literal[125, 250, 500, 1000] = Field(
        default=500, description="MB/s per TiB of capacity (125, 250, 500 or 1000); sets the read speed and price."
    )
    install_csi_driver: bool = Field(
        default=True,
        description="Install the `aws-fsx-csi-driver` EKS add-on; false when the cluster already has it.",
    )


class ExistingStorageClassConfig(ConfigModel):
    """A StorageClass the cluster already has, and the read speed its operator vouches for."""

    name: DnsLabel = Field(description="StorageClass name.")
    read_mib_per_second: float = Field(
        gt=0, le=100000, description="Sustained read MiB/s one pod gets; sizes cold starts and startup probes."
    )


class S3StorageConfig(ConfigModel):
    """The S3 bucket the weights are staged to and streamed from (vLLM's Run:ai Model Streamer)."""

    bucket_name: S3BucketName | None = Field(
        default=None,
        description=(
            "An existing bucket to stage into (under `<modelId>/<revision>/`); unset: the program creates an "
            "encrypted, versioned bucket, retained by `pulumi destroy` and protected in prod."
        ),
    )
    bucket_region: AwsRegion | None = Field(
        default=None,
        description="Region of the existing bucket; the preview refuses one other than the stack's `aws:region`.",
    )
    read_mib_per_second: float | None = Field(
        default=None, gt=0, le=100000,
        description=(
            "Sustained MiB/s one pod streams from the bucket, as measured (e.g. from the `Loading weights took` "
            "line of a first deploy); cold starts, startup probes and the scale-down window are planned on it. "
            "Unset: the lowest of the streamer's published S3 throughput at `streamerConcurrency`, the pod's share "
            "of its node's bandwidth and of the prefix's GET rate (docs/capacity-planner.md); required on "
            "instance types without a cited S3 bandwidth (every type but p5.4xlarge, p5.48xlarge, p5e.48xlarge)."
        ),
    )
    streamer_concurrency: int = Field(
        default=16, ge=1, le=256,
        description=(
            "Run:ai Model Streamer `concurrency`: threads, and for S3 client connections, reading one pod's "
            "tensors (vLLM's runai_model_streamer page: 16 in its example)."
        ),
    )
    streamer_memory_limit_gib: int = Field(
        default=8, ge=1, le=512,
        description=(
            "Run:ai Model Streamer `memory_limit`: the CPU buffer the tensors pass through, in GiB per rank "
            "(vLLM sets RUNAI_STREAMER_MEMORY_LIMIT in each rank's process, runai_streamer_loader.py@0.33.0), so a "
            "pod holds up to tensorParallelSize x this of its memory request (the preview refuses more than half of "
            "it); without a limit the streamer may buffer a whole shard per reader."
        ),
    )


class WeightsBackendConfig(ConfigModel):
    """The storage every model's weights are pre-staged on."""

    backend: StorageBackend = Field(
        default=StorageBackend.EFS,
        description=(
            "`efs`: an encrypted EFS file system with Elastic throughput, created and retained by this program; "
            "`fsxLustre`: an FSx for Lustre file system, the fastest cold starts; `existingStorageClass`: a class "
            "the cluster has; `s3`: an S3 bucket the pods stream from with vLLM's Run:ai Model Streamer, no volume."
        ),
    )
    efs: EfsStorageConfig = Field(default_factory=EfsStorageConfig, description="With backend `efs`.")
    fsx_lustre: FsxLustreConfig = Field(default_factory=FsxLustreConfig, description="With backend `fsxLustre`.")
    s3: S3StorageConfig = Field(default_factory=S3StorageConfig, description="With backend `s3`.")
    existing_storage_class: ExistingStorageClassConfig | None = Field(
        default=None, description="With backend `existingStorageClass`: the class and its read speed."
    )
    stage_image_digest: ImageDigest = Field(
        default=versions.STAGE_IMAGE_DIGEST,
        description=f"Digest of the staging Job's image `{versions.STAGE_IMAGE}` (pulled by digest).",
    )
    max_cold_start_seconds: int = Field(
        default=3600,
        ge=300,
        le=6 * 3600,
        description="Longest planned cold start a model may have on this storage; longer is rejected.",
    )
