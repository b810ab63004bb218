"""Behaviour of the GPU instance catalog: cited figures, proportional node shares, explicit specs."""

import math

import pytest

from llm_serving.gpu import catalog as gpu_catalog
from llm_serving.gpu.catalog import (
    GPU_MODELS,
    INSTANCE_TYPES,
    GpuModel,
    InstanceType,
    instance_type_from_spec,
    known_instance_type_names,
    lookup_instance_type,
)

REQUIRED = {
    "p5.48xlarge",
    "p5e.48xlarge",
    "p5en.48xlarge",
    "p4d.24xlarge",
    "p4de.24xlarge",
    "g6e.xlarge",
    "g6e.2xlarge",
    "g6e.4xlarge",
    "g6e.8xlarge",
    "g6e.12xlarge",
    "g6e.16xlarge",
    "g6e.24xlarge",
    "g6e.48xlarge",
}


def test_catalog_contains_every_required_instance_type():
    assert REQUIRED <= set(INSTANCE_TYPES)


def test_p5_48xlarge_has_eight_h100s_with_the_gfd_label_and_cuda_memory():
    p5 = lookup_instance_type("p5.48xlarge")
    assert p5 is not None
    assert p5.gpu_count == 8
    assert p5.gpu.product_label == "NVIDIA-H100-80GB-HBM3"
    assert p5.gpu.memory_bytes == 85_045_477_376
    assert p5.gpu_memory_gib == pytest.approx(79.2048, abs=1e-4)
    assert p5.gpu.architecture == "hopper"
    assert p5.gpu.supports_fp8 is True


def test_p5_48xlarge_host_figures():
    p5 = INSTANCE_TYPES["p5.48xlarge"]
    assert (p5.vcpus, p5.memory_gib, p5.efa_interfaces) == (192, 2048, 32)
    assert (p5.local_nvme_gib, p5.local_nvme_devices) == (30_400, 8)


def test_p5_4xlarge_is_a_single_h100_node():
    small = INSTANCE_TYPES["p5.4xlarge"]
    assert small.gpu is INSTANCE_TYPES["p5.48xlarge"].gpu
    assert (small.gpu_count, small.vcpus, small.memory_gib) == (1, 16, 256)
    assert (small.efa_interfaces, small.local_nvme_gib, small.local_nvme_devices) == (1, 3800, 1)


def test_h200_instances_share_the_h200_model_and_differ_in_efa():
    p5e, p5en = INSTANCE_TYPES["p5e.48xlarge"], INSTANCE_TYPES["p5en.48xlarge"]
    assert p5e.gpu is p5en.gpu
    assert p5e.gpu.product_label == "NVIDIA-H200"
    assert p5e.gpu.memory_bytes == 143_156 * 1024**2
    assert p5e.gpu_count == p5en.gpu_count == 8
    assert (p5e.efa_interfaces, p5en.efa_interfaces) == (32, 16)


def test_p4_instances_carry_a100_40gb_and_80gb_without_fp8():
    p4d, p4de = INSTANCE_TYPES["p4d.24xlarge"], INSTANCE_TYPES["p4de.24xlarge"]
    assert p4d.gpu.product_label == "NVIDIA-A100-SXM4-40GB"
    assert p4de.gpu.product_label == "NVIDIA-A100-SXM4-80GB"
    assert p4d.gpu.memory_bytes == 40_536 * 1024**2
    assert p4de.gpu.memory_bytes == 85_100_068_864
    assert not p4d.gpu.supports_fp8 and not p4de.gpu.supports_fp8
    assert p4d.gpu.architecture == p4de.gpu.architecture == "ampere"
    assert (p4d.vcpus, p4d.memory_gib, p4d.efa_interfaces, p4d.local_nvme_gib) == (96, 1152, 4, 8000)


