"""Session fixtures: each stack file rendered once per test process, and a scratch project directory.

The stack tier asserts through whole renders (golden snapshots, schemas, CRDs, chart values, engine flags);
`render_file` renders each stack file the first time a test of the process asks for it. Tests of one
component's behaviour use the component tier instead (tests/support/components.py), which renders only that
component.
"""

from __future__ import annotations

import functools
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:  # imported where used: the xdist controller loads this file too and runs no test
    from stacks.offline.render import RenderResult

PROJECT_DIR = Path(__file__).resolve().parent.parent  # stacks.config.files.PROJECT_DIR
STACK_FILES = sorted(PROJECT_DIR.glob("Pulumi.*.yaml"))
STACK_NAMES = [p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in STACK_FILES]


@functools.cache
def _render(path: Path) -> RenderResult:
    from stacks.offline import render

    # session_renders may stand in for render_stack while this runs: the render itself is always a fresh one.
    return getattr(render.render_stack, "fresh", render.render_stack)(path)


def render_file(path: Path) -> RenderResult:
    """A stack file's render, once per test process (a render takes about a second)."""
    return _render(path.resolve())


@pytest.fixture(scope="session")
def rendered() -> dict[str, RenderResult]:
    return {name: render_file(path) for name, path in zip(STACK_NAMES, STACK_FILES, strict=True)}


# Inputs the docs' commands name by a path inside the project (plan --model-config's snapshot).
DOC_INPUTS = PROJECT_DIR / "tests" / "fixtures" / "hf"


@pytest.fixture
def session_renders(monkeypatch: pytest.MonkeyPatch) -> None:
    """`render.render_stack` answers from the session's renders (`render_file`) for a stack file whose bytes, and
    whose extends chain's, are a committed file's: a test whose subject is a command that renders (`render`, the
    docs' `make render`) then pays no render of its own. Any other file, or another cluster version, renders."""
    from stacks.offline import render

    fresh = render.render_stack

    def committed(path: Path) -> Path | None:
        for candidate in (PROJECT_DIR / path.name, PROJECT_DIR / "examples" / path.name):
            if candidate.is_file() and candidate.read_bytes() == path.read_bytes():
                return candidate
        return None

    def answer(stack_file: Path, cluster_version: str | None = None) -> RenderResult:
        path = Path(stack_file).resolve()
        same = committed(path) if path.is_file() else None
        # A copy's extends chain is its directory's files: each must be the committed one too.
        siblings = all(committed(p) is not None for p in path.parent.glob("Pulumi.*.yaml")) if same else False
        if same is not None and siblings and cluster_version is None:
            return render_file(same)
        return fresh(stack_file, cluster_version)

    answer.fresh = fresh  # type: ignore[attr-defined] - what _render calls
    monkeypatch.setattr(render, "render_stack", answer)


def _copy_project(directory: Path) -> Path:
    for path in (*STACK_FILES, PROJECT_DIR / "Pulumi.yaml"):
        (directory / path.name).write_text(path.read_text())
    shutil.copytree(DOC_INPUTS, directory / DOC_INPUTS.relative_to(PROJECT_DIR))
    return directory


@pytest.fixture
def stack_dir(tmp_path: Path) -> Path:
    """A scratch project directory holding copies of the repo's project and stack files."""
    return _copy_project(tmp_path)


@pytest.fixture(scope="session")
def variants_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One project directory for the session's variants of the committed stacks (tests/support/stack_variants.py):
    a variant written by two modules is one path, so it is rendered once per process."""
    return _copy_project(tmp_path_factory.mktemp("variants"))


# Two models and a model's LoRA adapters behind one host (edge.routing byModel): the routing, LoRA and compile-cache
# tests assert on this one render.
MULTI_MODEL_EXAMPLE = PROJECT_DIR / "examples" / "Pulumi.multi-model.yaml"


@pytest.fixture(scope="session")
def multi_model() -> RenderResult:
    """examples/Pulumi.multi-model.yaml's render: llama-70b, and llama-8b with two adapters and an alias over them, on
    one base URL."""
    return render_file(MULTI_MODEL_EXAMPLE)


@pytest.fixture(scope="session")
def dev_awake(variants_dir: Path) -> RenderResult:
    """dev with its model at one replica all day: a model routed through its Service, no picker."""
    from tests.support import stack_variants

    return render_file(stack_variants.dev_awake(variants_dir))

