"""GPU node group rules that need more than one field: each rejection names the key to change."""

from __future__ import annotations

from typing import Any

import pytest

from llm_serving.platform.args import validate
from stacks import checks
from stacks.config import ServingStackArgs

BASE: dict[str, Any] = {
    "environment": "prod",
    "cluster": {"name": "llm-prod"},
    "weightsStorage": {"efs": {"stagingNodeRoleArn": "arn:aws:iam::123456789012:role/llm-prod-cpu-nodes",
                               "stagingNodeSecurityGroupIds": ["sg-0cc00000000000001"],
                               "stagingNodeSelector": {"eks.amazonaws.com/nodegroup": "llm-prod-cpu"}}},
    "gpuNodeGroup": {
        "instanceType": "p5.48xlarge",
        "subnets": [
            {"id": "subnet-0bb00000000000001", "availabilityZone": "us-east-1a"},
            {"id": "subnet-0bb00000000000002", "availabilityZone": "us-east-1b"},
        ],
        "scaling": {"minNodes": 1, "maxNodes": 2, "desiredNodes": 1},
    },
    "observability": {
        "prometheus": {"mode": "existing", "url": "http://prometheus-operated.monitoring.svc:9090"},
        "runbookBaseUrl": "https://runbooks.example.com/llm-serving",
    },
    "apiKey": "a-test-api-key-of-some-length",
    "edge": {"host": "llm.example.com", "tls": {"certManagerIssuer": "letsencrypt"}},
    # A model that fits any catalog GPU, so these tests see only node-group problems.
    "models": [
        {
            "name": "qwen-7b",
            "modelId": "Qwen/Qwen2.5-7B-Instruct",
            "revision": "a09a35458c702b33eeacc393d103063234e8bc28",
            "maxModelLen": 4096,
            "tensorParallelSize": 1,
        }
    ],
}


def lines(**group_changes: Any) -> list[str]:
    group = {**BASE["gpuNodeGroup"], **group_changes}
    config = validate(ServingStackArgs, {**BASE, "gpuNodeGroup": group})
    return [p.line() for p in checks.check(config)]


def test_base_config_has_no_problems():
    assert lines() == []


def test_rejects_min_nodes_above_max_nodes():
    assert lines(scaling={"minNodes": 3, "maxNodes": 2, "desiredNodes": 2}) == [
        "llm-serving:gpuNodeGroup.scaling.minNodes: must not exceed maxNodes (got 3; expected <= maxNodes (2))",
        "llm-serving:gpuNodeGroup.scaling.desiredNodes: must lie between minNodes and maxNodes "
        "(got 2; expected 3..2)",
    ]


@pytest.mark.parametrize("desired", [0, 5])
def test_rejects_desired_nodes_outside_bounds(desired):
    assert lines(scaling={"minNodes": 1, "maxNodes": 4, "desiredNodes": desired}) == [
        "llm-serving:gpuNodeGroup.scaling.desiredNodes: must lie between minNodes and maxNodes "
        f"(got {desired}; expected 1..4)"
    ]


def test_rejects_capacity_block_without_reservation_id():
    one_zone = [{"id": "subnet-0bb00000000000001", "availabilityZone": "us-east-1a"}]
    assert lines(capacityType="CAPACITY_BLOCK", subnets=one_zone) == [
        "llm-serving:gpuNodeGroup.capacityReservationId: CAPACITY_BLOCK needs the capacity block's "
        "reservation id (got null; expected a reservation id like cr-0123456789abcdef0)"
    ]


def test_rejects_capacity_block_with_subnets_in_several_zones():
    assert lines(capacityType="CAPACITY_BLOCK", capacityReservationId="cr-0123456789abcdef0") == [
        "llm-serving:gpuNodeGroup.subnets: CAPACITY_BLOCK needs every subnet in the reservation's "
        'single availability zone (got ["us-east-1a", "us-east-1b"]; expected subnets of one '
        "availability zone)"
    ]


