"""Catalog of the AWS GPU instance types this program can serve vLLM on, and of their GPUs.
Every figure is a cited fact (sources below), so node groups, GFD node selectors, pod requests and
KV-cache sizing are derived from one place instead of from numbers retyped in each component.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

# Sources cited next to the figures below (facts only; nothing is copied from them):
#   [AWS-AC]  AWS, "Specifications for Amazon EC2 accelerated computing instances",
#             https://docs.aws.amazon.com/ec2/latest/instancetypes/ac.html — performance table
#             (memory GiB, vCPUs, accelerators), network table (EFA yes/no, network cards) and
#             instance store table ("N x size GB" NVMe SSD).
#   [KARP]    aws/karpenter-provider-aws website/content/en/preview/reference/instance-types.md
#             @ 1d927085 (generated from EC2 DescribeInstanceTypes): `vpc.amazonaws.com/efa` is
#             EfaInfo.MaximumEfaInterfaces, `instance-local-nvme` is InstanceStorageInfo.TotalSizeInGB
#             (pkg/providers/instancetype/types.go `efas()` and the NVMe label code).
#   [GFD]     NVIDIA/k8s-device-plugin internal/lm/resource.go @ 1b826acc: `nvidia.com/gpu.product` is
#             the NVML device name with characters outside [A-Za-z0-9-_. ] dropped and each run of
#             whitespace turned into "-" (`sanitise`). Drivers before the "NVIDIA " name prefix (e.g.
#             455, docs/gpu-feature-discovery/README.md) gave "A100-SXM4-40GB"; the EKS AL2023 NVIDIA
#             AMI ships driver 580 (awsdocs/amazon-eks-user-guide latest/ug/ml/ml-eks-optimized-ami.adoc),
#             which prefixes "NVIDIA ".
#   [DQ]      thamada/nvidia-smi gls/<GPU>_deviceQuery.py @ c4c8a463: CUDA deviceQuery output, i.e.
#             cudaDeviceProp.totalGlobalMem — the same number torch's total_memory returns.
#   [VLLM-FP8] docs.vllm.ai/en/v0.32.0/features/quantization/llm_compressor/fp8/: FP8 compute needs
#             compute capability >= 8.9 (Ada, Hopper, Blackwell); Ampere only runs FP8 weight-only.
#   [MODAL]   ai-bot-pro/achatbot deploy/modal/src/llm/vllm/vlm/skywork_r1v.py @ 859e2161: torch
#             _CudaDeviceProperties lines printed on Modal's H200 and B200; torch floors total_memory
#             to whole MiB in that repr, so MiB * 2**20 is at most 1 MiB low.
#
# Why CUDA's figure and not nvidia-smi's: the driver reserves part of the frame buffer, so CUDA reports
# less than nvidia-smi (same H100 box: 81106 MiB vs 81559 MiB), and the CUDA figure shifts by tens of
# MiB between driver versions. vLLM multiplies the CUDA figure by --gpu-memory-utilization, so treat
# memory_bytes as accurate to ~0.1 %, not to the byte.

MIB = 1024**2
GIB = 1024**3

ARCHITECTURES = frozenset({"hopper", "ampere", "ada", "blackwell"})
# Only instance_type_from_spec may use this: a GPU given in config whose family nobody stated.
UNKNOWN_ARCHITECTURE = "unknown"

# Kubernetes label-value syntax: the product label is used verbatim in nodeSelectors, so a value the
# API server would reject must fail here, at config time, not at `pulumi up`.
_LABEL_VALUE = re.compile(r"^(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)$")
_INSTANCE_NAME = re.compile(r"^[a-z0-9][a-z0-9-]*\.[a-z0-9]+$")


def _is_int(value: object) -> bool:
    # bool is an int subclass; True GPUs is nonsense, not 1.
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class GpuModel:
    product_label: str  # value of nvidia.com/gpu.product as GFD sets it
    memory_bytes: int  # per-GPU total as CUDA reports it (see the note on CUDA vs nvidia-smi above)
    architecture: str  # one of ARCHITECTURES ("unknown" only for GPUs described in config)
    supports_fp8: bool  # hardware FP8 compute (W8A8 / FP8 KV without emulation)

    def __post_init__(self) -> None:
        if not isinstance(self.product_label, str) or not _LABEL_VALUE.match(self.product_label):
            raise ValueError(
                f"product_label must be a valid Kubernetes label value (e.g. 'NVIDIA-H100-80GB-HBM3'), "
                f"got {self.product_label!r}"
            )
        if not _is_int(self.memory_bytes) or self.memory_bytes <= 0:
            raise ValueError(f"memory_bytes must be a positive integer, got {self.memory_bytes!r}")
        if self.architecture not in ARCHITECTURES | {UNKNOWN_ARCHITECTURE}:
            raise ValueError(
                f"architecture must be one of {sorted(ARCHITECTURES)} or {UNKNOWN_ARCHITECTURE!r}, "
                f"got {self.architecture!r}"
            )
        if not isinstance(self.supports_fp8, bool):
            raise ValueError(f"supports_fp8 must be a bool, got {self.supports_fp8!r}")

    @property
    def memory_gib(self) -> float:
        return self.memory_bytes / GIB


@dataclass(frozen=True)
class InstanceType:
    name: str
    gpu: GpuModel
    gpu_count: int
    vcpus: int
    memory_gib: int
    efa_interfaces: int  # EC2 MaximumEfaInterfaces; 0 when the type has no EFA
    # AWS publishes instance store sizes in GB (DescribeInstanceTypes TotalSizeInGB, "N x 3800 GB").
    # They are stored as published, so this overstates true GiB by up to ~7 %: leave headroom when
    # sizing a model cache on it.
    local_nvme_gib: int
    local_nvme_devices: int

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _INSTANCE_NAME.match(self.name):
            raise ValueError(f"name must look like an EC2 instance type ('p5.48xlarge'), got {self.name!r}")
        if not isinstance(self.gpu, GpuModel):
            raise ValueError(f"gpu must be a GpuModel, got {type(self.gpu).__name__}")
        for field_name, minimum in (
            ("gpu_count", 1),
            ("vcpus", 1),
            ("memory_gib", 1),
            ("efa_interfaces", 0),
            ("local_nvme_gib", 0),
            ("local_nvme_devices", 0),
        ):
            value = getattr(self, field_name)
            if not _is_int(value) or value < minimum:
                raise ValueError(f"{field_name} must be an integer >= {minimum}, got {value!r}")
        # A size without disks (or disks without a size) means a typo in the table or in config.
        if (self.local_nvme_gib == 0) != (self.local_nvme_devices == 0):
            raise ValueError(
                "local_nvme_gib and local_nvme_devices must both be 0 or both be positive, got "
                f"{self.local_nvme_gib} GiB on {self.local_nvme_devices} devices"
            )

    @property
    def gpu_memory_gib(self) -> float:
        """Memory of one GPU in GiB, as CUDA (and so vLLM) sees it."""
        return self.gpu.memory_gib

    def node_share(self, gpus: int) -> tuple[float, float]:
        """(vCPUs, memory GiB) proportional to gpus/gpu_count of the node.

        This is a share of the node's capacity, not of its allocatable: kubelet, system daemons and
        DaemonSets also need room, so callers should request somewhat less than this.
        """
        if not _is_int(gpus) or not 1 <= gpus <= self.gpu_count:
            raise ValueError(
                f"gpus must be an integer from 1 to {self.gpu_count} for {self.name}, got {gpus!r}"
            )
        fraction = gpus / self.gpu_count
        return (self.vcpus * fraction, self.memory_gib * fraction)


# --- GPU models -------------------------------------------------------------------------------------

H100_80GB_HBM3 = GpuModel(
    # NVML/CUDA name "NVIDIA H100 80GB HBM3" ([DQ] H100SXMx8; nvidia-smi in vllm-project/vllm#55169 on
    # driver 580.105.08) -> [GFD] label.
    product_label="NVIDIA-H100-80GB-HBM3",
    # [DQ] H100SXMx8_deviceQuery.py, driver 565.57.01: 81106 MiB (85045477376 bytes); nvidia-smi on
    # that box shows 81559 MiB. torch reports 81082-81090 MiB on other drivers (corroboration only).
    memory_bytes=85_045_477_376,
    architecture="hopper",  # compute capability 9.0 ([DQ]; [GFD] getArchFamily 9 -> hopper)
    supports_fp8=True,  # [VLLM-FP8]
)

H200 = GpuModel(
    # NVML name "NVIDIA H200" (nvidia-smi tables of 700 W H200 SXM boards; torch name below) -> [GFD].
    # The resulting label "NVIDIA-H200" appears in several stored cluster configs; not observed on a
    # p5e/p5en node itself.
    product_label="NVIDIA-H200",
    # UNVERIFIED: exact CUDA figure comes from a single excerpt ([MODAL]: torch
    # _CudaDeviceProperties(name='NVIDIA H200', total_memory=143156MB) on Modal), so 143156 MiB * 2**20
    # (MiB figure, floored by torch). Plausibility: nvidia-smi shows 143771 MiB for H200 in many stored
    # outputs, and CUDA reports a few hundred MiB less than nvidia-smi as with H100.
    memory_bytes=143_156 * MIB,
    architecture="hopper",  # compute capability 9.0 (same excerpt: major=9, minor=0)
    supports_fp8=True,  # [VLLM-FP8]
)

A100_SXM4_40GB = GpuModel(
    # CUDA name "A100-SXM4-40GB" on an old driver (PaddlePaddle/Paddle python/paddle/device/cuda/
    # __init__.py get_device_properties docstring); with the "NVIDIA " prefix of current drivers [GFD]
    # gives this value, which stored node-label listings show verbatim.
    product_label="NVIDIA-A100-SXM4-40GB",
    # 40536 MiB * 2**20 (same Paddle docstring, total_memory=40536MB, floored to MiB, old driver).
    # Newer drivers report a little less: vLLM logged 39.50 GiB total on A100 40GB (vllm#12330).
    memory_bytes=40_536 * MIB,
    architecture="ampere",  # compute capability 8.0 (same docstring: major=8, minor=0)
    supports_fp8=False,  # [VLLM-FP8]: Ampere runs FP8 checkpoints weight-only (Marlin), no FP8 compute
)

A100_SXM4_80GB = GpuModel(
    product_label="NVIDIA-A100-SXM4-80GB",  # [DQ] A100SXMx4 name "NVIDIA A100-SXM4-80GB" -> [GFD]
    # [DQ] A100SXMx4_deviceQuery.py, driver 555.42.02: 81158 MiB (85100068864 bytes); nvidia-smi 81920 MiB.
    memory_bytes=85_100_068_864,
    architecture="ampere",  # compute capability 8.0 ([DQ])
    supports_fp8=False,  # [VLLM-FP8]
)

L40S = GpuModel(
    product_label="NVIDIA-L40S",  # [DQ] L40S name "NVIDIA L40S" -> [GFD]
    # [DQ] L40S_deviceQuery.py, driver 550.127.05: 45589 MiB (47803596800 bytes); nvidia-smi 46068 MiB.
    # Measured on a non-AWS L40S; AWS lists 44 GiB ([AWS-AC]) and 45776 MiB (EC2 GpuInfo, [KARP]).
    memory_bytes=47_803_596_800,
    architecture="ada",  # compute capability 8.9 ([DQ]; [GFD] 8.x with minor >= 9 -> ada-lovelace)
    supports_fp8=True,  # [VLLM-FP8]
)

L4 = GpuModel(
    product_label="NVIDIA-L4",  # [DQ] L4 name "NVIDIA L4" -> [GFD]
    # [DQ] L4_deviceQuery.py, driver 550.90.07 (L4_smi.py): 22478 MiB (23570219008 bytes); nvidia-smi
    # 23034 MiB. Measured on a non-AWS L4; AWS lists 22 GiB ([AWS-AC]) and 22888 MiB (EC2 GpuInfo, [KARP]).
    memory_bytes=23_570_219_008,
    architecture="ada",  # compute capability 8.9 ([DQ]; [GFD] 8.x with minor >= 9 -> ada-lovelace)
    supports_fp8=True,  # [VLLM-FP8]
)

A10G = GpuModel(
    # NVML name "NVIDIA A10G" (nvidia-smi on a g5.12xlarge, driver 550.90.07, vllm-project/vllm#9373)
    # -> [GFD]. A variant of the A10 made for AWS (baseten.co/blog/nvidia-a10-vs-a10g-for-ml-model-
    # inference); no NVIDIA datasheet of the A10G itself was found.
    product_label="NVIDIA-A10G",
    # 22587 MiB * 2**20: torch _CudaDeviceProperties(name='NVIDIA A10G', major=8, minor=6,
    # total_memory=22587MB) in TorchCodec's rendered CUDA-decoding tutorial (basic_cuda_example, torch
    # 2.15.0.dev20260909+cu130), a stored excerpt without its repository; floored to MiB by torch.
    # Corroboration: PyTorch OOM messages from g5.2xlarge in several stored logs give "a total capacity
    # of 22.06 GiB" (22587 MiB); nvidia-smi shows 23028 MiB (vllm#9373); AWS lists 22 GiB ([AWS-AC]) and
    # 22888 MiB (EC2 GpuInfo, [KARP]).
    memory_bytes=22_587 * MIB,
    architecture="ampere",  # compute capability 8.6 (same torch line: major=8, minor=6)
    supports_fp8=False,  # [VLLM-FP8]: Ampere runs FP8 checkpoints weight-only
)

B200 = GpuModel(
    # CUDA name "NVIDIA B200" ([MODAL]; NVML's name matches CUDA's for the GPUs above) -> [GFD]. Not
    # observed on a p6-b200 node itself.
    product_label="NVIDIA-B200",
    # [MODAL]: total_memory=182642MB, so 182642 MiB * 2**20. Another stored torch 2.8.0+cu128 excerpt
    # (unattributed) shows 182631 MiB: 11 MiB apart, within the ~0.1 % noted above. AWS lists 179 GiB
    # ([AWS-AC]) and 183359 MiB (EC2 GpuInfo, [KARP]); CUDA reports less, as for every GPU here.
    memory_bytes=182_642 * MIB,
    architecture="blackwell",  # compute capability 10.0 ([MODAL]: major=10, minor=0)
    supports_fp8=True,  # [VLLM-FP8]
)

GPU_MODELS: Mapping[str, GpuModel] = MappingProxyType(
    {
        gpu.product_label: gpu
        for gpu in (H100_80GB_HBM3, H200, A100_SXM4_40GB, A100_SXM4_80GB, L40S, L4, A10G, B200)
    }
)


# --- Instance types ----------------------------------------------------------------------------------
# GPU count, vCPUs and memory GiB: [AWS-AC] performance table. EFA interfaces: [KARP]
# (`vpc.amazonaws.com/efa`), matching the EFA yes/no column of [AWS-AC]. NVMe: [AWS-AC] instance store
# table ("devices x size GB"); the totals equal [KARP] `instance-local-nvme`.


def _entry(
    name: str,
    gpu: GpuModel,
    gpu_count: int,
    vcpus: int,
    memory_gib: int,
    efa_interfaces: int,
    nvme_devices: int,
    nvme_device_gb: int,
) -> InstanceType:
    return InstanceType(
        name=name,
        gpu=gpu,
        gpu_count=gpu_count,
        vcpus=vcpus,
        memory_gib=memory_gib,
        efa_interfaces=efa_interfaces,
        local_nvme_gib=nvme_devices * nvme_device_gb,
        local_nvme_devices=nvme_devices,
    )


_CATALOG = (
    #      name             gpu              gpus vCPU  GiB  EFA  NVMe devices x GB
    # p5.4xlarge: smallest H100 (launched 2025). [AWS-AC] lists it (16 vCPU, 256 GiB, 1 x H100 80 GiB,
    # EFA yes on 1 network card, 1 x 3800 GB); [KARP] gives MaximumEfaInterfaces 1.
    _entry("p5.4xlarge", H100_80GB_HBM3, 1, 16, 256, 1, 1, 3800),
    # p5.48xlarge: 32 EFA also in pytorch/torchx torchx/specs/named_resources_aws.py (aws_p5_48xlarge) and
    # the AWS EFA guide (docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-acc-inst-types.html).
    _entry("p5.48xlarge", H100_80GB_HBM3, 8, 192, 2048, 32, 8, 3800),
    _entry("p5e.48xlarge", H200, 8, 192, 2048, 32, 8, 3800),
    # p5en: half the EFA interfaces of p5/p5e ([KARP] 16; [AWS-AC] 16 network cards vs 32).
    _entry("p5en.48xlarge", H200, 8, 192, 2048, 16, 8, 3800),
    _entry("p4d.24xlarge", A100_SXM4_40GB, 8, 96, 1152, 4, 8, 1000),
    _entry("p4de.24xlarge", A100_SXM4_80GB, 8, 96, 1152, 4, 8, 1000),
    # g6e: no EFA below 8xlarge ([AWS-AC] EFA "No"; [KARP] no efa resource).
    _entry("g6e.xlarge", L40S, 1, 4, 32, 0, 1, 250),
    _entry("g6e.2xlarge", L40S, 1, 8, 64, 0, 1, 450),
    _entry("g6e.4xlarge", L40S, 1, 16, 128, 0, 1, 600),
    _entry("g6e.8xlarge", L40S, 1, 32, 256, 1, 2, 450),
    _entry("g6e.12xlarge", L40S, 4, 48, 384, 1, 2, 1900),
    _entry("g6e.16xlarge", L40S, 1, 64, 512, 1, 2, 950),
    _entry("g6e.24xlarge", L40S, 4, 96, 768, 2, 2, 1900),
    _entry("g6e.48xlarge", L40S, 8, 192, 1536, 4, 4, 1900),
    # g6 (L4) and g5 (A10G): no EFA below 8xlarge ([AWS-AC] EFA "No"; [KARP] no efa resource), one EFA
    # interface from 8xlarge up ([KARP] 1; [AWS-AC] EFA "Yes" on 1 network card). Left out: g6f and
    # gr6f, whose L4 is a fraction ([AWS-AC] 2 to 11 GiB of accelerator memory), and gr6, the same whole
    # L4 as g6 with more host memory, which AWS positions for graphics (aws/aws-sdk-go v1.51.15 notes).
    _entry("g6.xlarge", L4, 1, 4, 16, 0, 1, 250),
    _entry("g6.2xlarge", L4, 1, 8, 32, 0, 1, 450),
    _entry("g6.4xlarge", L4, 1, 16, 64, 0, 1, 600),
    _entry("g6.8xlarge", L4, 1, 32, 128, 1, 2, 450),
    _entry("g6.12xlarge", L4, 4, 48, 192, 1, 4, 940),
    _entry("g6.16xlarge", L4, 1, 64, 256, 1, 2, 940),
    _entry("g6.24xlarge", L4, 4, 96, 384, 1, 4, 940),
    _entry("g6.48xlarge", L4, 8, 192, 768, 1, 8, 940),
    _entry("g5.xlarge", A10G, 1, 4, 16, 0, 1, 250),
    _entry("g5.2xlarge", A10G, 1, 8, 32, 0, 1, 450),
    _entry("g5.4xlarge", A10G, 1, 16, 64, 0, 1, 600),
    _entry("g5.8xlarge", A10G, 1, 32, 128, 1, 1, 900),
    _entry("g5.12xlarge", A10G, 4, 48, 192, 1, 1, 3800),
    _entry("g5.16xlarge", A10G, 1, 64, 256, 1, 1, 1900),
    _entry("g5.24xlarge", A10G, 4, 96, 384, 1, 1, 3800),
    _entry("g5.48xlarge", A10G, 8, 192, 768, 1, 2, 3800),
    # p6-b200: 8 EFA interfaces ([KARP] 8; [AWS-AC] EFA "Yes" on 8 network cards, 3200 Gigabit), a
    # quarter of p5's 32 for the same 3200 Gigabit.
    _entry("p6-b200.48xlarge", B200, 8, 192, 2048, 8, 8, 3800),
)

INSTANCE_TYPES: Mapping[str, InstanceType] = MappingProxyType({it.name: it for it in _CATALOG})


def lookup_instance_type(name: str) -> InstanceType | None:
    """The catalog entry for an EC2 instance type name, or None when the catalog does not know it."""
    if not isinstance(name, str):
        return None
    # Config is hand-typed; "P5.48xlarge " should not silently fall through to the explicit-spec path.
    return INSTANCE_TYPES.get(name.strip().lower())


def known_instance_type_names() -> list[str]:
    return sorted(INSTANCE_TYPES)


def instance_type_from_spec(
    name: str,
    *,
    gpu_count: int,
    gpu_memory_gib: float,
    product_label: str,
    vcpus: int,
    memory_gib: int,
    efa_interfaces: int = 0,
    local_nvme_gib: int = 0,
    architecture: str = UNKNOWN_ARCHITECTURE,
    supports_fp8: bool = False,
    local_nvme_devices: int | None = None,
) -> InstanceType:
    """Build an entry for an instance type the catalog lacks, from figures given explicitly in config.

    gpu_memory_gib should be the per-GPU total CUDA reports (vLLM logs it as total_gpu_memory), not
    the marketing size, because KV-cache sizing multiplies it by --gpu-memory-utilization.
    local_nvme_devices defaults to 1 when local_nvme_gib > 0: nodeadm discovers the real disks, the
    count is informational.
    """
    # Checked here as well as in the dataclasses so the message names the config key the user wrote.
    if not _is_int(gpu_count) or gpu_count < 1:
        raise ValueError(f"gpu_count must be an integer >= 1, got {gpu_count!r}")
    if (
        isinstance(gpu_memory_gib, bool)
        or not isinstance(gpu_memory_gib, int | float)
        or not math.isfinite(gpu_memory_gib)
        or gpu_memory_gib <= 0
    ):
        raise ValueError(f"gpu_memory_gib must be a positive number, got {gpu_memory_gib!r}")
    if not _is_int(memory_gib) or memory_gib <= 0:
        raise ValueError(f"memory_gib must be a positive integer, got {memory_gib!r}")
    if not _is_int(vcpus) or vcpus < 1:
        raise ValueError(f"vcpus must be an integer >= 1, got {vcpus!r}")
    if local_nvme_devices is None:
        local_nvme_devices = 1 if _is_int(local_nvme_gib) and local_nvme_gib > 0 else 0
    gpu = GpuModel(
        product_label=product_label,
        memory_bytes=round(gpu_memory_gib * GIB),
        architecture=architecture,
        supports_fp8=supports_fp8,
    )
    return InstanceType(
        name=name,
        gpu=gpu,
        gpu_count=gpu_count,
        vcpus=vcpus,
        memory_gib=memory_gib,
        efa_interfaces=efa_interfaces,
        local_nvme_gib=local_nvme_gib,
        local_nvme_devices=local_nvme_devices,
    )
