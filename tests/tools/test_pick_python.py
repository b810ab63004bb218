"""The Makefile's interpreter picker (tools/pick_python.py): which python3 the virtualenvs are created
with when PYTHON is not given."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

from tools import pick_python
from tools.pick_python import Interpreter

PROJECT_DIR = Path(__file__).resolve().parents[2]
MAKE = shutil.which("make")


def _executable(path: Path, body: str = "#!/bin/sh\nexit 0\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(body)
    path.chmod(0o755)
    return path


def _asker(answers: dict[Path, Interpreter | None], asked: list[Path]):
    def ask(candidate: Path) -> Interpreter | None:
        asked.append(candidate)
        return answers[candidate]
    return ask


def _interpreter(executable: Path, version: tuple[int, int, int] = (3, 11, 2), *, interposed: bool | None = False,
                 debug: bool = False, venv: bool = True) -> Interpreter:
    return Interpreter(str(executable), version, venv, debug, interposed)


SLOW = (3, 11, 7)


def test_candidates_are_python3_and_python3_minor_in_path_order_each_binary_once(tmp_path):
    first, second, third = tmp_path / "first", tmp_path / "second", tmp_path / "third"
    for name in ("python3.12", "python3", "python3.9", "python3.11"):
        _executable(first / name)
    _executable(second / "python3-config")  # not an interpreter
    (second / "python3").write_text("")  # not executable
    (second / "python3.11").mkdir()  # a directory
    binary = _executable(third / "python3.11")
    (third / "python3").symlink_to(binary)  # the same binary twice: asked once
    path = os.pathsep.join([str(first), "", str(tmp_path / "missing"), str(second), str(third)])
    assert pick_python.candidates(path, 11) == [first / "python3", first / "python3.11", third / "python3"]


def test_an_interposed_python3_gives_way_to_the_first_fast_build_of_its_minor_and_the_search_ends(tmp_path):
    pyenv, debug, newer = tmp_path / "pyenv" / "python3", tmp_path / "debug" / "python3", tmp_path / "new" / "python3"
    no_venv, unknown = tmp_path / "novenv" / "python3", tmp_path / "unknown" / "python3"
    system, later = tmp_path / "usr" / "python3.11", tmp_path / "later" / "python3"
    answers = {
        debug: _interpreter(debug, debug=True), newer: _interpreter(newer, (3, 12, 1)),
        no_venv: _interpreter(no_venv, venv=False), unknown: _interpreter(unknown, interposed=None),
        system: _interpreter(system), later: _interpreter(later),
    }
    asked: list[Path] = []
    reference = _interpreter(pyenv, SLOW, interposed=True)
    chosen = pick_python.choose(reference, [pyenv, debug, newer, no_venv, unknown, system, later],
                                _asker(answers, asked))
    assert chosen == _interpreter(system)
    # The reference itself is not asked again, and nothing after the winner is asked.
    assert asked == [debug, newer, no_venv, unknown, system]


@pytest.mark.parametrize("reference", [
    _interpreter(Path("/usr/bin/python3")),  # static or optimised
    _interpreter(Path("/usr/bin/python3"), interposed=None),  # linkage unknown (no /proc)
    _interpreter(Path("/opt/python3"), (3, 10, 13), interposed=True),  # too old: the bootstrap says so
    None,  # python3 did not answer
])
def test_python3_is_kept_and_nothing_is_asked_unless_it_is_interposed(tmp_path, reference):
    other = _executable(tmp_path / "bin" / "python3")
    asked: list[Path] = []
    assert pick_python.choose(reference, [other], _asker({other: _interpreter(other)}, asked)) is None
    assert asked == []


def test_an_interposed_python3_is_kept_when_nothing_faster_of_its_minor_is_on_path(tmp_path):
    pyenv, newer = tmp_path / "pyenv" / "python3", tmp_path / "new" / "python3"
    reference = _interpreter(pyenv, SLOW, interposed=True)
    assert pick_python.choose(reference, [newer], _asker({newer: _interpreter(newer, (3, 13, 0))}, [])) is None


def test_a_path_make_would_reparse_is_never_chosen(tmp_path):
    spaced, plain = tmp_path / "sp ace" / "python3", tmp_path / "plain" / "python3"
    chosen = pick_python.choose(_interpreter(tmp_path / "pyenv" / "python3", SLOW, interposed=True), [spaced, plain],
                                _asker({spaced: _interpreter(spaced), plain: _interpreter(plain)}, []))
    assert chosen == _interpreter(plain)


def test_a_wrapper_is_named_by_the_interpreter_it_runs(tmp_path):
    # A script (a pyenv shim, a wrapper) that runs a fast build: the build's own path is printed.
    shim, real = tmp_path / "shims" / "python3", tmp_path / "usr" / "python3.11"
    chosen = pick_python.choose(_interpreter(tmp_path / "pyenv" / "python3", SLOW, interposed=True), [shim],
                                _asker({shim: _interpreter(real)}, []))
    assert chosen == _interpreter(real)


def test_a_probe_without_linkage_answers_unknown(tmp_path):
    candidate = _executable(tmp_path / "python3", """#!/bin/sh
