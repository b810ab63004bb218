"""The accuracy gate's program end to end (llm_serving/verification/eval_gate.py): lm_eval's own `gsm8k`, read from
six documents written here, scored through the harness's local-completions client on two local completion servers
(tests/support/completions_server.py), one that answers every question right and one that gets half wrong.

Each scenario is one run of the program's entry (`main`, in-process: the harness is imported once for the module),
shared by the tests that read it. One more run, in a subprocess that can import only the packages of the hashed
lock, proves the lock is exactly what the Job's run imports.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import io
import json
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from llm_serving.platform import versions
from llm_serving.verification import EVAL_REQUIREMENTS, EVAL_SOURCE, eval_gate
from tests.support.completions_server import CompletionServer
from tests.support.openai_server import KEY

MODEL = "llama-8b"
QUESTIONS = {f"Ann has {n} pears and picks {n + 4} more. How many pears does she have now?": 2 * n + 4
             for n in range(1, 7)}
LIMIT = 4  # of the six documents: the first four are scored
WRONG = frozenset(list(QUESTIONS)[0:LIMIT:2])  # half of the scored ones
LOCK = Path(eval_gate.__file__).with_name("eval-requirements.txt")


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str
    termination: str | None

    @property
    def report(self) -> dict[str, Any]:
        return json.loads(self.stdout.strip().splitlines()[-1])["eval"]


def _task(data: Path, **changes: Any) -> dict[str, Any]:
    return {"name": "gsm8k", "metric": "exact_match", "filter": "strict-match", "numFewshot": 0, "format": "json",
            "files": {"test": str(data)}, "minScore": None, **changes}


def _settings(data: Path, candidate: str, stable: str | None, **changes: Any) -> dict[str, Any]:
    return {"model": MODEL, "revision": "canary",
            "candidate": {"name": f"{MODEL}-canary", "url": candidate, "concurrency": 2},
            "stable": {"name": MODEL, "url": stable, "concurrency": 1} if stable else None,
            "tasks": [_task(data)], "limit": LIMIT, "maxDropPoints": 2.0, "requestTimeoutSeconds": 30, "seed": 1234,
            "deployed": "d3ad0fc0ffee", **changes}


@contextlib.contextmanager
def _event_loop_kept() -> Iterator[None]:
    """The main thread's event loop as it was: the harness's concurrent requests go through `asyncio.run`, which
    leaves the thread with none set (`set_event_loop(None)`), and later tests in this worker ask for it (Pulumi's
    mocks call `asyncio.get_event_loop()`)."""
    before = getattr(asyncio.get_event_loop_policy()._local, "_loop", None)
    try:
        yield
    finally:
        asyncio.set_event_loop(before if before is not None and not before.is_closed() else asyncio.new_event_loop())


def _main(scratch: Path, settings: dict[str, Any], mode: str = "gate") -> Run:
    scratch.mkdir(parents=True, exist_ok=True)
    (scratch / "settings.json").write_text(json.dumps(settings))
    (scratch / "key").write_text(KEY + "\n")
    termination = scratch / "termination-log"
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr), _event_loop_kept():
        code = eval_gate.main(["--settings", str(scratch / "settings.json"), "--api-key-file", str(scratch / "key"),
                               "--mode", mode, "--termination-log", str(termination)])
    return Run(code, stdout.getvalue(), stderr.getvalue(),
               termination.read_text() if termination.exists() else None)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """GSM8K's test split in its own shape (question, answer ending in `#### <n>`), as JSON lines."""
    path = tmp_path_factory.mktemp("task-set") / "test.jsonl"
    path.write_text("".join(json.dumps({"question": q, "answer": f"{a - 4} + 4 = {a}\n#### {a}"}) + "\n"
                            for q, a in QUESTIONS.items()))
    return path


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, CompletionServer | str]]:
    right, half = CompletionServer(QUESTIONS, served_name=MODEL), CompletionServer(QUESTIONS, WRONG, MODEL)
    with right as right_url, half as half_url:
        yield {"right": right_url, "half": half_url, "right-server": right, "half-server": half}


