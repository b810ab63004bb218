"""What a stack says about where model weights are pre-staged: an EFS file system, FSx for Lustre, an S3
bucket the pods stream from, or a StorageClass the cluster has. Shapes and ranges only; relations are the
stack's rules (llm_serving.stack.rules)."""

from enum import StrEnum

from pydantic import Field

from llm_serving.platform import versions
from llm_serving.platform.args import (
    AWS_REGION,
    DNS_LABEL,
    IAM_ROLE_ARN,
    IMAGE_DIGEST,
    LABEL_KEY,
    LABEL_VALUE,
    S3_BUCKET_NAME,
    SECURITY_GROUP_ID,
    args_type,
    check_each,
    check_in,
    check_labels,
)

# FSx for Lustre PERSISTENT_2 throughput tiers, MB/s per TiB (FSx API, PerUnitStorageThroughput).
PER_UNIT_STORAGE_THROUGHPUTS = (125, 250, 500, 1000)


class StorageBackend(StrEnum):
    """Where the weights live."""

    EFS = "efs"
    FSX_LUSTRE = "fsxLustre"
    EXISTING_STORAGE_CLASS = "existingStorageClass"
    S3 = "s3"


@args_type
class EfsArgs:
    """The EFS file system this program creates for the weights."""

    install_csi_driver: bool = True
    """Install the `aws-efs-csi-driver` EKS add-on; false when the cluster already has it."""
    staging_node_role_arn: str | None = Field(default=None, **IAM_ROLE_ARN)
    """IAM role of the CPU nodes the staging Jobs run on: the only principal the file-system policy lets write (mounts
    use the node's role, `iam` mount option). Required in prod and staging with cluster mode `existing`; with mode
    `create`, unset means the created CPU nodes' role; unset in dev with mode `existing`: no file-system policy."""
    staging_node_security_group_ids: list[str] = Field(default_factory=list, max_length=5)
    """Security groups of those nodes of their own (not the cluster security group, which every node carries): the
    mount targets admit NFS only from these and the GPU nodes' group. Required in prod and staging with cluster mode
    `existing`; with mode `create`, empty means the created CPU nodes' group; empty in dev with mode `existing`: NFS
    from the cluster security group."""
    staging_node_selector: dict[str, str] = Field(default_factory=dict)
    """Labels of those nodes, added to the staging Job's nodeSelector so it runs where it may write."""
    _check_staging_node_security_group_ids = check_each("staging_node_security_group_ids", SECURITY_GROUP_ID)
    _check_staging_node_selector = check_labels("staging_node_selector", LABEL_KEY, LABEL_VALUE)


@args_type
class FsxLustreArgs:
    """The FSx for Lustre (PERSISTENT_2) file system this program creates for the weights."""

    storage_capacity_gib: int = Field(default=2400, ge=1200, le=4000000)
    """Capacity in GiB: 1200, 2400 or a multiple of 2400; read speed grows with it."""
    per_unit_storage_throughput: int = 500
    """MB/s per TiB of capacity (125, 250, 500 or 1000); sets the read speed and price."""
    install_csi_driver: bool = True
    """Install the `aws-fsx-csi-driver` EKS add-on; false when the cluster already has it."""
    _check_per_unit_storage_throughput = check_in("per_unit_storage_throughput", PER_UNIT_STORAGE_THROUGHPUTS)


@args_type
class ExistingStorageClassArgs:
    """A StorageClass the cluster already has, and the read speed its operator vouches for."""

    name: str = Field(**DNS_LABEL)
    """StorageClass name."""
    read_mib_per_second: float = Field(gt=0, le=100000)
    """Sustained read MiB/s one pod gets; sizes cold starts and startup probes."""


