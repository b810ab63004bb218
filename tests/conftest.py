"""Shared fixtures: offline renders of stack files under Pulumi's mock runtime, cached per file.

A render costs 0.5-1 s of CPU, and every xdist worker that runs a test of a stack would render it
again. So `render_file` keeps each render for the process and, under xdist, also on disk in the
run's shared temporary root (`tests/support/shared_renders.py`): the first worker that needs a
stack renders it while holding that render's lock, the others wait for it and load its pickle.

After collection the heap (every module, every collected test) is frozen for the session, and the
first generation is collected every 10,000 allocations instead of 700: the collector otherwise kept
traversing those objects, about a sixth of the suite's CPU outside the renders (which do the same
for themselves, stacks/offline/render_overhead.py).

The project's modules are imported where they are used, not at the top: the xdist controller
loads this file too, runs no test, and would otherwise import the config schema and Pulumi (about
1 s of CPU while the workers start).
"""

from __future__ import annotations

import atexit
import gc
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from stacks.offline import render

# stacks.config.files.PROJECT_DIR, without importing the config schema (tests/support/test_shared_renders.py).
PROJECT_DIR = Path(__file__).resolve().parent.parent
STACK_FILES = sorted(PROJECT_DIR.glob("Pulumi.*.yaml"))
STACK_NAMES = [p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in STACK_FILES]

_cache: dict[Path, render.RenderResult] = {}


def render_file(path: Path) -> render.RenderResult:
    """Render a stack file once per session (a render takes about a second)."""
    from tests.support import shared_renders

    path = path.resolve()
    if path not in _cache:
        _cache[path] = shared_renders.render(path)
    return _cache[path]


def _exit_without_teardown() -> None:
    # An xdist worker's exit handler, registered when this file loads, so it runs after every handler
    # registered later (they run last first): the render hosts' close, pytest's temporary-directory
    # locks. It skips the two registered earlier, when pytest and execnet were imported: logging's
    # shutdown (a worker has no logging file handlers) and execnet's group cleanup (a worker opens no
    # gateways). By then the worker's results are with the controller (xdist sends them at session
    # finish); what is left is the interpreter's teardown of the session's heap: about 1.5 s of freeing
    # objects one by one that the controller waits for before it reports (as `python -m stacks` itself
    # skips it, stacks/__main__.py).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if os.environ.get("PYTEST_XDIST_WORKER"):
    atexit.register(_exit_without_teardown)


def pytest_collection_finish(session: pytest.Session) -> None:
    from stacks.offline import render_overhead

    gc.freeze()  # what collection built lives until the session ends
    gc.set_threshold(render_overhead.RENDER_GC_THRESHOLD, *gc.get_threshold()[1:])


@pytest.fixture(scope="session", autouse=True)
def _renders_shared_between_workers(tmp_path_factory: pytest.TempPathFactory) -> None:
    # Each xdist worker's basetemp is a directory of the run's root (xdist's documented way for
    # workers to share a session-scoped resource); without xdist one process has nothing to share.
    if os.environ.get("PYTEST_XDIST_WORKER"):
        from tests.support import shared_renders

        shared_renders.share_in(tmp_path_factory.getbasetemp().parent / "renders")


@pytest.fixture(scope="session", autouse=True)
def _one_render_host_for_the_run(tmp_path_factory: pytest.TempPathFactory) -> None:
    # Under xdist only: the workers' forked renders share one host's imports (tests/support/shared_render_host.py).
    if os.environ.get("PYTEST_XDIST_WORKER"):
        from stacks.offline import render_host
        from tests.support import shared_render_host

        render_host.default_host = shared_render_host.shared_default_host(
            render_host.default_host, tmp_path_factory.getbasetemp().parent / "render-host")


@pytest.fixture(scope="session", autouse=True)
def _waiting_runs_in_their_own_process(request: pytest.FixtureRequest,
                                       tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    # Under xdist only: one process runs the selected groups of server-bound runs while the workers run
    # other tests (tests/support/waiting_runs.py); in one process there is nothing to overlap them with.
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        yield
        return
    from tests.support import waiting_runs

    groups = waiting_runs.selected_groups(item.nodeid for item in request.session.items)
    with waiting_runs.started(tmp_path_factory.getbasetemp().parent / "waiting-runs", groups):
        yield


@pytest.fixture(scope="session")
def rendered() -> dict[str, render.RenderResult]:
    return {name: render_file(path) for name, path in zip(STACK_NAMES, STACK_FILES, strict=True)}


@pytest.fixture
def stack_dir(tmp_path: Path) -> Path:
    """A scratch project directory holding copies of the repo's project and stack files."""
    for path in (*STACK_FILES, PROJECT_DIR / "Pulumi.yaml"):
        (tmp_path / path.name).write_text(path.read_text())
    return tmp_path