@pytest.fixture(scope="module")
def runs(tmp_path_factory, data, servers) -> dict[str, Run]:
    scratch = tmp_path_factory.mktemp("eval-runs")
    right, half = str(servers["right"]), str(servers["half"])
    return {
        "same": _main(scratch / "same", _settings(data, right, right)),
        "drop": _main(scratch / "drop", _settings(data, half, right)),
        "drop-report": _main(scratch / "drop-report", _settings(data, half, right), mode="report"),
        "floor": _main(scratch / "floor", _settings(data, half, None, revision=None,
                                                    tasks=[_task(data, minScore=0.9)])),
        "unreachable": _main(scratch / "unreachable",
                             _settings(data, f"http://127.0.0.1:{_closed_port()}/v1", right)),
        "interrupted": _interrupted(scratch / "interrupted", data, right),
    }


def _interrupted(scratch: Path, data: Path, candidate: str) -> Run:
    """The stable's server sends SIGTERM (what a Job past its deadline gets) at its first request."""
    with CompletionServer(QUESTIONS, served_name=MODEL, stop=True) as stopping:
        return _main(scratch, _settings(data, candidate, stopping))


def test_two_revisions_that_answer_alike_pass_with_no_drop(runs):
    run = runs["same"]
    assert run.code == eval_gate.EXIT_PASS, run.stderr
    report = run.report
    assert report["passed"] and report["failures"] == []
    assert report["harness"] == f"lm-eval {versions.HARNESS_VERSION}"
    assert report["tasks"] == [{"name": "gsm8k", "metric": "exact_match", "filter": "strict-match", "samples": LIMIT,
                                "candidate": 1.0, "stable": 1.0, "dropPoints": 0.0, "minScore": None, "passed": True}]
    assert run.termination == "passed: gsm8k 1.0000 (stable 1.0000, drop 0)"


def test_the_harness_asks_each_server_greedily_for_the_first_samples_by_the_served_name(runs, servers):
    del runs  # the scenarios ran
    asked = servers["right-server"].requests + servers["half-server"].requests
    # same (both runs on the right server), drop and drop-report (one on each), floor (the candidate only) and
    # unreachable (the stable only)
    assert len(asked) == LIMIT * 8
    assert {(r["model"], r["temperature"]) for r in asked} == {(MODEL, 0.0)}
    scored = {q for r in asked for q in QUESTIONS if q in r["prompt"]}
    assert scored == set(list(QUESTIONS)[:LIMIT])
    assert all(r["prompt"].startswith("Question: ") and r["prompt"].endswith("\nAnswer:") for r in asked)


def test_a_candidate_that_drops_fails_the_gate_naming_the_task_and_both_scores(runs):
    run = runs["drop"]
    assert run.code == eval_gate.EXIT_FAIL
    report = run.report
    assert not report["passed"]
    (task,) = report["tasks"]
    assert (task["candidate"], task["stable"], task["passed"]) == (0.5, 1.0, False)
    assert task["dropPoints"] == round((task["stable"] - task["candidate"]) * 100, 6) == 50.0
    (line,) = report["failures"]
    assert line == ("revision canary of llama-8b: gsm8k exact_match,strict-match: candidate 0.5000 is 50 points "
                    "below stable 1.0000 (allowed 2, 4 samples)")
    assert run.termination == line
    assert run.stdout.splitlines()[-2].startswith("verdict: FAIL (revision canary of llama-8b)")


def test_report_mode_reports_the_same_drop_and_exits_zero(runs):
    run = runs["drop-report"]
    assert run.code == eval_gate.EXIT_PASS
    assert run.report["passed"] is False and run.report["mode"] == "report"
    assert run.report["failures"] == runs["drop"].report["failures"]
    assert run.termination == runs["drop"].termination


def test_a_floor_fails_a_candidate_that_has_no_stable_to_compare_with(runs):
    run = runs["floor"]
    assert run.code == eval_gate.EXIT_FAIL
    (task,) = run.report["tasks"]
    assert (task["candidate"], task["stable"], task["dropPoints"], task["minScore"]) == (0.5, None, None, 0.9)
    assert run.report["failures"] == [
        "gsm8k exact_match,strict-match: candidate 0.5000 is below the floor minScore 0.9000"]


