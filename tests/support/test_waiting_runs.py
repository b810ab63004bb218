"""The waiting-runs process: started once per session directory, every outcome written whole, a failed run
or process failing the test that reads it with its traceback, and the same outcomes run in threads
when no process runs the group."""

from __future__ import annotations

import json
import os
import pickle
import signal
from pathlib import Path

import pytest

from tests.support import waiting_runs

THIS = "tests.support.test_waiting_runs"  # this module's jobs() is the group under test


def _fails() -> None:
    raise ValueError("no answer today")


def jobs(scratch: Path) -> dict[str, object]:
    if os.environ.get("WAITING_RUNS_SELFTEST") == "die":
        os.kill(os.getpid(), signal.SIGKILL)  # as the OOM killer would: no traceback, no outcome
    (scratch / "seen").write_text("scratch is a directory of the runs' own")
    return {"answer": lambda: 42, "text": lambda: (scratch / "seen").read_text(), "fails": _fails}


def test_only_groups_whose_module_has_a_selected_test_run():
    assert waiting_runs.selected_groups(["tests/components/verification/test_probe.py::test_x",
                                         "tests/stacks/test_other.py::test_y"]) == {"probe": "tests.support.probe_runs"}
    assert waiting_runs.selected_groups(["tests/components/verification/test_probe.py::test_z[1]"]) == {
        "probe": "tests.support.probe_runs"}
    assert waiting_runs.selected_groups(["tests/stacks/test_other.py::test_y"]) == {}
    assert waiting_runs.selected_groups(["tests/stacks/cli/test_verify.py::test_json_is_the_whole_report",
                                         "tests/components/verification/test_probe.py::test_x"]) == {
        "probe": "tests.support.probe_runs", "verify": "tests.support.verify_runs"}


def test_the_process_starts_once_per_directory_and_writes_every_outcome(tmp_path):
    with waiting_runs.started(tmp_path, {"selftest": THIS}):
        first = json.loads((tmp_path / "started.json").read_text())
        with waiting_runs.outcomes("selftest", tmp_path / "unused") as runs:
            assert runs["answer"].result(timeout=60) == 42
            assert runs["text"].result(timeout=60) == "scratch is a directory of the runs' own"
            with pytest.raises(RuntimeError, match=r"(?s)selftest\.fails raised in the waiting-runs process:\n"
                                                   r"Traceback .*ValueError: no answer today"):
                runs["fails"].result(timeout=60)
    assert first["groups"] == {"selftest": THIS}
    # A second worker's session: the process is started already, its outcomes are read, nothing restarts.
    with waiting_runs.started(tmp_path, {"selftest": THIS}):
        assert json.loads((tmp_path / "started.json").read_text()) == first
        with waiting_runs.outcomes("selftest", tmp_path / "unused") as runs:
            assert runs["answer"].result(timeout=0) == 42
    assert (tmp_path / "runner.stderr").read_text() == ""
    assert sorted(p.name for p in tmp_path.glob("*.pickle")) == [
        "selftest.answer.pickle", "selftest.fails.pickle", "selftest.text.pickle"]
    assert json.loads((tmp_path / "selftest.names.json").read_text()) == ["answer", "fails", "text"]


def test_leaving_a_directory_restores_the_sessions(tmp_path):
    before = waiting_runs._shared, waiting_runs._groups  # noqa: SLF001 - this session's, if it has one
    (tmp_path / "started.json").write_text(json.dumps({"pid": 1, "groups": {"selftest": THIS}}))
    with waiting_runs.started(tmp_path, {}):
        assert (waiting_runs._shared, waiting_runs._groups) == (tmp_path, {"selftest": THIS})  # noqa: SLF001
    assert (waiting_runs._shared, waiting_runs._groups) == before  # noqa: SLF001


def test_nothing_starts_when_no_group_is_selected(tmp_path):
    with waiting_runs.started(tmp_path, {}):
        pass
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lock"]


def test_a_name_the_group_does_not_have_fails_at_once(tmp_path):
    (tmp_path / "started.json").write_text(json.dumps({"pid": 1, "groups": {"selftest": THIS}}))
    (tmp_path / "selftest.names.json").write_text(json.dumps(["answer", "fails", "text"]))
    with waiting_runs.started(tmp_path, {"selftest": THIS}), waiting_runs.outcomes("selftest", tmp_path) as runs:
        with pytest.raises(LookupError, match="no run 'anser' in group 'selftest'"):
            runs["anser"].result(timeout=60)


def test_a_process_that_failed_fails_the_reader_with_its_traceback(tmp_path):
    (tmp_path / "started.json").write_text(json.dumps({"pid": 1, "groups": {"selftest": THIS}}))
    (tmp_path / "runner.failed").write_text("Traceback (most recent call last):\nImportError: no module x\n")
    with waiting_runs.started(tmp_path, {"selftest": THIS}), waiting_runs.outcomes("selftest", tmp_path) as runs:
        with pytest.raises(RuntimeError, match="(?s)the waiting-runs process failed before selftest.answer:\n"
                                               "Traceback .*ImportError: no module x"):
            runs["answer"].result(timeout=60)


def test_a_killed_process_fails_its_readers_at_once_with_its_exit_status(tmp_path, monkeypatch):
    monkeypatch.setenv("WAITING_RUNS_SELFTEST", "die")
    with waiting_runs.started(tmp_path, {"selftest": THIS}), waiting_runs.outcomes("selftest", tmp_path) as runs:
        # Well inside the timeout: the worker that started it reports its death as soon as it ends.
        with pytest.raises(RuntimeError, match="the waiting-runs process failed before selftest.answer:\n"
                                               "the process exited with -9; its stderr:\n"):
            runs["answer"].result(timeout=60)


def test_a_run_never_written_times_out_naming_the_process_and_its_stderr(tmp_path):
    (tmp_path / "started.json").write_text(json.dumps({"pid": 123, "groups": {"selftest": THIS}}))
    (tmp_path / "runner.stderr").write_text("Killed\n")
    (tmp_path / "selftest.answer.pickle").write_bytes(pickle.dumps(("ok", 42)))
    with waiting_runs.started(tmp_path, {"selftest": THIS}), waiting_runs.outcomes("selftest", tmp_path) as runs:
        assert runs["answer"].result(timeout=0) == 42
        with pytest.raises(TimeoutError, match=r'(?s)no outcome of selftest.text from the waiting-runs process '
                                               r'\{"pid": 123, .*after 0.05 s; its stderr:\nKilled\n'):
            runs["text"].result(timeout=0.05)


def test_without_a_process_the_group_runs_here_in_threads(tmp_path, monkeypatch):
    monkeypatch.setitem(waiting_runs.GROUPS, "selftest", ("tests/support/test_waiting_runs.py", THIS))
    with waiting_runs.outcomes("selftest", tmp_path) as runs:
        assert runs["answer"].result(timeout=60) == 42
        assert runs["text"].result(timeout=60) == "scratch is a directory of the runs' own"
        with pytest.raises(ValueError, match="no answer today"):
            runs["fails"].result(timeout=60)
    assert list(tmp_path.glob("*.pickle")) == []