echo '{"executable": "/x/python3", "version": [3, 11, 9], "venv": true, "debug": false, "interposed": null}'
""")
    assert pick_python.probe(candidate) == Interpreter("/x/python3", (3, 11, 9), True, False, None)


def test_main_prints_python3_when_it_is_kept_and_says_nothing(tmp_path, capsys):
    system = _executable(tmp_path / "usr" / "python3")
    answers = {system: _interpreter(system)}
    assert pick_python.main(str(system.parent), _asker(answers, []), running=system) == 0
    assert capsys.readouterr() == ("python3\n", "")
    assert pick_python.main(str(system.parent), lambda _: None, running=system) == 0
    assert capsys.readouterr() == ("python3\n", "")


def test_main_prints_the_faster_build_and_says_instead_of_what_and_why(tmp_path, capsys):
    pyenv, system = _executable(tmp_path / "pyenv" / "python3"), _executable(tmp_path / "usr" / "python3")
    answers = {pyenv: _interpreter(pyenv, SLOW, interposed=True), system: _interpreter(system)}
    path = os.pathsep.join([str(pyenv.parent), str(system.parent)])
    assert pick_python.main(path, _asker(answers, []), running=pyenv) == 0
    assert capsys.readouterr() == (f"{system}\n", (
        f"==> virtualenv interpreter: {system} (3.11.2, static or optimised; an older patch release) instead of "
        f"python3, {pyenv} (3.11.7, shared libpython without --enable-optimizations), whose calls "
        "between its own functions go through the PLT: slower (tools/pick_python.py); PYTHON=python3 keeps python3\n"))


def test_the_probe_reads_this_interpreter_as_it_is():
    found = pick_python.probe(Path(sys.executable))
    assert found is not None
    assert found.version == tuple(sys.version_info[:3])
    assert found.venv is True  # this suite runs in a virtualenv that its interpreter created
    if os.path.exists("/proc/self/maps"):
        with open("/proc/self/maps") as maps:
            shared = any("libpython" in line for line in maps)
        flags = " ".join(str(sysconfig.get_config_var(k) or "")
                         for k in ("CONFIG_ARGS", "PY_CFLAGS_NODIST", "PY_LDFLAGS_NODIST"))
        optimized = "--enable-optimizations" in flags or "-fno-semantic-interposition" in flags
        assert found.interposed is (shared and not optimized)
    else:
        assert found.interposed is None


def test_the_probe_runs_isolated_with_no_stdin_and_answers_for_the_candidate(tmp_path):
    argv = tmp_path / "argv"
    stdin = tmp_path / "stdin"
    # A candidate that records how it was run and what stdin gave it, then answers like an interpreter.
    candidate = _executable(tmp_path / "python3", f"""#!/bin/sh
