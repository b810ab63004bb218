"""The accuracy gate's staging program (llm_serving/verification/stage_eval.py), run in-process: the task files from a
stand-in for huggingface_hub's hf_hub_download (real files under tmp_path), and the harness's wheels by the real pip
from a PEP 503 index on 127.0.0.1, then installed the way the eval Job's init container installs them (no index, the
same lock). A file or wheel with another digest is refused and no marker is written; a retried Job keeps what is in
place."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import subprocess
import sys
import types
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from llm_serving.verification import evaluation, stage_eval
from tests.support.local_http import serving

DATASET, REVISION = "openai/gsm8k", "4" * 40
FILES = {"main/test-00000-of-00001.parquet": b"PAR1 the test split", "main/train-00000-of-00001.parquet": b"PAR1 train"}


def _wheel(value: int) -> bytes:
    """A minimal pure-Python wheel of `evalprobe` (PEP 427: the package, METADATA, WHEEL and RECORD)."""
    files = {"evalprobe/__init__.py": f"VALUE = {value}\n".encode(),
             "evalprobe-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: evalprobe\nVersion: 1.0\n",
             "evalprobe-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                              b"Tag: py3-none-any\n"}
    record = "".join(
        f"{name},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}\n"
        for name, data in files.items()) + "evalprobe-1.0.dist-info/RECORD,,\n"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in {**files, "evalprobe-1.0.dist-info/RECORD": record.encode()}.items():
            archive.writestr(name, data)
    return buffer.getvalue()


WHEEL_NAME = "evalprobe-1.0-py3-none-any.whl"
GOOD = _wheel(42)


class Index(BaseHTTPRequestHandler):
    """PyPI's simple API (PEP 503) for one project, serving `served` as its one wheel."""

    served = GOOD

    def do_GET(self):
        if self.path.rstrip("/") == "/simple/evalprobe":
            body = f'<a href="/files/{WHEEL_NAME}">{WHEEL_NAME}</a>'.encode()
            kind = "text/html"
        elif self.path == f"/files/{WHEEL_NAME}":
            body, kind = type(self).served, "application/octet-stream"
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_):
        pass


@pytest.fixture
def index(monkeypatch):
    Index.served = GOOD
    with serving(ThreadingHTTPServer(("127.0.0.1", 0), Index)) as httpd:
        monkeypatch.setenv("PIP_INDEX_URL", f"http://127.0.0.1:{httpd.server_address[1]}/simple/")
        monkeypatch.setenv("PIP_TRUSTED_HOST", "127.0.0.1")
        yield


def _lock(tmp_path: Path) -> Path:
    lock = tmp_path / "requirements.txt"
    lock.write_text(f"evalprobe==1.0 --hash=sha256:{hashlib.sha256(GOOD).hexdigest()}\n")
    return lock


