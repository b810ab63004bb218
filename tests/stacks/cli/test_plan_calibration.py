"""`plan --concurrency N` (the roofline at a chosen load) and `plan --calibration RESULTS.json` (a measured
run beside the plan, with the correction measured / planned)."""

from __future__ import annotations

import io
import json

import pytest

from llm_serving.serving import GPU_PERFORMANCE, latency, lookup_model
from stacks.cli import plan as plan_cli

PLAN = ["--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "p5.4xlarge", "--max-model-len", "8192"]
REPORT = {
    "model": "llama-8b", "verdict": "pass",
    "load": {"target_concurrency": 64, "requests": 200, "prompt_tokens_mean": 1030.0, "output_tokens_mean": 256.0,
             "ttft_ms": {"p50": 150.0, "p95": 400.0}, "itl_ms": {"p50": 20.0, "p95": 40.0},
             "tpot_ms": {"p50": 25.0}, "output_tokens_per_second": 2000.0},
    "engine": {"kv_cache_size_tokens": 400000},
}


def _plan(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = plan_cli.main([*PLAN, *args], out, err)
    return code, out.getvalue(), err.getvalue()


def test_concurrency_prints_the_roofline_at_that_load():
    code, out, _ = _plan("--concurrency", "64", "--json")
    assert code == 0
    at = json.loads(out)["performance"]["at_concurrency"]
    expected = latency(lookup_model("meta-llama/Llama-3.1-8B-Instruct"), GPU_PERFORMANCE["NVIDIA-H100-80GB-HBM3"],
                       1, 64, 1024, 256)
    assert at["concurrency"] == 64
    assert at["tpot_ms"] == round(expected.tpot_seconds * 1000, 2)
    assert at["itl_ms"] == round(expected.itl_seconds * 1000, 2)
    assert at["output_tokens_per_second"] == round(expected.output_tokens_per_second, 1)
    assert at["fits_kv_cache"] is True
    code, table, _ = _plan("--concurrency", "64")
    line = next(line for line in table.splitlines() if line.startswith("at 64 requests "))
    assert line.endswith(f"{at['tpot_ms']} ms per output token (decode step {at['itl_ms']} ms), TTFT {at['ttft_ms']} "
                         f"ms, {at['output_tokens_per_second']:,} output tokens/s")


def test_calibration_puts_each_measured_figure_beside_the_plan_with_its_correction(tmp_path):
    results = tmp_path / "results.json"
    results.write_text(json.dumps(REPORT))
    code, out, err = _plan("--calibration", str(results), "--json")
    assert code == 0, err
    document = json.loads(out)
    calibration = document["performance"]["calibration"]
    planned = latency(lookup_model("meta-llama/Llama-3.1-8B-Instruct"), GPU_PERFORMANCE["NVIDIA-H100-80GB-HBM3"],
                      1, 64, 1030, 256)
    rows = {row["figure"]: row for row in calibration["rows"]}
    assert calibration["concurrency_per_replica"] == 64 and calibration["replicas"] == 1
    assert rows["TPOT p50 ms"]["planned"] == round(planned.tpot_seconds * 1000, 2)
    assert rows["TPOT p50 ms"]["correction"] == round(25.0 / round(planned.tpot_seconds * 1000, 2), 2)
    assert rows["KV cache tokens"] == {"figure": "KV cache tokens", "measured": 400000,
                                       "planned": document["kv_cache_tokens"],
                                       "correction": round(400000 / document["kv_cache_tokens"], 2)}
    assert calibration["measured_max_concurrency"] == round(400000 / 8192, 2)


def test_calibration_reads_the_jobs_log_whose_last_line_is_the_report(tmp_path):
    log = tmp_path / "job.log"
    log.write_text("PASS service models: lists llama-8b\n\nverdict: PASS\n" + json.dumps({"verification": REPORT}))
    code, out, err = _plan("--calibration", str(log))
    assert code == 0, err
    assert "measured (calibration)" in out
    assert "  KV cache tokens" in out


def test_the_replicas_divide_the_measured_load(tmp_path):
    (tmp_path / "r.json").write_text(json.dumps(REPORT))
    code, out, _ = _plan("--calibration", str(tmp_path / "r.json"), "--replicas", "2", "--json")
    calibration = json.loads(out)["performance"]["calibration"]
    assert (calibration["concurrency_per_replica"], calibration["replicas"]) == (32, 2)


@pytest.mark.parametrize(("content", "message"), [
    ("not json at all", "no verify report in it"),
    (json.dumps({"model": "m", "load": {"requests": 0}}), "neither a completed load test nor a KV cache figure"),
    (json.dumps({"model": "m", "interrupted": True, "load": {"requests": 40, "concurrency": 8}}),
     "the run was interrupted, so its load figures are not the planned load's"),
])
def test_an_unusable_results_file_is_one_line_and_exit_2(tmp_path, content, message):
    (tmp_path / "r.json").write_text(content)
    code, out, err = _plan("--calibration", str(tmp_path / "r.json"))
    assert (code, out) == (2, "")
    assert err.startswith("plan rejected: --calibration") and message in err and err.count("\n") == 1


def test_a_missing_results_file_and_a_zero_concurrency_are_exit_2(tmp_path):
    code, _, err = _plan("--calibration", str(tmp_path / "absent.json"))
    assert code == 2 and err == f"plan rejected: --calibration {tmp_path / 'absent.json'}: No such file or directory\n"
    code, _, err = _plan("--concurrency", "0")
    assert code == 2 and "argument --concurrency: expected at least 1, got 0" in err
