"""The memory model against public vLLM startup logs (tests/fixtures/calibration/vllm-startup-logs.json:
33 logs, vLLM 0.10-0.19, H100 and A100 80GB, TP 1-4, dense and MoE, bf16/fp8/int4 weights, with the
source URL of each; facts only).

What this proves today, for every log of a catalog model: the planner is never optimistic (it never
promises more KV memory than vLLM reported), and it is conservative by at most the bound of its row.
It does NOT yet meet the 5 % target of issue #14 on every row: at TP1 it over-counts the runtime
overhead by 2-4 GiB (see docs/capacity-planner.md, "Calibration"). Logs of models outside the catalog
are kept for the next fit; they are counted, not checked.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from components.gpu import lookup_instance_type
from components.serving import capacity, lookup_model

ROWS = json.loads((Path(__file__).parents[2] / "fixtures" / "calibration" / "vllm-startup-logs.json").read_text())
GPUS = {"H100": lookup_instance_type("p5.48xlarge"), "A100": lookup_instance_type("p4de.24xlarge")}

# How much less KV memory than the log the planner may plan, per checkable row, and why.
BOUND_DENSE = 0.10  # dense catalog models on vLLM 0.10+: 3-9 % under today
EXPLAINED = {
    # MXFP4 experts are padded on load: vLLM holds 64.4 GiB where the checkpoint's bytes give 60.8, and
    # only 3.3 GiB are left for KV, so a few GiB of difference is a large share.
    ("openai/gpt-oss-120b", 1): 0.45,
}


# vLLM started these with only a few GiB of KV (3.0 and 4.5 GiB); the planner's over-count of the
# runtime overhead leaves none, so it refuses them: conservative, and what the next fit must fix.
REFUSED = {("Qwen/Qwen2.5-72B-Instruct", 2), ("Qwen/Qwen3-32B", 1)}


def _checkable() -> list[dict]:
    rows = []
    for row in ROWS:
        model = lookup_model(row["model"])
        if model is None or row["available_kv_gib"] is None or row["available_kv_gib"] <= 0:
            continue
        rows.append(row)
    return rows


def test_the_table_holds_at_least_fifteen_public_logs_with_their_sources():
    assert len(ROWS) >= 15
    assert all(row["source"].startswith("https://") for row in ROWS)
    assert {row["tp"] for row in ROWS} >= {1, 2, 4}
    assert len(_checkable()) >= 12


@pytest.mark.parametrize("row", _checkable(), ids=lambda r: f"{r['model']}-tp{r['tp']}-{r['gpu_memory_utilization']}")
def test_the_planner_is_never_optimistic_and_within_its_bound(row):
    gpu = GPUS["H100" if "H100" in row["gpu"] else "A100"]
    quantization = "fp8" if "online quantization=fp8" in str(row["dtype"]) else None

    def plan_row() -> capacity.CapacityPlan:
        return capacity.plan(
            lookup_model(row["model"]), gpu, row["max_model_len"] or 4096, tp=row["tp"],
            gpu_memory_utilization=row["gpu_memory_utilization"],
            kv_cache_dtype="fp8" if "fp8" in str(row["kv_cache_dtype"]) else "auto",
            max_num_batched_tokens=row["max_num_batched_tokens"] or capacity.DEFAULT_MAX_NUM_BATCHED_TOKENS,
            max_num_seqs=row["max_num_seqs"], quantization=quantization,
        )

    if (row["model"], row["tp"]) in REFUSED:
        with pytest.raises(capacity.CapacityError):
            plan_row()
        return
    plan = plan_row()
    logged = row["available_kv_gib"]
    under = (logged - plan.available_kv_gib_per_gpu) / logged
    assert under >= 0, f"planned {plan.available_kv_gib_per_gpu:.2f} GiB, more than the logged {logged}"
    assert under <= EXPLAINED.get((row["model"], row["tp"]), BOUND_DENSE), f"{under:.1%} under the log"