@args_type
class S3Args:
    """The S3 bucket the weights are staged to and streamed from (vLLM's Run:ai Model Streamer)."""

    bucket_name: str | None = Field(default=None, **S3_BUCKET_NAME)
    """An existing bucket to stage into (under `<modelId>/<revision>/`); unset: the program creates an encrypted,
    versioned bucket, retained by `pulumi destroy` and protected in prod."""
    bucket_region: str | None = Field(default=None, **AWS_REGION)
    """Region of the existing bucket; the preview refuses one other than the stack's `aws:region`."""
    read_mib_per_second: float | None = Field(default=None, gt=0, le=100000)
    """Sustained MiB/s one pod streams from the bucket, as measured (e.g. from the `Loading weights took` line of a
    first deploy); cold starts, startup probes and the scale-down window are planned on it. Unset: the lowest of the
    streamer's published S3 throughput at `streamerConcurrency`, the pod's share of its node's bandwidth and of the
    prefix's GET rate (docs/capacity-planner.md); required on instance types without a cited S3 bandwidth (every
    type but p5.4xlarge, p5.48xlarge, p5e.48xlarge)."""
    streamer_concurrency: int = Field(default=16, ge=1, le=256)
    """Run:ai Model Streamer `concurrency`: threads, and for S3 client connections, reading one pod's tensors (vLLM's
    runai_model_streamer page: 16 in its example)."""
    streamer_memory_limit_gib: int = Field(default=8, ge=1, le=512)
    """Run:ai Model Streamer `memory_limit`: the CPU buffer the tensors pass through, in GiB per rank (vLLM sets
    RUNAI_STREAMER_MEMORY_LIMIT in each rank's process, runai_streamer_loader.py@0.33.0), so a pod holds up to
    tensorParallelSize x this of its memory request (the preview refuses more than half of it); without a limit the
    streamer may buffer a whole shard per reader."""
    vpc_endpoint: bool | None = None
    """Whether an S3 gateway endpoint of the cluster's VPC is on the route table of every `gpuNodeGroup.subnets` entry.
    true: the pods that stream from the bucket (serving pods, multi-node workers, compile-cache producers) may reach on
    443 only the CIDRs of the AWS-managed prefix list `com.amazonaws.<region>.s3`, read at every preview (preflight's
    `s3.gateway-endpoint` proves the endpoint, and that no S3 interface endpoint's private DNS answers the VPC's own
    lookups, which would send the pods to addresses outside the list; `s3.prefix-list` the list); false: any address
    on 443, as without an
    endpoint S3 is reached through the NAT gateway at public addresses only ip-ranges.json publishes. Unset: true
    with `cluster.mode: create` (its VPC has one on every private route table), false with `existing`. The staging
    Job also downloads from the Hugging Face Hub and keeps any address on 443 either way."""


@args_type
class WeightsStorageArgs:
    """The storage every model's weights are pre-staged on."""

    backend: StorageBackend = StorageBackend.EFS
    """`efs`: an encrypted EFS file system with Elastic throughput, created and retained by this program; `fsxLustre`:
    an FSx for Lustre file system, the fastest cold starts; `existingStorageClass`: a class the cluster has; `s3`:
    an S3 bucket the pods stream from with vLLM's Run:ai Model Streamer, no volume."""
    efs: EfsArgs = Field(default_factory=EfsArgs)
    """With backend `efs`."""
    fsx_lustre: FsxLustreArgs = Field(default_factory=FsxLustreArgs)
    """With backend `fsxLustre`."""
    s3: S3Args = Field(default_factory=S3Args)
    """With backend `s3`."""
    existing_storage_class: ExistingStorageClassArgs | None = None
    """With backend `existingStorageClass`: the class and its read speed."""
    stage_image_digest: str = Field(default=versions.STAGE_IMAGE_DIGEST, **IMAGE_DIGEST)
    """Digest of the staging Job's Python image (its tag is pinned in llm_serving/platform/versions.py); the Job
    pulls it by digest."""
    max_cold_start_seconds: int = Field(default=3600, ge=300, le=6 * 3600)
    """Longest planned cold start a model may have on this storage; longer is rejected."""
