"""The interpreter `make` creates its virtualenvs with when PYTHON is not given: `python3`, unless it
is a build whose every internal call goes through a shared libpython and another build of the same
minor version on PATH is not.

Why: CPython built with `--enable-shared` runs the interpreter from libpython, and without
-fno-semantic-interposition every call from libpython to itself goes through the PLT and cannot be
inlined: up to 1.3x slower (bpo-38980, https://bugs.python.org/issue38980). CPython's configure adds
that flag only with `--enable-optimizations`. Debian's and Ubuntu's /usr/bin/python3 link the
interpreter statically instead. On the 2-core CI machine `python3` is pyenv's 3.11.7, built
`--enable-shared` without `--enable-optimizations`, and /usr/bin/python3.11 is Debian's static 3.11.2:
`make test` took 84 busy core-seconds and 45 s wall on the first, 68 and 37 s on the second (3
alternate runs each, 2026-12-02, docs/testing.md).

The rule, so that the choice is never a surprise of version:
- the reference is the interpreter running this script, the `python3` the Makefile runs it with;
  below 3.11, or not answering, the answer is `python3` and the bootstrap's version check says why
  (3.6 and older cannot parse this file: a SyntaxError comes first);
- the reference is kept unless it is "interposed": a shared libpython is mapped into it
  (/proc/self/maps) and it was built without `--enable-optimizations` or -fno-semantic-interposition;
- otherwise the candidates are every `python3` and `python3.<the reference's minor>` file in the PATH
  directories, in PATH order (empty entries skipped), each binary once; each is asked, in one short
  isolated run (`-I`), for its version, whether it can create a virtualenv (venv and ensurepip),
  whether it is a debug build and whether it is interposed. The first of the reference's minor
  version that can create a virtualenv, is no debug build and is not interposed wins, named by its
  own `sys.executable` (not a wrapper's or shim's path), when that is a path make can use verbatim;
- no such candidate: the reference, as before.

Prints `python3` (the reference) or the chosen interpreter's path on stdout; when it is not the
reference, one line on stderr saying which, instead of what, and why. Standard library only: it runs
before any virtualenv exists.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

REFERENCE = "python3"
MINIMUM = (3, 11)
PROBE_TIMEOUT_SECONDS = 10.0  # a pyenv shim starts bash and pyenv first; a healthy interpreter answers in 0.1 s
# What make can take as a command word verbatim: no space, quote, `$`, `#` or backslash to re-parse.
_PLAIN_PATH = re.compile(r"[A-Za-z0-9/._+-]+")
# Run by each candidate: what the choice needs, as one JSON line. Elsewhere than Linux (no
# /proc/self/maps) linkage is unknown and the reference is kept.
PROBE = """\
import importlib.util, json, sys, sysconfig
try:
    with open("/proc/self/maps") as maps:
        shared = any("libpython" in line for line in maps)
except OSError:
    shared = None
keys = ("CONFIG_ARGS", "PY_CFLAGS_NODIST", "PY_LDFLAGS_NODIST")
flags = " ".join(str(sysconfig.get_config_var(k) or "") for k in keys)
optimized = "--enable-optimizations" in flags or "-fno-semantic-interposition" in flags
print(json.dumps({
    "executable": sys.executable,
    "version": list(sys.version_info[:3]),
    "venv": all(importlib.util.find_spec(m) is not None for m in ("venv", "ensurepip")),
    "debug": bool(sysconfig.get_config_var("Py_DEBUG")),
    "interposed": None if shared is None else shared and not optimized,
}))
"""


@dataclass(frozen=True)
class Interpreter:
    """One candidate's answers to PROBE."""

    executable: str
    version: tuple[int, int, int]
    venv: bool
    debug: bool
    interposed: bool | None

    @property
    def fast(self) -> bool:
        return self.venv and not self.debug and self.interposed is False

    def describe(self, note: str = "") -> str:
        build = {True: "shared libpython without --enable-optimizations", False: "static or optimised",
                 None: "linkage unknown"}[self.interposed]
        return f"{self.executable} ({'.'.join(map(str, self.version))}, {build}{', debug' if self.debug else ''}{note})"


def candidates(path: str, minor: int) -> list[Path]:
    """Every python3 and python3.<minor> file in the PATH directories, in PATH order (python3 first
    within a directory), each binary once."""
    found: list[Path] = []
    seen: set[str] = set()
    for directory in path.split(os.pathsep):
        if not directory:
            continue
        for name in (REFERENCE, f"python3.{minor}"):
            candidate = Path(directory) / name
            if not (candidate.is_file() and os.access(candidate, os.X_OK)):
                continue
            binary = os.path.realpath(candidate)
            if binary not in seen:
                seen.add(binary)
                found.append(candidate)
    return found


def probe(candidate: Path) -> Interpreter | None:
    """The candidate's answers, or None when it does not answer (a pyenv shim of an inactive version,
    a hung program: killed with its process group after PROBE_TIMEOUT_SECONDS)."""
    try:
        process = subprocess.Popen([str(candidate), "-I", "-c", PROBE], stdin=subprocess.DEVNULL,
                                   stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                   start_new_session=True)
    except OSError:
        return None
    try:
        out, _ = process.communicate(timeout=PROBE_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        return None
    if process.returncode != 0:
        return None
    try:
        fields = json.loads(out.strip().splitlines()[-1])
        interposed = fields["interposed"]
        return Interpreter(str(fields["executable"]), tuple(int(v) for v in fields["version"]), bool(fields["venv"]),
                           bool(fields["debug"]), None if interposed is None else bool(interposed))
    except (ValueError, KeyError, IndexError, TypeError):
        return None


def choose(reference: Interpreter | None, found: Iterable[Path],
           ask: Callable[[Path], Interpreter | None] = probe) -> Interpreter | None:
    """The interpreter to use instead of the reference, by the module's rule; None keeps the reference.
    Asks the candidates in order and stops at the first that wins."""
    if reference is None or reference.version[:2] < MINIMUM or reference.interposed is not True:
        return None
    own = os.path.realpath(reference.executable)
    for candidate in found:
        if os.path.realpath(candidate) == own:
            continue
        interpreter = ask(candidate)
        # The interpreter's own path, not the candidate's: a wrapper or a pyenv shim would run bash and
        # pyenv again for every command of the bootstrap.
        if (interpreter is not None and interpreter.version[:2] == reference.version[:2] and interpreter.fast
                and os.path.realpath(interpreter.executable) != own
                and _PLAIN_PATH.fullmatch(interpreter.executable)):
            return interpreter
    return None


def main(path: str | None = None, ask: Callable[[Path], Interpreter | None] = probe,
         running: Path | None = None) -> int:
    reference = ask(running or Path(sys.executable))
    minor = reference.version[1] if reference is not None else sys.version_info[1]
    chosen = choose(reference, candidates(os.environ.get("PATH", "") if path is None else path, minor), ask)
    if chosen is None or reference is None:
        print(REFERENCE)
        return 0
    older = "; an older patch release" if chosen.version < reference.version else ""
    print(f"==> virtualenv interpreter: {chosen.describe(older)} instead of python3, {reference.describe()}, "
          "whose calls between its own functions go through the PLT: slower (tools/pick_python.py); "
          "PYTHON=python3 keeps python3", file=sys.stderr)
    print(chosen.executable)
    return 0


if __name__ == "__main__":
    sys.exit(main())