def _hub(served: dict[str, bytes], calls: list[dict[str, Any]]) -> Any:
    def hf_hub_download(**kwargs: Any) -> str:
        calls.append(kwargs)
        path = Path(kwargs["local_dir"]) / kwargs["filename"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(served[kwargs["filename"]])
        return str(path)
    return hf_hub_download


def _entries(task_dir: Path) -> list[dict[str, str]]:
    return [{"dataset": DATASET, "revision": REVISION, "path": path, "sha256": hashlib.sha256(data).hexdigest(),
             "target": str(task_dir / "gsm8k" / f"{path.split('/')[1].split('-')[0]}.parquet")}
            for path, data in FILES.items()]


def test_each_file_lands_only_with_its_pinned_digest_and_a_retry_keeps_it(tmp_path):
    task_dir = tmp_path / "tasks"
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    calls: list[dict[str, Any]] = []
    tampered = {**FILES, "main/test-00000-of-00001.parquet": b"PAR1 another split"}
    problems = stage_eval.stage_files(_entries(task_dir), scratch, _hub(tampered, calls))
    (problem,) = problems
    assert problem.startswith(f"refused {DATASET}@444444444444:main/test-00000-of-00001.parquet: sha256 "
                              f"{hashlib.sha256(tampered['main/test-00000-of-00001.parquet']).hexdigest()}")
    assert not (task_dir / "gsm8k" / "test.parquet").exists()  # refused, and deleted from the scratch
    assert (task_dir / "gsm8k" / "train.parquet").read_bytes() == FILES["main/train-00000-of-00001.parquet"]
    # Each from its dataset at the pinned commit.
    assert {(c["repo_id"], c["repo_type"], c["revision"]) for c in calls} == {(DATASET, "dataset", REVISION)}
    # The retry: the train file is kept (no download), the test file fetched again and, right this time, placed.
    calls.clear()
    assert stage_eval.stage_files(_entries(task_dir), scratch, _hub(FILES, calls)) == []
    assert [c["filename"] for c in calls] == ["main/test-00000-of-00001.parquet"]
    assert (task_dir / "gsm8k" / "test.parquet").read_bytes() == FILES["main/test-00000-of-00001.parquet"]


def test_the_harness_is_downloaded_by_its_hashes_and_installs_with_no_index(tmp_path, index):
    harness = tmp_path / "volume" / "harness-x"
    assert stage_eval.stage_harness(_lock(tmp_path), harness) is None
    assert sorted(p.name for p in harness.iterdir()) == [stage_eval.MARKER, WHEEL_NAME]
    # Readable by the eval pod's user, whatever user staged it (mkdtemp's 0700 opened up before the rename).
    assert harness.stat().st_mode & 0o777 == 0o755
    # The eval Job's init container: from the staged directory only, the hashes checked again, into its own dir.
    target = tmp_path / "opt-harness"
    command = evaluation.install_command(sys.executable, str(harness), str(target), str(_lock(tmp_path)))
    assert "--no-index" in command
    subprocess.run(command, check=True, env={"PATH": "/usr/bin:/bin"})
    found = subprocess.run([sys.executable, "-c", "import evalprobe; print(evalprobe.VALUE)"], check=True,
                           capture_output=True, text=True, env={"PYTHONPATH": str(target)})
    assert found.stdout.strip() == "42"
    # A second Job finds the marker and downloads nothing.
    ran: list[list[str]] = []
    assert stage_eval.stage_harness(_lock(tmp_path), harness, run=lambda cmd, check: ran.append(cmd)) is None
    assert ran == []


def test_a_wheel_with_another_digest_is_refused_and_nothing_is_marked(tmp_path, index):
    Index.served = _wheel(666)  # the index serves other bytes under the locked name
    harness = tmp_path / "volume" / "harness-x"
    problem = stage_eval.stage_harness(_lock(tmp_path), harness)
    assert problem is not None and problem.startswith("pip could not download the harness's locked wheels")
    assert not harness.exists()
    assert list((tmp_path / "volume").iterdir()) == []  # the scratch directory went too


def test_the_program_marks_the_task_set_last_and_only_when_everything_is_in_place(tmp_path, monkeypatch):
    task_dir = tmp_path / "tasks"
    harness = tmp_path / "harness"
    env = {"EVAL_FILES": json.dumps(_entries(task_dir)), "EVAL_DIR": str(task_dir), "HARNESS_DIR": str(harness),
           "HARNESS_REQUIREMENTS": str(_lock(tmp_path))}
    calls: list[dict[str, Any]] = []
    hub = types.ModuleType("huggingface_hub")
    hub.hf_hub_download = _hub({**FILES, "main/train-00000-of-00001.parquet": b"other"}, calls)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "huggingface_hub", hub)
    # The harness staged already (its marker), so the run is about the task files.
    harness.mkdir()
    (harness / stage_eval.MARKER).write_text("staged\n")
    assert stage_eval.main(env) == 1
    assert not (task_dir / stage_eval.MARKER).exists()
    hub.hf_hub_download = _hub(FILES, calls)  # type: ignore[attr-defined]
    assert stage_eval.main(env) == 0
    assert (task_dir / stage_eval.MARKER).is_file()
    calls.clear()
    assert stage_eval.main(env) == 0 and calls == []  # staged: nothing fetched
    assert stage_eval.main({"EVAL_DIR": str(task_dir)}) == 2
