"""The renders xdist workers share: the same input loads the first render, any other input renders."""

from __future__ import annotations

from pathlib import Path

import pytest

from stacks.offline import render, sides
from tests.support import shared_renders


@pytest.fixture
def renders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Share through a scratch directory; the render is a stand-in that reads the stack file and
    the base it extends, as the program does, and names both contents in its one resource."""
    calls: list[Path] = []

    def render_stack(stack_file: Path) -> render.RenderResult:
        calls.append(stack_file)
        base = (stack_file.parent / "Pulumi.base.yaml").read_text()
        own = stack_file.read_text()
        return render.RenderResult(stack_file.stem, [{"type": "t", "name": f"{base}+{own}"}], [], {})

    monkeypatch.setattr(render, "render_stack", render_stack)
    monkeypatch.setattr(shared_renders, "_shared_dir", None)  # restored after the test
    shared_renders.share_in(tmp_path / "renders")
    return calls


def _project(directory: Path, base: str = "base", own: str = "own") -> Path:
    directory.mkdir()
    (directory / "Pulumi.base.yaml").write_text(base)
    (directory / "Pulumi.variant.yaml").write_text(own)
    return directory / "Pulumi.variant.yaml"


def test_the_same_variant_in_another_directory_loads_the_first_render(tmp_path, renders):
    first = shared_renders.render(_project(tmp_path / "a"))
    second = shared_renders.render(_project(tmp_path / "b"))
    assert renders == [tmp_path / "a" / "Pulumi.variant.yaml"]
    assert second == first
    assert second.resources == [{"type": "t", "name": "base+own"}]


def test_a_variant_extending_another_base_renders_again(tmp_path, renders):
    shared_renders.render(_project(tmp_path / "a"))
    second = shared_renders.render(_project(tmp_path / "b", base="other base"))
    assert len(renders) == 2
    assert second.resources == [{"type": "t", "name": "other base+own"}]


def test_another_stack_file_renders_again(tmp_path, renders):
    shared_renders.render(_project(tmp_path / "a"))
    second = shared_renders.render(_project(tmp_path / "b", own="changed"))
    assert len(renders) == 2
    assert second.resources == [{"type": "t", "name": "base+changed"}]


def test_a_change_to_the_code_renders_again(tmp_path, renders, monkeypatch):
    shared_renders.render(_project(tmp_path / "a"))
    monkeypatch.setattr(sides, "_running_code", lambda: "the digest of edited code")
    shared_renders.render(_project(tmp_path / "b"))
    assert len(renders) == 2


def test_a_render_that_names_its_directory_is_not_shared(tmp_path, renders, monkeypatch):
    def naming_its_directory(stack_file: Path) -> render.RenderResult:
        renders.append(stack_file)
        return render.RenderResult("variant", [{"type": "t", "name": str(stack_file.parent)}], [], {})

    monkeypatch.setattr(render, "render_stack", naming_its_directory)
    shared_renders.render(_project(tmp_path / "a"))
    second = shared_renders.render(_project(tmp_path / "b"))
    assert len(renders) == 2
    assert second.resources == [{"type": "t", "name": str(tmp_path / "b")}]


def test_without_a_shared_directory_every_call_renders(tmp_path, renders, monkeypatch):
    monkeypatch.setattr(shared_renders, "_shared_dir", None)
    stack_file = _project(tmp_path / "a")
    shared_renders.render(stack_file)
    shared_renders.render(stack_file)
    assert len(renders) == 2


def test_the_suites_project_directory_is_the_one_the_program_reads_its_stack_files_from():
    from stacks.config import files
    from tests import conftest

    assert conftest.PROJECT_DIR == files.PROJECT_DIR
    assert conftest.STACK_FILES == sorted(files.PROJECT_DIR.glob("Pulumi.*.yaml"))
