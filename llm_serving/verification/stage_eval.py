"""What the accuracy gate's staging Job runs: the task set's data files and the harness's wheels, put on the weights
volume once, as the weights are, so the eval Job reads everything from the volume and reaches nothing outside the
cluster.

The Job runs this file from its ConfigMap in the pinned Python image, with huggingface_hub installed from the
weights Job's hashed lock (llm_serving/serving/stage-requirements.txt). Environment:
- EVAL_FILES: a JSON list of `{dataset, revision, path, sha256, target}`, one per task file (`models[].eval`).
- EVAL_DIR: the task set's directory; its marker is written last.
- HARNESS_DIR: the wheels' directory (one per lock, shared by every task set); HARNESS_REQUIREMENTS: the hashed lock.

Each data file is fetched from its dataset repository at the pinned commit (`hf_hub_download`, repo_type dataset) into
a scratch directory, hashed, and moved into place only when its SHA-256 is the one the stack pins; a file with another
digest fails the Job, naming it, and no marker is written. A file already in place with the pinned digest is kept (a
retried Job resumes). The wheels are downloaded by pip with `--require-hashes`, so a wheel whose digest is not the
lock's fails the download (pip's hash-checking mode: pip.pypa.io/en/stable/topics/secure-installs/); they land in a
scratch directory renamed into place whole, so the eval Job never sees half a harness.

Exit 0 staged (or found staged), 1 a refused or failed download, 2 bad input.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

MARKER = ".llm-serving-complete"  # the weights' marker name (llm_serving/serving/engine.py COMPLETE_MARKER)
_CHUNK = 1 << 20


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        while chunk := stream.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def pip_download_command(requirements: Path, into: Path) -> list[str]:
    """pip in hash-checking mode, wheels only, no dependency resolution beyond the lock (the lock is the closure):
    the same interpreter and platform as the eval Job, which runs the same image."""
    return [sys.executable, "-m", "pip", "download", "--quiet", "--no-cache-dir", "--disable-pip-version-check",
            "--require-hashes", "--only-binary=:all:", "--no-deps", "--dest", str(into), "-r", str(requirements)]


def _mark(directory: Path) -> None:
    (directory / MARKER).write_text(datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ") + "\n")


def stage_files(files: list[dict[str, Any]], scratch: Path, download: Any) -> list[str]:
    """Each file into place when its digest is the pinned one; the problems, one line per refused file."""
    problems: list[str] = []
    for entry in files:
        target = Path(entry["target"])
        name = f"{entry['dataset']}@{entry['revision'][:12]}:{entry['path']}"
        if target.is_file() and sha256_of(target) == entry["sha256"]:
            print(f"kept {name} (already staged with the pinned sha256)", file=sys.stderr)
            continue
        fetched = Path(download(repo_id=entry["dataset"], filename=entry["path"], repo_type="dataset",
                                revision=entry["revision"], local_dir=str(scratch)))
        found = sha256_of(fetched)
        if found != entry["sha256"]:
            fetched.unlink()
            problems.append(f"refused {name}: sha256 {found}, the stack pins {entry['sha256']}")
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(fetched), str(target))
        print(f"staged {name} -> {target}", file=sys.stderr)
    return problems


def stage_harness(requirements: Path, harness: Path, run: Any = subprocess.run) -> str | None:
    """The lock's wheels into `harness` (a scratch sibling renamed into place); a problem line, or None."""
    if (harness / MARKER).is_file():
        print(f"kept the harness in {harness}", file=sys.stderr)
        return None
    harness.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{harness.name}-", dir=harness.parent))
    try:
        done = run(pip_download_command(requirements, scratch), check=False)
        if done.returncode != 0:
            return f"pip could not download the harness's locked wheels (exit {done.returncode}); see its lines above"
        _mark(scratch)
        # mkdtemp makes the directory 0700 (Python docs, tempfile.mkdtemp), and the rename keeps it: the eval Job's
        # pod reads it as another user wherever the volume does not map every client to one (FSx, a StorageClass).
        scratch.chmod(0o755)
        if harness.exists():
            shutil.rmtree(harness)  # a harness without its marker: an earlier Job stopped mid-way
        scratch.rename(harness)
        print(f"staged the harness in {harness}", file=sys.stderr)
        return None
    finally:
        if scratch.exists():
            shutil.rmtree(scratch, ignore_errors=True)


def main(environ: dict[str, str] | None = None) -> int:
    env = dict(os.environ if environ is None else environ)
    try:
        files = json.loads(env["EVAL_FILES"])
        eval_dir, harness = Path(env["EVAL_DIR"]), Path(env["HARNESS_DIR"])
        requirements = Path(env["HARNESS_REQUIREMENTS"])
    except (KeyError, json.JSONDecodeError) as error:
        print(f"stage_eval: bad environment ({error}); needs EVAL_FILES (JSON), EVAL_DIR, HARNESS_DIR and "
              "HARNESS_REQUIREMENTS", file=sys.stderr)
        return 2
    if (eval_dir / MARKER).is_file() and (harness / MARKER).is_file():
        print(f"the task set in {eval_dir} and the harness in {harness} are staged", file=sys.stderr)
        return 0
    from huggingface_hub import hf_hub_download  # the Job installs it from the weights Job's hashed lock

    eval_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".download-", dir=eval_dir) as scratch:
        problems = stage_files(files, Path(scratch), hf_hub_download)
    harness_problem = stage_harness(requirements, harness)
    problems += [harness_problem] if harness_problem else []
    for line in problems:
        print(line, file=sys.stderr)
    if problems:
        print(f"{len(problems)} problems; no marker written", file=sys.stderr)
        return 1
    _mark(eval_dir)
    print(f"staged {len(files)} task files in {eval_dir}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
