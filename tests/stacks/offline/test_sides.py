"""Which renders a diff's two sides cost (stacks/offline/sides.py): a side with the code and stack files of
another renders once for both, and each caller gets its own copy."""

from __future__ import annotations

from pathlib import Path

import pytest

from stacks.offline import render, sides


class _Result:
    def __init__(self, stack_file: Path) -> None:
        self.resources = [{"type": "t", "name": stack_file.parent.name, "inputs": {"list": [1, 2]}}]


@pytest.fixture
def renders(monkeypatch) -> list[Path]:
    """Every in-process render of the test, with the sides' code taken as the running code."""
    done: list[Path] = []

    def render_stack(stack_file: Path) -> _Result:
        done.append(stack_file)
        return _Result(stack_file)

    monkeypatch.setattr(render, "render_stack", render_stack)
    monkeypatch.setattr(sides, "_renders", {})
    return done


def _side(directory: Path, stack_text: str, code: str = "print('program')\n") -> sides.Side:
    directory.mkdir()
    (directory / "__main__.py").write_text(code)
    (directory / "Pulumi.prod.yaml").write_text(stack_text)
    return sides.Side(directory, directory.name, in_git=False)


def _running(monkeypatch, side: sides.Side) -> None:
    code, _ = sides._digests(side.directory, in_git=False)
    monkeypatch.setattr(sides, "_running_code", lambda: code)


def test_two_sides_with_the_same_code_and_stack_files_render_once_each_with_its_own_copy(
        renders, monkeypatch, tmp_path):
    base = _side(tmp_path / "base", "config: {}\n")
    working = _side(tmp_path / "working", "config: {}\n")
    _running(monkeypatch, working)
    (base_resources, base_errors), (working_resources, working_errors) = sides.render_sides(
        [base, working], "Pulumi.prod.yaml", tmp_path / "scratch")
    assert renders == [tmp_path / "base" / "Pulumi.prod.yaml"]
    assert base_errors == working_errors == []
    assert working_resources == base_resources == [{"type": "t", "name": "base", "inputs": {"list": [1, 2]}}]
    working_resources[0]["inputs"]["list"].append(3)
    assert base_resources[0]["inputs"]["list"] == [1, 2]


def test_a_side_whose_stack_file_changed_renders_again(renders, monkeypatch, tmp_path):
    base = _side(tmp_path / "base", "config: {}\n")
    working = _side(tmp_path / "working", "config: {a: 1}\n")
    _running(monkeypatch, working)
    sides.render_sides([base, working], "Pulumi.prod.yaml", tmp_path / "scratch")
    assert renders == [tmp_path / "base" / "Pulumi.prod.yaml", tmp_path / "working" / "Pulumi.prod.yaml"]


def test_a_side_seen_by_an_earlier_diff_is_not_rendered_again(renders, monkeypatch, tmp_path):
    base = _side(tmp_path / "base", "config: {}\n")
    working = _side(tmp_path / "working", "config: {a: 1}\n")
    _running(monkeypatch, working)
    sides.render_sides([base, working], "Pulumi.prod.yaml", tmp_path / "first")
    again = sides.render_sides([None, working], "Pulumi.prod.yaml", tmp_path / "second")
    assert renders == [tmp_path / "base" / "Pulumi.prod.yaml", tmp_path / "working" / "Pulumi.prod.yaml"]
    assert again == [([], []), ([{"type": "t", "name": "working", "inputs": {"list": [1, 2]}}], [])]


def test_when_a_side_fails_its_twin_renders_itself_and_reports_under_its_own_label(monkeypatch, tmp_path):
    tried: list[Path] = []

    def broken(stack_file: Path) -> _Result:
        tried.append(stack_file)
        raise RuntimeError("the program broke")

    monkeypatch.setattr(render, "render_stack", broken)
    monkeypatch.setattr(sides, "_renders", {})
    base = _side(tmp_path / "base", "config: {}\n")
    working = _side(tmp_path / "working", "config: {}\n")
    _running(monkeypatch, working)
    (_, base_errors), (working_resources, working_errors) = sides.render_sides(
        [base, working], "Pulumi.prod.yaml", tmp_path / "scratch")
    assert base_errors[0] == "diff: base does not render:"
    assert base_errors[-1] == "  RuntimeError: the program broke"
    assert working_resources == [] and working_errors[0] == "diff: working does not render:"
    assert working_errors[-1] == "  RuntimeError: the program broke"
    assert tried == [tmp_path / "base" / "Pulumi.prod.yaml", tmp_path / "working" / "Pulumi.prod.yaml"]