def test_an_unreachable_candidate_is_a_failing_line_naming_it_not_a_traceback(runs):
    run = runs["unreachable"]
    assert run.code == eval_gate.EXIT_FAIL
    assert "Traceback" not in run.stderr + run.stdout
    report = run.report
    (line,) = report["failures"]
    assert re.fullmatch(r"revision canary of llama-8b: candidate llama-8b-canary \(http://127\.0\.0\.1:\d+/v1\): "
                        r"unreachable: .*Connection refused.*", line), line
    (task,) = report["tasks"]
    assert (task["stable"], task["candidate"], task["passed"]) == (1.0, None, False)  # the stable still ran
    assert run.termination == line


def test_sigterm_stops_the_run_with_exit_130_and_the_report_so_far(runs):
    run = runs["interrupted"]
    assert run.code == eval_gate.EXIT_INTERRUPTED
    assert "Traceback" not in run.stderr
    report = run.report
    assert report["passed"] is False and report["tasks"][0]["candidate"] is None
    assert report["failures"] == ["revision canary of llama-8b: interrupted before every run completed"]
    assert run.termination == report["failures"][0]


def test_bad_settings_exit_2_with_a_line_naming_each_key_and_value(tmp_path, data):
    settings = _settings(data, "http://127.0.0.1:9/v1", None, limit=0, colour="blue",
                         tasks=[_task(data, numFewshot=-1, format="xlsx", files={"test": "relative.jsonl"})])
    settings["candidate"]["concurrency"] = 0
    del settings["seed"]
    run = _main(tmp_path, settings)
    assert run.code == eval_gate.EXIT_USAGE and run.stdout == ""
    problems = [line.removeprefix("eval: settings: ") for line in run.stderr.splitlines()]
    assert problems == [
        'colour: "blue": unknown key; allowed: model, revision, candidate, stable, tasks, limit, maxDropPoints, '
        "requestTimeoutSeconds, seed, deployed",
        "seed: missing (it may be null only where the format says so)",
        "candidate.concurrency: 0: expected an integer from 1 to 4096",
        "tasks[0].numFewshot: -1: expected an integer from 0 to 100, or null (the task's default)",
        'tasks[0].format: "xlsx": expected one of parquet, json, csv',
        'tasks[0].files.test: "relative.jsonl": expected an absolute path',
        "limit: 0: expected an integer from 1 to 100000 (samples per task)",
    ]
    assert run.termination is not None and run.termination.startswith('settings: colour: "blue"')


def test_a_task_the_job_cannot_score_is_refused_before_any_request(tmp_path, data, runs):
    del runs  # lm_eval imported already: this adds only the task lookup
    settings = _settings(data, "http://127.0.0.1:9/v1", None, tasks=[
        _task(data, name="arc_easy", metric="acc", filter="none"),
        _task(data, metric="acc", filter="loose", numFewshot=None),
        _task(data, name="no_such_task_anywhere")])
    run = _main(tmp_path, settings)
    assert run.code == eval_gate.EXIT_USAGE
    problems = [line.removeprefix("eval: settings: ") for line in run.stderr.splitlines() if line.startswith("eval:")]
    assert problems == [
        'tasks[0].name: "arc_easy": its output_type is multiple_choice, which needs log-likelihoods and so a '
        "tokenizer the Job does not have; only generate_until tasks can run",
        'tasks[1].metric: "acc": gsm8k computes exact_match',
        'tasks[1].filter: "loose": gsm8k has strict-match, flexible-extract',
        '''tasks[1].files: ["test"]: 5-shot gsm8k draws its examples from its train split; stage that file or set '''
        "numFewshot 0",
        'tasks[2].name: "no_such_task_anywhere": not a task the harness registers',
    ]