printf '%s\\n' "$1" "$2" > {argv}
cat > {stdin}
echo '{{"executable": "/x/python3", "version": [3, 11, 9], "venv": true, "debug": false, "interposed": false}}'
""")
    assert pick_python.probe(candidate) == Interpreter("/x/python3", (3, 11, 9), True, False, False)
    assert argv.read_text() == "-I\n-c\n"
    assert stdin.read_text() == ""


@pytest.mark.parametrize("body", [
    "#!/bin/sh\necho 'pyenv: python3.12: command not found' >&2\nexit 127\n",  # a shim of an inactive version
    "#!/bin/sh\necho not json\n",
    "#!/bin/sh\necho '{\"executable\": \"/x\"}'\n",  # fields missing
    "#!/bin/sh\n",  # no output at all
])
def test_a_candidate_that_does_not_answer_is_none(tmp_path, body):
    assert pick_python.probe(_executable(tmp_path / "python3", body)) is None


def test_a_candidate_that_hangs_is_killed_with_its_children_after_the_timeout(tmp_path, monkeypatch):
    monkeypatch.setattr(pick_python, "PROBE_TIMEOUT_SECONDS", 1.5)
    pid_file = tmp_path / "child"
    # No exec: the sleep is the shell's child, and must go with it.
    candidate = _executable(tmp_path / "python3", f"#!/bin/sh\nsleep 60 > /dev/null &\necho $! > {pid_file}\nwait\n")
    assert pick_python.probe(candidate) is None
    child = Path(f"/proc/{int(pid_file.read_text())}/stat")
    deadline = time.monotonic() + 10
    while _alive(child):
        assert time.monotonic() < deadline, "the candidate's child outlived the timeout"
        time.sleep(0.05)


def _alive(stat: Path) -> bool:
    """Killed means gone, or a zombie until its new parent (init) reaps it; a live sleep is "S"."""
    try:
        return stat.read_text().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _make(tmp_path: Path, *args: str, env_python: str | None = None,
          stamped: bool = False) -> tuple[list[str], list[str]]:
    """`make -n <args>` in a copy of the Makefile, with a `python3` on PATH that logs each run and
    answers the picker's run with /picked/py#thon: (recipe lines, logged runs)."""
    assert MAKE is not None, "the bootstrap under test is a Makefile: make must be installed"
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(PROJECT_DIR / "Makefile", work / "Makefile")
    for name in ("requirements.txt", "requirements-dev.txt", "requirements-scan.lock"):
        (work / name).write_text("")
    if stamped:
        (work / ".venv").mkdir()
        (work / ".venv" / ".installed").write_text("")
    log = tmp_path / "runs.log"
    bin_dir = tmp_path / "bin"
    # A '#' in the answer: make must take the path as it is, not re-parse it (a comment would cut it).
    _executable(bin_dir / "python3", f'#!/bin/sh\necho "$*" >> {log}\necho "/picked/py#thon"\n')
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHON", "MAKEFLAGS", "MAKELEVEL")}
    env["PATH"] = os.pathsep.join([str(bin_dir), str(Path(MAKE).parent), "/usr/bin", "/bin"])
    if env_python is not None:
        env["PYTHON"] = env_python
    made = subprocess.run([MAKE, "-n", "--no-print-directory", *args], cwd=work, env=env, capture_output=True,
                          text=True, check=True)
    runs = log.read_text().splitlines() if log.exists() else []
    return made.stdout.splitlines(), runs


def test_the_makefile_asks_the_picker_once_and_creates_the_virtualenv_with_its_answer(tmp_path):
    lines, runs = _make(tmp_path, "-W", "requirements.txt", ".venv/.installed")
    assert runs == ["-I tools/pick_python.py"]
    assert [line for line in lines if "/picked/" in line] == [
        "/picked/py#thon -c 'import sys; sys.exit(\"Python 3.11+ is required, found \" + sys.version.split()[0]) "
        "if sys.version_info < (3, 11) else None'",
        'echo "==> [1/2] creating .venv with $(/picked/py#thon --version) (/picked/py#thon)"',
        "/picked/py#thon -m venv .venv",
    ]


@pytest.mark.parametrize("target", ["test", "help", "render"])
def test_a_target_that_creates_no_virtualenv_never_runs_the_picker(tmp_path, target):
    _, runs = _make(tmp_path, target, stamped=True)
    assert runs == []


def test_the_scanners_virtualenv_keeps_python3_and_never_runs_the_picker(tmp_path):
    # Its hashed lock pins packages that may need a newer patch release than the picked build.
    lines, runs = _make(tmp_path, "-W", "requirements-scan.lock", ".venv-scan/.installed", stamped=True)
    assert runs == []
    assert "python3 -m venv .venv-scan" in lines


@pytest.mark.parametrize("how", ["command line", "environment"])
def test_a_given_python_is_used_and_the_picker_never_runs(tmp_path, how):
    extra, env_python = (("PYTHON=/given/python",), None) if how == "command line" else ((), "/given/python")
    lines, runs = _make(tmp_path, "-W", "requirements.txt", ".venv/.installed", *extra, env_python=env_python)
    assert runs == []
    assert "/given/python -m venv .venv" in lines
