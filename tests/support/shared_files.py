"""Files shared through a run's temporary root by the xdist workers and the processes they start
(tests/support/shared_renders.py, tests/support/waiting_runs.py). Standard library only: the
waiting-runs process imports it before anything of the project."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def locked(lock_file: Path) -> Iterator[None]:
    """Hold an exclusive lock on `lock_file` (created if missing): a second process asking waits."""
    with open(lock_file, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        yield


def write_whole(path: Path, data: bytes) -> None:
    """Write `path` through a temporary file renamed into place: a reader sees all of it or nothing."""
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
    partial.write_bytes(data)
    partial.replace(path)
