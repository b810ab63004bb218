"""The open catalog (issue #46): every instance type has a price or says why not, every GPU has roofline
figures or says why not, and the GPUs people serve small models on (L4, A10G) and the newest (B200)
plan like their siblings. Checked by relation between the tables, not by repeating their figures.
"""

from __future__ import annotations

import io
import json
from collections import defaultdict

import pytest

from llm_serving.gpu import instance_price
from llm_serving.gpu.catalog import GPU_MODELS, INSTANCE_TYPES, InstanceType
from llm_serving.gpu.prices import PRICES_FILE
from llm_serving.serving import performance
from llm_serving.serving.capacity import plan
from llm_serving.serving.models import MODELS
from stacks.cli import plan as plan_cli

LLAMA_8B = MODELS["meta-llama/Llama-3.1-8B-Instruct"]
LLAMA_70B = MODELS["meta-llama/Llama-3.1-70B-Instruct"]


def _family(entry: InstanceType) -> str:
    return entry.name.split(".")[0]


def _size(entry: InstanceType) -> str:
    return entry.name.split(".")[1]


def _gpu_type(label: str) -> InstanceType:
    """The catalog's largest instance type of a GPU, so a test names the GPU, not a price or a size."""
    return max((e for e in INSTANCE_TYPES.values() if e.gpu.product_label == label), key=lambda e: e.gpu_count)


# --- prices ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(INSTANCE_TYPES))
def test_every_catalog_instance_has_a_price_or_a_null_with_a_note(name):
    price = instance_price(name)
    assert price is not None, f"{name} is missing from llm_serving/gpu/prices.json"
    if price.usd_per_hour is None:
        assert price.note, f"{name} has no On-Demand price and no note saying why"
    else:
        assert price.usd_per_hour > 0


def test_the_price_file_prices_exactly_the_catalog():
    assert set(json.loads(PRICES_FILE.read_text())) == set(INSTANCE_TYPES)


def test_every_price_comes_from_one_snapshot_of_one_region():
    # Prices from two snapshots would make instance types look cheaper or dearer than they were.
    prices = [instance_price(name) for name in INSTANCE_TYPES]
    assert len({(p.region, p.date, p.source) for p in prices if p is not None}) == 1


def test_within_a_family_a_size_with_more_gpus_and_vcpus_never_costs_less():
    # Within a family, a size with at least as many GPUs and vCPUs as another costs at least as much:
    # a transcription error (a dropped digit, a swapped row) breaks this ordering.
    by_family: dict[str, list[InstanceType]] = defaultdict(list)
    for entry in INSTANCE_TYPES.values():
        by_family[_family(entry)].append(entry)
    for entries in by_family.values():
        for small in entries:
            for big in entries:
                small_price, big_price = instance_price(small.name), instance_price(big.name)
                assert small_price is not None and big_price is not None
                if small_price.usd_per_hour is None or big_price.usd_per_hour is None:
                    continue
                if big.gpu_count >= small.gpu_count and big.vcpus >= small.vcpus:
                    assert big_price.usd_per_hour >= small_price.usd_per_hour, (small.name, big.name)


# --- roofline figures ---------------------------------------------------------------------------------


def test_every_catalog_gpu_has_roofline_figures_or_a_stated_reason():
    figures, reasons = set(performance.GPU_PERFORMANCE), set(performance.UNPUBLISHED_PERFORMANCE)
    assert figures.isdisjoint(reasons)
    assert figures | reasons == set(GPU_MODELS)
    assert all(performance.UNPUBLISHED_PERFORMANCE.values())
    assert all(gpu.source for gpu in performance.GPU_PERFORMANCE.values())


@pytest.mark.parametrize("label", sorted(performance.GPU_PERFORMANCE))
def test_roofline_figures_are_per_gpu_bytes_and_flops_not_system_totals_or_tb(label):
    gpu = performance.GPU_PERFORMANCE[label]
    assert 1e11 < gpu.memory_bytes_per_second < 1e13
    assert 1e13 < gpu.bf16_dense_flops < 1e16


def test_each_gpu_generation_reads_memory_faster_than_the_one_before():
    bandwidth = {label: gpu.memory_bytes_per_second for label, gpu in performance.GPU_PERFORMANCE.items()}
    assert bandwidth["NVIDIA-B200"] > bandwidth["NVIDIA-H200"] > bandwidth["NVIDIA-H100-80GB-HBM3"]
    assert bandwidth["NVIDIA-L40S"] > bandwidth["NVIDIA-L4"]


# --- the catalog's shape ----------------------------------------------------------------------------


def test_every_size_of_a_family_carries_the_same_gpu():
    gpus: dict[str, set[str]] = defaultdict(set)
    for entry in INSTANCE_TYPES.values():
        gpus[_family(entry)].add(entry.gpu.product_label)
    assert {family: labels for family, labels in gpus.items() if len(labels) > 1} == {}


def test_g5_and_g6_sizes_share_one_host_shape():
    # G6 (L4) repeats G5's (A10G) size ladder: same GPUs, vCPUs, memory and EFA per size name.
    def shapes(family: str) -> dict[str, tuple[int, int, int, int]]:
        return {
            _size(e): (e.gpu_count, e.vcpus, e.memory_gib, e.efa_interfaces)
            for e in INSTANCE_TYPES.values()
            if _family(e) == family
        }

    assert shapes("g5") and shapes("g5") == shapes("g6")


