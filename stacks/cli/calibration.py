"""`plan --concurrency N` and `plan --calibration RESULTS.json`: the roofline at a chosen load, and a
measured run beside the plan with the correction (measured / planned) for each figure (pure).

RESULTS.json is what `python -m stacks verify --json` prints, or the verification Job's log (its
last line is the same report as `{"verification": ...}`). Latency and throughput come from its load
test; the KV cache from the engine's own `vllm:cache_config_info` (recorded when the run could read
the Service's /metrics) or a `kv_cache_tokens` figure added by hand from vLLM's startup log.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from llm_serving import serving
from llm_serving.serving import CapacityPlan


class CalibrationError(ValueError):
    """A results file the planner cannot read: one line, exit 2."""


def read_results(path: Path) -> dict[str, Any]:
    """The verify report in `path`: a JSON document, or a log whose last JSON line is one."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise CalibrationError(f"--calibration {path}: {error.strerror}") from None
    document: Any = None
    try:
        document = json.loads(text)
    except json.JSONDecodeError:
        for line in reversed(text.strip().splitlines()):
            try:
                document = json.loads(line)
                break
            except json.JSONDecodeError:
                continue
    if isinstance(document, dict) and isinstance(document.get("verification"), dict):
        document = document["verification"]
    if not isinstance(document, dict) or not ("load" in document or "engine" in document
                                              or "kv_cache_tokens" in document):
        raise CalibrationError(f"--calibration {path}: no verify report in it (expected the JSON of "
                               "`python -m stacks verify --json`, or the verification Job's log)")
    if document.get("interrupted"):
        # The load stopped early: its percentiles cover the ramp and a few requests, not the planned load.
        raise CalibrationError(f"--calibration {path}: the run was interrupted, so its load figures are not the "
                               "planned load's; calibrate from a run that finished")
    return document


def roofline_at(result: CapacityPlan, model: serving.ModelArchitecture, product_label: str, concurrency: int,
                prompt_tokens: int, output_tokens: int) -> dict[str, Any] | None:
    """One replica's ITL, TPOT, TTFT and throughput at `concurrency` requests (None: no roofline)."""
    gpu = serving.GPU_PERFORMANCE.get(product_label)
    if gpu is None or result.pipeline_parallel_size > 1:
        return None
    at = serving.latency(model, gpu, result.tensor_parallel_size, concurrency, prompt_tokens, output_tokens,
                         result.kv_cache_dtype, result.max_num_batched_tokens)
    return {"concurrency": concurrency, "prompt_tokens": prompt_tokens, "output_tokens": output_tokens,
            "ttft_ms": round(at.ttft_seconds * 1000, 1), "itl_ms": round(at.itl_seconds * 1000, 2),
            "tpot_ms": round(at.tpot_seconds * 1000, 2),
            "output_tokens_per_second": round(at.output_tokens_per_second, 1),
            "fits_kv_cache": concurrency * (prompt_tokens + output_tokens) <= result.kv_cache_tokens}


def _ratio(measured: Any, planned: Any) -> float | None:
    if isinstance(measured, int | float) and isinstance(planned, int | float) and planned:
        return round(measured / planned, 2)
    return None


def corrections(result: CapacityPlan, model: serving.ModelArchitecture, product_label: str,
                results: dict[str, Any], replicas: int) -> dict[str, Any]:
    """Each measured figure beside this plan's at the measured load per replica, and the KV cache."""
    found: dict[str, Any] = {"replicas": replicas, "rows": []}
    load = results.get("load") or {}
    if load.get("requests"):
        per_replica = max(1, math.ceil(int(load["target_concurrency"]) / replicas))
        prompt = round(load.get("prompt_tokens_mean") or 1024)
        output = round(load.get("output_tokens_mean") or 256)
        planned = roofline_at(result, model, product_label, per_replica, prompt, output)
        found["concurrency_per_replica"] = per_replica
        if planned is None:
            found["note"] = "no roofline for this plan: measured figures are shown without a comparison"
            planned = {}
        for label, measured, planned_value in (
            ("TTFT p50 ms", load.get("ttft_ms", {}).get("p50"), planned.get("ttft_ms")),
            ("ITL p50 ms", load.get("itl_ms", {}).get("p50"), planned.get("itl_ms")),
            ("TPOT p50 ms", load.get("tpot_ms", {}).get("p50"), planned.get("tpot_ms")),
            ("output tokens/s", load.get("output_tokens_per_second"),
             round(planned["output_tokens_per_second"] * replicas, 1) if planned else None),
        ):
            found["rows"].append({"figure": label, "measured": measured, "planned": planned_value,
                                  "correction": _ratio(measured, planned_value)})
    kv_tokens = (results.get("engine") or {}).get("kv_cache_size_tokens") or results.get("kv_cache_tokens")
    if isinstance(kv_tokens, int):
        found["rows"].append({"figure": "KV cache tokens", "measured": kv_tokens, "planned": result.kv_cache_tokens,
                              "correction": _ratio(kv_tokens, result.kv_cache_tokens)})
        found["measured_max_concurrency"] = round(kv_tokens / result.max_model_len, 2)
    if not found["rows"]:
        raise CalibrationError("--calibration: the report has neither a completed load test nor a KV cache figure")
    return found


def table_rows(perf: dict[str, Any]) -> list[tuple[str, str]]:
    """`plan`'s table lines for --concurrency and --calibration."""
    rows: list[tuple[str, str]] = []
    at = perf.get("at_concurrency")
    if at:
        rows.append((f"at {at['concurrency']} requests", f"{at['tpot_ms']} ms per output token (decode step "
                     f"{at['itl_ms']} ms), TTFT {at['ttft_ms']} ms, {at['output_tokens_per_second']:,} output tokens/s"
                     + ("" if at["fits_kv_cache"] else "; more than the KV cache holds at these lengths")))
    calibration = perf.get("calibration")
    if calibration:
        load = (f"{calibration['concurrency_per_replica']} requests per replica x {calibration['replicas']}"
                if "concurrency_per_replica" in calibration else f"{calibration['replicas']} replica(s)")
        rows.append(("measured (calibration)", f"{load}; correction = measured / planned"))
        for row in calibration["rows"]:
            measured = f"{row['measured']:,}" if row["measured"] is not None else "-"
            planned = f"{row['planned']:,}" if row["planned"] is not None else "-"
            correction = f"x {row['correction']}" if row["correction"] is not None else "-"
            rows.append((f"  {row['figure']}", f"{measured} measured, {planned} planned: {correction}"))
        if "measured_max_concurrency" in calibration:
            rows.append(("  max concurrency (measured KV)",
                         f"{calibration['measured_max_concurrency']}x at max-model-len"))
    return rows