@pytest.mark.parametrize(
    ("name", "gpus", "vcpus", "memory_gib", "efa"),
    [
        ("g6e.xlarge", 1, 4, 32, 0),
        ("g6e.2xlarge", 1, 8, 64, 0),
        ("g6e.4xlarge", 1, 16, 128, 0),
        ("g6e.8xlarge", 1, 32, 256, 1),
        ("g6e.12xlarge", 4, 48, 384, 1),
        ("g6e.16xlarge", 1, 64, 512, 1),
        ("g6e.24xlarge", 4, 96, 768, 2),
        ("g6e.48xlarge", 8, 192, 1536, 4),
    ],
)
def test_each_g6e_size_has_its_documented_gpus_and_host(name, gpus, vcpus, memory_gib, efa):
    entry = INSTANCE_TYPES[name]
    assert entry.gpu.product_label == "NVIDIA-L40S"
    assert (entry.gpu_count, entry.vcpus, entry.memory_gib, entry.efa_interfaces) == (
        gpus,
        vcpus,
        memory_gib,
        efa,
    )
    assert entry.gpu.architecture == "ada" and entry.gpu.supports_fp8


def test_node_share_of_half_a_p5_is_half_its_cpu_and_memory():
    assert INSTANCE_TYPES["p5.48xlarge"].node_share(4) == (96.0, 1024.0)


def test_node_share_of_the_whole_node_is_the_whole_node():
    g = INSTANCE_TYPES["g6e.12xlarge"]
    assert g.node_share(4) == (48.0, 384.0)
    assert g.node_share(1) == (12.0, 96.0)


@pytest.mark.parametrize("gpus", [0, -1, 9, 2.0, True])
def test_node_share_rejects_gpu_counts_the_node_cannot_hold(gpus):
    with pytest.raises(ValueError, match="gpus"):
        INSTANCE_TYPES["p5.48xlarge"].node_share(gpus)


def test_lookup_of_unknown_name_returns_none():
    assert lookup_instance_type("p9.huge") is None
    assert lookup_instance_type("") is None


def test_lookup_tolerates_case_and_surrounding_space_from_hand_typed_config():
    assert lookup_instance_type(" P5.48XLARGE ") is INSTANCE_TYPES["p5.48xlarge"]


def test_known_names_are_sorted_and_cover_the_catalog():
    names = known_instance_type_names()
    assert names == sorted(names)
    assert set(names) == set(INSTANCE_TYPES)


def test_catalog_mappings_are_read_only():
    with pytest.raises(TypeError):
        INSTANCE_TYPES["x.large"] = INSTANCE_TYPES["p5.48xlarge"]  # type: ignore[index]
    with pytest.raises(TypeError):
        GPU_MODELS["NVIDIA-X"] = INSTANCE_TYPES["p5.48xlarge"].gpu  # type: ignore[index]


@pytest.mark.parametrize("name", sorted(INSTANCE_TYPES))
def test_every_catalog_entry_is_self_consistent(name):
    entry = INSTANCE_TYPES[name]
    assert entry.name == name
    assert entry.gpu_count >= 1 and entry.vcpus >= 1 and entry.memory_gib > 0
    assert entry.gpu.product_label.startswith("NVIDIA-")
    assert " " not in entry.gpu.product_label
    assert GPU_MODELS[entry.gpu.product_label] is entry.gpu
    assert entry.gpu.architecture in gpu_catalog.ARCHITECTURES
    # Hardware FP8 is an architecture property: Ampere lacks it, the others have it.
    assert entry.gpu.supports_fp8 == (entry.gpu.architecture != "ampere")
    assert entry.efa_interfaces >= 0
    assert (entry.local_nvme_gib > 0) == (entry.local_nvme_devices > 0)
    assert entry.local_nvme_gib % max(entry.local_nvme_devices, 1) == 0


def test_gpu_models_are_keyed_by_their_label():
    for label, model in GPU_MODELS.items():
        assert model.product_label == label