def test_a_drop_equal_to_the_allowance_passes_whatever_the_float_noise():
    settings = eval_gate.parse_settings({
        "model": MODEL, "revision": None, "candidate": {"name": "c", "url": "http://c:8000/v1", "concurrency": 1},
        "stable": {"name": "s", "url": "http://s:8000/v1", "concurrency": 1}, "tasks": [],
        "limit": 1, "maxDropPoints": 1.0, "requestTimeoutSeconds": 1, "seed": 0, "deployed": None}
        | {"tasks": [{"name": "t", "metric": "m", "filter": "f", "numFewshot": 0, "format": "json",
                      "files": {"test": eval_gate.__file__}, "minScore": 0.705}]})
    assert (0.73 - 0.72) * 100 > 1.0  # what an unrounded comparison would fail
    report = eval_gate.judge(settings, eval_gate.Outcome({"t": (0.72, 100)}), eval_gate.Outcome({"t": (0.73, 100)}),
                             "lm-eval x")
    assert report["passed"] and report["tasks"][0]["dropPoints"] == 1.0
    # A stable below the floor the candidate passes is a note, not a failure.
    report = eval_gate.judge(settings, eval_gate.Outcome({"t": (0.71, 100)}), eval_gate.Outcome({"t": (0.70, 100)}),
                             "lm-eval x")
    assert report["passed"] and report["notes"] == [
        "t m,f: the stable scores 0.7000, below the floor minScore 0.7050 the candidate passes"]


# ----------------------------------------------------------------------------------------------
# The lock


def _locked() -> dict[str, str]:
    """name -> version of each line of the hashed lock."""
    pins = {}
    for line in EVAL_REQUIREMENTS.splitlines():
        if line and not line.startswith("#"):
            requirement, *hashes = line.split()
            name, version = requirement.split("==")
            assert hashes and all(h.startswith("--hash=sha256:") for h in hashes), line
            pins[name] = version
    return pins


def test_the_lock_pins_the_harness_version_and_is_what_the_package_exports():
    assert EVAL_REQUIREMENTS == LOCK.read_text()
    assert EVAL_SOURCE == Path(eval_gate.__file__).read_text()
    assert _locked()["lm-eval"] == versions.HARNESS_VERSION


# Run as the Job runs it: `python3 eval_gate.py ...` with only the standard library and the lock's packages
# importable (the Job's `pip install --target` directory on PYTHONPATH); then write which top-level modules loaded.
_RESTRICTED = """
import json, runpy, sys
libs, program, out, *argv = sys.argv[1:]
sys.path[:0] = [libs]
sys.argv = [program, *argv]
try:
    runpy.run_path(program, run_name="__main__")
    code = 0
except SystemExit as stop:
    code = stop.code
with open(out, "w") as handle:
    json.dump({"code": code, "modules": sorted({name.split(".")[0] for name in sys.modules})}, handle)
"""


def _restricted_libs(into: Path, names: list[str]) -> dict[str, str]:
    """`into` holding a link to each top-level module (and dist-info) of the named installed distributions, as
    `pip install --target` lays them out; returns top-level name -> distribution."""
    owners = {}
    for name in names:
        dist = importlib.metadata.distribution(name)
        for file in dist.files or []:
            top = file.parts[0]
            if top in ("..", "__pycache__") or top in owners:
                continue
            source = Path(str(dist.locate_file(top)))
            (into / top).symlink_to(source, target_is_directory=source.is_dir())
            owners[top.removesuffix(".py")] = name
    return owners


def test_the_lock_holds_exactly_the_packages_the_run_imports(tmp_path, data, servers):
    """With only the lock's packages importable the run passes (nothing is missing), and it imports every one of
    them (nothing is there for nothing)."""
    libs = tmp_path / "libs"
    libs.mkdir()
    owners = _restricted_libs(libs, sorted(_locked()))
    scratch = tmp_path / "run"
    scratch.mkdir()
    (scratch / "settings.json").write_text(json.dumps(_settings(data, str(servers["right"]), str(servers["half"]))))
    (scratch / "key").write_text(KEY)
    out = scratch / "modules.json"
    done = subprocess.run(
        [sys.executable, "-S", "-c", _RESTRICTED, str(libs), eval_gate.__file__, str(out),
         "--settings", str(scratch / "settings.json"), "--api-key-file", str(scratch / "key"), "--mode", "report"],
        capture_output=True, text=True, timeout=300, check=False)
    assert out.exists(), done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["code"] == eval_gate.EXIT_PASS, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])["eval"]
    assert [(t["stable"], t["candidate"]) for t in report["tasks"]] == [(0.5, 1.0)], done.stderr[-3000:]
    imported = {_normal(owners[module]) for module in result["modules"] if module in owners}
    assert sorted(set(_locked()) - imported) == [], "locked, never imported"
    assert imported == set(_locked())


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()