def test_g_family_nodes_have_efa_from_32_vcpus_up():
    for entry in INSTANCE_TYPES.values():
        if entry.name.startswith("g"):
            assert (entry.efa_interfaces > 0) == (entry.vcpus >= 32), entry.name


def test_new_gpus_are_smaller_or_larger_than_their_neighbours_as_sold():
    # 24 GB-class cards below the 48 GB L40S; the B200 above the H200.
    assert GPU_MODELS["NVIDIA-L4"].memory_bytes < GPU_MODELS["NVIDIA-L40S"].memory_bytes
    assert GPU_MODELS["NVIDIA-A10G"].memory_bytes < GPU_MODELS["NVIDIA-L40S"].memory_bytes
    assert GPU_MODELS["NVIDIA-B200"].memory_bytes > GPU_MODELS["NVIDIA-H200"].memory_bytes


def test_fp8_compute_follows_the_architecture_of_the_new_gpus():
    assert GPU_MODELS["NVIDIA-L4"].architecture == GPU_MODELS["NVIDIA-L40S"].architecture == "ada"
    assert GPU_MODELS["NVIDIA-A10G"].architecture == "ampere" and not GPU_MODELS["NVIDIA-A10G"].supports_fp8
    assert GPU_MODELS["NVIDIA-B200"].architecture == "blackwell" and GPU_MODELS["NVIDIA-B200"].supports_fp8


# --- planning -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", sorted(n for n, e in INSTANCE_TYPES.items() if e.gpu.product_label in ("NVIDIA-L4", "NVIDIA-A10G"))
)
def test_an_8b_plans_on_one_gpu_of_every_l4_and_a10g_node(name):
    result = plan(LLAMA_8B, INSTANCE_TYPES[name], 8_192)
    assert result.tensor_parallel_size == 1
    assert result.replicas_per_node == INSTANCE_TYPES[name].gpu_count
    assert result.kv_cache_tokens >= 8_192  # at least one full-length request


def test_a_70b_needs_fewer_b200s_than_h100s():
    b200 = plan(LLAMA_70B, _gpu_type("NVIDIA-B200"), 16_384)
    h100 = plan(LLAMA_70B, _gpu_type("NVIDIA-H100-80GB-HBM3"), 16_384)
    assert b200.tensor_parallel_size < h100.tensor_parallel_size


def test_at_the_same_tp_a_b200_holds_more_kv_and_decodes_faster_than_an_h100():
    b200_type, h100_type = _gpu_type("NVIDIA-B200"), _gpu_type("NVIDIA-H100-80GB-HBM3")
    b200, h100 = plan(LLAMA_70B, b200_type, 16_384, tp=4), plan(LLAMA_70B, h100_type, 16_384, tp=4)
    assert b200.kv_cache_tokens > h100.kv_cache_tokens
    at = {
        label: performance.latency(LLAMA_70B, performance.GPU_PERFORMANCE[label], 4, 32, 1_024, 256)
        for label in ("NVIDIA-B200", "NVIDIA-H100-80GB-HBM3")
    }
    assert at["NVIDIA-B200"].itl_seconds < at["NVIDIA-H100-80GB-HBM3"].itl_seconds


def _plan_json(gpu: str, model: str, max_model_len: str) -> dict:
    out, err = io.StringIO(), io.StringIO()
    code = plan_cli.main(["--model", model, "--gpu", gpu, "--max-model-len", max_model_len, "--json"],
                         stdout=out, stderr=err)
    assert (code, err.getvalue()) == (0, "")
    return json.loads(out.getvalue())


def test_plan_cli_prices_an_8b_on_an_l4_node_and_gives_its_latency():
    entry = min((e for e in INSTANCE_TYPES.values() if e.gpu.product_label == "NVIDIA-L4"), key=lambda e: e.vcpus)
    data = _plan_json(entry.name, LLAMA_8B.model_id, "8192")
    price = instance_price(entry.name)
    assert price is not None and data["cost"]["usd_per_node_hour"] == price.usd_per_hour
    assert data["performance"]["slo_concurrency"] >= 1 and data["performance"]["output_tokens_per_second"] > 0


def test_plan_cli_says_why_an_a10g_plan_has_no_latency():
    entry = min((e for e in INSTANCE_TYPES.values() if e.gpu.product_label == "NVIDIA-A10G"), key=lambda e: e.vcpus)
    data = _plan_json(entry.name, LLAMA_8B.model_id, "8192")
    assert data["tensor_parallel_size"] == 1 and data["cost"]["usd_per_node_hour"] > 0
    assert "NVIDIA-A10G" in data["performance"]["note"]


def test_plan_cli_plans_a_70b_on_a_b200_node_with_price_and_latency():
    data = _plan_json(_gpu_type("NVIDIA-B200").name, LLAMA_70B.model_id, "16384")
    assert data["cost"]["usd_per_replica_hour"] > 0
    assert data["performance"]["output_tokens_per_second"] > 0