# Nominal (marketing) size per GPU in GiB. CUDA reports a little less because the driver reserves
# part of the frame buffer; a figure above nominal or far below it means a transcription error.
_NOMINAL_GIB = {
    "NVIDIA-H100-80GB-HBM3": 80,
    "NVIDIA-H200": 141,
    "NVIDIA-A100-SXM4-40GB": 40,
    "NVIDIA-A100-SXM4-80GB": 80,
    "NVIDIA-L40S": 48,
    "NVIDIA-L4": 24,
    "NVIDIA-A10G": 24,
    "NVIDIA-B200": 180,  # DGX B200: 1,440 GB over 8 GPUs
}


def test_every_gpu_model_has_a_nominal_size_to_check_against():
    assert set(_NOMINAL_GIB) == set(GPU_MODELS)


@pytest.mark.parametrize("label", sorted(_NOMINAL_GIB))
def test_cuda_reported_memory_is_just_below_the_nominal_size(label):
    nominal = _NOMINAL_GIB[label]
    assert 0.9 * nominal < GPU_MODELS[label].memory_gib < nominal


def test_instance_type_from_spec_builds_a_usable_entry():
    entry = instance_type_from_spec(
        "g7e.2xlarge",
        gpu_count=1,
        gpu_memory_gib=94.5,
        product_label="NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition",
        vcpus=8,
        memory_gib=64,
        local_nvme_gib=1900,
        architecture="blackwell",
        supports_fp8=True,
    )
    assert isinstance(entry, InstanceType) and isinstance(entry.gpu, GpuModel)
    assert entry.gpu.memory_bytes == int(94.5 * 1024**3)
    assert entry.gpu_memory_gib == 94.5
    assert entry.node_share(1) == (8.0, 64.0)
    assert (entry.efa_interfaces, entry.local_nvme_gib, entry.local_nvme_devices) == (0, 1900, 1)
    # An explicit spec does not enter the catalog.
    assert lookup_instance_type("g7e.2xlarge") is None


def test_instance_type_from_spec_defaults_to_unknown_architecture_without_fp8():
    entry = instance_type_from_spec(
        "g5.xlarge", gpu_count=1, gpu_memory_gib=22, product_label="NVIDIA-A10G", vcpus=4, memory_gib=16
    )
    assert entry.gpu.architecture == "unknown"
    assert entry.gpu.supports_fp8 is False
    assert (entry.local_nvme_gib, entry.local_nvme_devices) == (0, 0)


_VALID_SPEC = dict(gpu_count=1, gpu_memory_gib=22.0, product_label="NVIDIA-A10G", vcpus=4, memory_gib=16)


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ({"gpu_count": 0}, "gpu_count"),
        ({"gpu_count": -2}, "gpu_count"),
        ({"gpu_memory_gib": 0}, "gpu_memory_gib"),
        ({"gpu_memory_gib": -1.5}, "gpu_memory_gib"),
        ({"gpu_memory_gib": math.nan}, "gpu_memory_gib"),
        ({"memory_gib": 0}, "memory_gib"),
        ({"memory_gib": -16}, "memory_gib"),
        ({"vcpus": 0}, "vcpus"),
        ({"efa_interfaces": -1}, "efa_interfaces"),
        ({"local_nvme_gib": -1}, "local_nvme_gib"),
        ({"product_label": ""}, "product_label"),
        ({"product_label": "NVIDIA A10G"}, "product_label"),
        ({"architecture": "volta"}, "architecture"),
    ],
)
def test_instance_type_from_spec_rejects_nonsense_naming_the_field(override, field):
    with pytest.raises(ValueError, match=field):
        instance_type_from_spec("g5.xlarge", **{**_VALID_SPEC, **override})


def test_instance_type_from_spec_rejects_a_malformed_name():
    with pytest.raises(ValueError, match="name"):
        instance_type_from_spec("not an instance", **_VALID_SPEC)


def test_nvme_size_without_devices_is_rejected():
    with pytest.raises(ValueError, match="local_nvme"):
        instance_type_from_spec("g5.xlarge", **_VALID_SPEC, local_nvme_gib=250, local_nvme_devices=0)


def test_gpu_catalog_does_not_import_pulumi():
    source = open(gpu_catalog.__file__, encoding="utf-8").read()
    assert "import pulumi" not in source and "from pulumi" not in source