def test_rejects_spot_with_capacity_reservation():
    assert lines(capacityType="SPOT", capacityReservationId="cr-0123456789abcdef0") == [
        "llm-serving:gpuNodeGroup.capacityReservationId: SPOT capacity cannot launch into a capacity "
        'reservation (got "cr-0123456789abcdef0"; expected no reservation with SPOT)'
    ]


def test_rejects_instance_type_without_gpus():
    (line,) = lines(instanceType="m7i.4xlarge")
    assert line.startswith(
        "llm-serving:gpuNodeGroup.instanceType: not a GPU instance type in the catalog; give its GPU "
        'facts in gpuNodeGroup.customInstance if it has GPUs (got "m7i.4xlarge"; expected one of '
    )
    assert "p5.48xlarge" in line


def test_accepts_unknown_instance_type_with_explicit_gpu_spec():
    # p6-b300 is not in the catalog (p6-b200 is). Host figures from karpenter's instance-types.md; the GPU
    # memory (below EC2's 275040 MiB) and the product label only need to be well formed for this check.
    custom = {"gpuCount": 8, "gpuMemoryGib": 260, "gpuProduct": "NVIDIA-B300", "vcpus": 192,
              "memoryGib": 4096, "efaInterfaces": 16, "localNvmeGib": 30400}
    assert lines(instanceType="p6-b300.48xlarge", customInstance=custom) == []


def test_rejects_custom_spec_for_a_catalog_instance_type():
    custom = {"gpuCount": 8, "gpuMemoryGib": 80, "gpuProduct": "NVIDIA-H100-80GB-HBM3", "vcpus": 192,
              "memoryGib": 2048}
    (line,) = lines(customInstance=custom)
    assert line.startswith("llm-serving:gpuNodeGroup.customInstance: p5.48xlarge is in the GPU catalog")


def test_rejects_root_volume_too_small_for_the_vllm_image_on_ebs():
    assert lines(containerStorage="ebs", rootVolumeGib=80) == [
        "llm-serving:gpuNodeGroup.rootVolumeGib: too small to hold the vLLM image (about 10 GB "
        "compressed, unpacked beside its layers) and the GPU add-on images (got 80; expected >= 100)"
    ]


def test_accepts_small_root_volume_when_images_live_on_nvme():
    assert lines(containerStorage="instance-nvme", rootVolumeGib=80) == []


def test_rejects_nvme_storage_on_instance_without_nvme():
    custom = {"gpuCount": 1, "gpuMemoryGib": 24, "gpuProduct": "NVIDIA-A10G", "vcpus": 8, "memoryGib": 32}
    assert lines(instanceType="x9.2xlarge", customInstance=custom) == [
        "llm-serving:gpuNodeGroup.containerStorage: x9.2xlarge has no instance-store NVMe "
        '(got "instance-nvme"; expected ebs)'
    ]


def test_rejects_more_efa_interfaces_than_the_instance_has():
    assert lines(instanceType="p4d.24xlarge", efaInterfaces=8) == [
        "llm-serving:gpuNodeGroup.efaInterfaces: p4d.24xlarge supports at most 4 EFA interfaces "
        "(got 8; expected 0..4)"
    ]


def test_rejects_existing_prometheus_without_url():
    config = validate(ServingStackArgs,
        {**BASE, "observability": {"prometheus": {"mode": "existing"}, "runbookBaseUrl": "https://r.example.com"}}
    )
    assert [p.line() for p in checks.check(config)] == [
        "llm-serving:observability.prometheus.url: an existing Prometheus needs its query URL "
        "(got null; expected a URL like http://prometheus-operated.monitoring.svc:9090)"
    ]


def test_rejects_cluster_placement_across_zones():
    assert lines(placement="cluster") == [
        "llm-serving:gpuNodeGroup.subnets: placement cluster needs every subnet in one availability zone "
        '(got ["us-east-1a", "us-east-1b"]; expected subnets of one availability zone)'
    ]
