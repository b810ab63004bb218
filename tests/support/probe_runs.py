"""The probe's end-to-end runs for tests/components/verification/test_probe.py: one report per
scenario, a run told its progress, one Ctrl-C stopped mid-load, and the Job's entry point run as a
process, each against its own local OpenAI-compatible server (tests/support/openai_server.py)."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from llm_serving.verification import LoadPlan, Settings, Target, probe
from tests.support.openai_server import KEY, Behaviour, OpenAIServer

MODEL = "llama-8b"
OBJECTIVES = {"ttft_p95_ms": 200.0, "itl_p95_ms": 20.0}
SLOW_OBJECTIVES = {"ttft_p95_ms": 100.0, "itl_p95_ms": 10.0}
PLANNED = {"ttft_ms": 20.0, "itl_ms": 5.0, "tpot_ms": 5.0, "output_tokens_per_second": 800.0}


def _load(**changes: object) -> LoadPlan:
    base = {"concurrency": 3, "prompt_tokens": 64, "output_tokens": 12, "duration_seconds": 0.6,
            "ramp_seconds": 0.1, "planned": PLANNED, "objectives": OBJECTIVES}
    return LoadPlan(**{**base, **changes})  # type: ignore[arg-type]


def _run(behaviour: Behaviour, load: LoadPlan | None = None, check_auth: bool = True) -> dict:
    with OpenAIServer(behaviour) as url:
        return probe.run(Settings(MODEL, (Target("url", url, check_auth),), load, request_timeout_seconds=20), KEY)


class Recorded(probe.Progress):
    """Everything `run` said, in order: each phase's text and each load count offered. `ctrl_c(said)` true raises
    KeyboardInterrupt there, once, as Ctrl-C does in whatever the main thread runs."""

    def __init__(self, ctrl_c: Callable[[str | probe.LoadCount], bool] = lambda _: False) -> None:
        self.said: list[str | probe.LoadCount] = []
        self._ctrl_c, self._pressed = ctrl_c, False

    def _hear(self, said: str | probe.LoadCount) -> None:
        self.said.append(said)
        if not self._pressed and self._ctrl_c(said):
            self._pressed = True
            raise KeyboardInterrupt

    def phase(self, text: str) -> None:
        self._hear(text)

    def load(self, count: probe.LoadCount) -> None:
        self._hear(count)


def _told(behaviour: Behaviour, load: LoadPlan | None, progress: Recorded) -> tuple[dict, list[str | probe.LoadCount]]:
    """The report (of a run Ctrl-C stopped too) and what the run told `progress`."""
    with OpenAIServer(behaviour) as url:
        try:
            report = probe.run(Settings(MODEL, (Target("url", url),), load, request_timeout_seconds=20), KEY, progress)
        except probe.Interrupted as stopped:
            report = stopped.report
    return report, progress.said


def _after_three_requests(said: str | probe.LoadCount) -> bool:
    return isinstance(said, probe.LoadCount) and said.done >= 3


# Each test's probe run against its own server. A run spends its time waiting on the server's sleeps
# (the slow one about 1.9 s, the others 0.15-1.2 s) and almost none computing, so they all start
# together at the module's first test, and each test reads its own report. Each run has its own server,
# port and threads; none reads another's state.
# name: (the server's behaviour, the load test's changes to _load() or None for the smoke checks alone,
# whether the auth check runs)
SCENARIOS: dict[str, tuple[Behaviour, dict[str, object] | None, bool]] = {
    "correct": (Behaviour(), None, True),
    "buffering": (Behaviour(buffer=True), None, True),
    "no-auth": (Behaviour(check_key=False), None, True),
    "no-auth-guarded-elsewhere": (Behaviour(check_key=False), None, False),
    "malformed": (Behaviour(malformed_after=3), None, True),
    "wrong-model": (Behaviour(reported_model="llama-8b-old"), None, True),
    "other-name": (Behaviour(served_name="other"), None, True),
    "kv-cache": (Behaviour(kv_cache_blocks=1000), None, True),
    "no-kv-cache": (Behaviour(), None, True),
    # Objectives far above the server's 5 ms: a loaded 2-core machine (the suite's other worker) can hold
    # a token back tens of milliseconds, which is the scheduler's latency, not the probe's verdict.
    "load-within-objectives": (Behaviour(), {"objectives": {"ttft_p95_ms": 2000.0, "itl_p95_ms": 250.0}}, True),
    # A quarter over each of its objectives (100 ms TTFT, 10 ms ITL): slow beyond doubt, since a measured
    # latency is never below the server's sleep, and still a stream (tokens 12.5 ms apart, six times the
    # probe's 2 ms burst gap). The module's longest run (about 1.7 s; 3 s at twice these figures).
    "load-slow": (Behaviour(ttft_seconds=0.125, itl_seconds=0.0125),
                  {"concurrency": 2, "duration_seconds": 0.5, "objectives": SLOW_OBJECTIVES}, True),
    "load-buffered": (Behaviour(buffer=True), {}, True),
    "load-all-fail": (Behaviour(malformed_after=0), {}, True),
    "load-max-requests": (Behaviour(), {"max_requests": 4, "duration_seconds": 5.0}, True),
}


def _job_entry_point(scratch: Path) -> dict[str, object]:
    """probe.py as the Job runs it: the file alone (`python -I`, no package), settings and key from files,
    against a buffering server, in gate mode and then in report mode (each a process of about 0.45 s that
    mostly waits on the server)."""
    directory = scratch / "job-entry-point"
    directory.mkdir()
    key_file, log = directory / "api-key", directory / "termination-log"
    key_file.write_text(KEY + "\n")
    ran: dict[str, object] = {}
    with OpenAIServer(Behaviour(buffer=True)) as url:
        (directory / "settings.json").write_text(json.dumps(Settings(MODEL, (Target("edge", url),)).to_json()))
        command = [sys.executable, "-I", probe.__file__, "--settings", str(directory / "settings.json"),
                   "--api-key-file", str(key_file), "--termination-log", str(log)]
        for mode in ("gate", "report"):
            done = subprocess.run([*command, "--mode", mode], capture_output=True, text=True, timeout=60, check=False)
            ran[mode] = (done.returncode, done.stdout, done.stderr)
    ran["termination-log"] = log.read_text()
    return ran


def jobs(scratch: Path) -> dict[str, Callable[[], object]]:
    """Each scenario's probe run by name, the two told their progress ("progress", and "ctrl-c-mid-load": a load
    test of 5 s that a Ctrl-C stops once three requests completed), and the Job's entry point run as a process (its
    files in `scratch`)."""
    runs: dict[str, Callable[[], object]] = {
        name: functools.partial(_run, behaviour, None if load is None else _load(**load), check_auth)
        for name, (behaviour, load, check_auth) in SCENARIOS.items()}
    return {**runs,
            "progress": functools.partial(_told, Behaviour(), _load(), Recorded()),
            "ctrl-c-mid-load": functools.partial(_told, Behaviour(), _load(duration_seconds=5.0),
                                                 Recorded(_after_three_requests)),
            "job-entry-point": functools.partial(_job_entry_point, scratch)}
