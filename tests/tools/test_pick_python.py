"""The Makefile's interpreter picker (tools/pick_python.py): which python3 on PATH the virtualenvs are
created with when PYTHON is not given."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tools import pick_python
from tools.pick_python import Interpreter

PROJECT_DIR = Path(__file__).resolve().parents[2]


def _executable(path: Path, body: str = "#!/bin/sh\nexit 0\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(body)
    path.chmod(0o755)
    return path


def _asker(answers: dict[str, Interpreter | None], asked: list[str]):
    def ask(candidate: Path) -> Interpreter | None:
        asked.append(str(candidate))
        return answers[str(candidate)]
    return ask


def _interpreter(executable: Path, minor: int = 11, *, shared: bool | None = False, debug: bool = False,
                 venv: bool = True) -> Interpreter:
    return Interpreter(str(executable), (3, minor, 2), venv, debug, shared)


def test_candidates_are_every_python3_file_in_path_order_python3_first_then_by_minor(tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    for name in ("python3.12", "python3", "python3.9", "python3.11"):
        _executable(first / name)
    _executable(second / "python3")
    _executable(second / "python3-config")  # not an interpreter
    _executable(second / "python3.11m")  # nor this
    (second / "python3.13").write_text("")  # not executable
    (second / "python3.10").mkdir()  # a directory
    path = os.pathsep.join([str(first), "", str(tmp_path / "missing"), str(second)])
    assert pick_python.candidates(path) == [
        first / "python3", first / "python3.9", first / "python3.11", first / "python3.12", second / "python3"]


def test_a_static_build_of_the_same_minor_wins_over_a_shared_first_one_and_ends_the_search(tmp_path):
    pyenv, system = tmp_path / "pyenv" / "python3", tmp_path / "usr" / "python3"
    later = tmp_path / "later" / "python3"
    for path in (pyenv, system, later):
        _executable(path)
    asked: list[str] = []
    chosen, first = pick_python.choose([pyenv, system, later], _asker({
        str(pyenv): _interpreter(pyenv, shared=True), str(system): _interpreter(system),
        str(later): _interpreter(later)}, asked))
    assert (chosen.executable, first.executable) == (str(system), str(pyenv))
    assert asked == [str(pyenv), str(system)]


def test_another_minor_is_never_chosen_nor_asked_once_the_first_one_fixed_it(tmp_path):
    pyenv, newer, other = tmp_path / "a" / "python3", tmp_path / "b" / "python3.12", tmp_path / "c" / "python3"
    asked: list[str] = []
    chosen, first = pick_python.choose([pyenv, newer, other], _asker({
        str(pyenv): _interpreter(pyenv, shared=True), str(newer): _interpreter(newer, 12),
        str(other): _interpreter(other, 13)}, asked))
    # python3.12 is not asked (its name says another minor); the python3 that answers 3.13 is not chosen.
    assert (chosen.executable, first.executable) == (str(pyenv), str(pyenv))
    assert asked == [str(pyenv), str(other)]


def test_a_debug_build_an_unknown_linkage_and_one_without_venv_are_passed_over(tmp_path):
    first, debug, unknown = tmp_path / "a" / "python3", tmp_path / "b" / "python3", tmp_path / "c" / "python3"
    no_venv, fast = tmp_path / "d" / "python3", tmp_path / "e" / "python3.11"
    chosen, found = pick_python.choose([first, debug, unknown, no_venv, fast], _asker({
        str(first): _interpreter(first, shared=True), str(debug): _interpreter(debug, debug=True),
        str(unknown): _interpreter(unknown, shared=None), str(no_venv): _interpreter(no_venv, venv=False),
        str(fast): _interpreter(fast)}, []))
    assert (chosen.executable, found.executable) == (str(fast), str(first))


def test_a_static_first_one_is_chosen_without_asking_further(tmp_path):
    first, other = tmp_path / "a" / "python3", tmp_path / "b" / "python3"
    asked: list[str] = []
    chosen, found = pick_python.choose([first, other], _asker({str(first): _interpreter(first)}, asked))
    assert chosen is found and chosen.executable == str(first)
    assert asked == [str(first)]


def test_one_binary_under_two_names_is_one_candidate(tmp_path):
    binary = _executable(tmp_path / "bin" / "python3.11")
    alias = tmp_path / "bin" / "python3"
    alias.symlink_to(binary)
    asked: list[str] = []
    # The shared build answers under both names; the second answer is the same binary, not a second choice.
    answers = {str(alias): _interpreter(alias, shared=True), str(binary): _interpreter(binary, shared=True)}
    chosen, found = pick_python.choose([alias, binary], _asker(answers, asked))
    assert (chosen.executable, found.executable) == (str(alias), str(alias))
    assert asked == [str(alias), str(binary)]


def test_nothing_usable_is_none_and_main_falls_back_to_python3(tmp_path, capsys):
    broken = _executable(tmp_path / "bin" / "python3")
    assert pick_python.choose([broken], lambda _: None) == (None, None)
    assert pick_python.main(str(tmp_path / "bin"), lambda _: None) == 0
    out, err = capsys.readouterr()
    assert out == "python3\n"
    assert err == "python: no python3 on PATH can create a virtualenv; trying python3\n"


def test_main_prints_the_choice_and_says_why_it_is_not_the_first(tmp_path, capsys):
    pyenv, system = _executable(tmp_path / "pyenv" / "python3"), _executable(tmp_path / "usr" / "python3")
    answers = {str(pyenv): _interpreter(pyenv, shared=True), str(system): _interpreter(system)}
    assert pick_python.main(os.pathsep.join([str(pyenv.parent), str(system.parent)]), _asker(answers, [])) == 0
    out, err = capsys.readouterr()
    assert out == f"{system}\n"
    assert err == (f"python: {system} (3.11.2, static), not the first on PATH, {pyenv} (3.11.2, shared libpython): "
                   "a shared libpython runs this project's renders and tests about a fifth slower "
                   "(tools/pick_python.py); PYTHON=<interpreter> chooses another\n")
    assert pick_python.main(str(system.parent), _asker(answers, [])) == 0
    assert capsys.readouterr() == (f"{system}\n", f"python: {system} (3.11.2, static)\n")


def test_the_probe_reads_this_interpreter_as_it_is():
    found = pick_python.probe(Path(sys.executable))
    assert found is not None
    assert found.version == tuple(sys.version_info[:3])
    assert found.venv is True  # this suite runs in a virtualenv that its interpreter created
    with open("/proc/self/maps") as maps:
        assert found.shared is any("libpython" in line for line in maps)


@pytest.mark.parametrize("body", [
    "#!/bin/sh\necho 'pyenv: python3.12: command not found' >&2\nexit 127\n",  # a shim of an inactive version
    "#!/bin/sh\necho not json\n",
    "#!/bin/sh\necho '{\"executable\": \"/x\"}'\n",  # fields missing
    "#!/bin/sh\n",  # no output at all
])
def test_a_candidate_that_does_not_answer_is_none(tmp_path, body):
    assert pick_python.probe(_executable(tmp_path / "python3", body)) is None


def test_a_candidate_that_hangs_is_none_after_the_timeout(tmp_path, monkeypatch):
    monkeypatch.setattr(pick_python, "PROBE_TIMEOUT_SECONDS", 0.2)
    assert pick_python.probe(_executable(tmp_path / "python3", "#!/bin/sh\nexec sleep 30\n")) is None


def _make_bootstrap(tmp_path: Path, *extra: str, env_python: str | None = None) -> tuple[list[str], list[str]]:
    """`make -n` of the virtualenv bootstrap in a copy of the Makefile, with a `python3` on PATH that
    logs each run and answers the picker's run with /picked/python: (recipe lines, logged runs)."""
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(PROJECT_DIR / "Makefile", work / "Makefile")
    for name in ("requirements.txt", "requirements-dev.txt"):
        (work / name).write_text("")
    log = tmp_path / "runs.log"
    bin_dir = tmp_path / "bin"
    _executable(bin_dir / "python3", f'#!/bin/sh\necho "$*" >> {log}\necho /picked/python\n')
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHON", "MAKEFLAGS", "MAKELEVEL")}
    env["PATH"] = os.pathsep.join([str(bin_dir), "/usr/bin", "/bin"])
    if env_python is not None:
        env["PYTHON"] = env_python
    made = subprocess.run(["make", "-n", "--no-print-directory", "-W", "requirements.txt", ".venv/.installed", *extra],
                          cwd=work, env=env, capture_output=True, text=True, check=True)
    runs = log.read_text().splitlines() if log.exists() else []
    return made.stdout.splitlines(), runs


def test_the_makefile_asks_the_picker_once_and_creates_the_virtualenv_with_its_answer(tmp_path):
    lines, runs = _make_bootstrap(tmp_path)
    assert runs == ["tools/pick_python.py"]
    assert [line for line in lines if "python" in line and "pip install" not in line] == [
        "/picked/python -c 'import sys; sys.exit(\"Python 3.11+ is required, found \" + sys.version.split()[0]) "
        "if sys.version_info < (3, 11) else None'",
        'echo "==> [1/2] creating .venv with $(/picked/python --version) (/picked/python)"',
        "/picked/python -m venv .venv",
    ]


@pytest.mark.parametrize("how", ["command line", "environment"])
def test_a_given_python_is_used_and_the_picker_never_runs(tmp_path, how):
    extra, env_python = (("PYTHON=/given/python",), None) if how == "command line" else ((), "/given/python")
    lines, runs = _make_bootstrap(tmp_path, *extra, env_python=env_python)
    assert runs == []
    assert "/given/python -m venv .venv" in lines
