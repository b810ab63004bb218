"""The interpreter `make` creates its virtualenvs with when PYTHON is not given: among the builds of
`python3`'s own minor version on PATH, one that does not run through a shared libpython.

Why: CPython built with `--enable-shared` (pyenv's builds when PYTHON_CONFIGURE_OPTS asks for it)
runs every call inside the interpreter through the shared library's PLT, which also stops the
compiler inlining them; without `--enable-optimizations` (which since 3.10 adds
-fno-semantic-interposition) that costs up to 1.3x (bpo-38980, https://bugs.python.org/issue38980).
Debian's and Ubuntu's /usr/bin/python3 link the interpreter statically. On the 2-core CI machine
`python3` is pyenv's shared 3.11.7 and /usr/bin/python3.11 Debian's static 3.11.2: `make test` took
84 busy core-seconds and 45 s wall on the first, 68 and 37 s on the second (3 alternate runs each,
2026-12-02, docs/testing.md).

The rule, deterministic and never a surprise of version:
- the candidates are every `python3` and `python3.N` file in each PATH directory, in PATH order;
- each is asked (one short run, `-I`) for its version, whether it can create a virtualenv (venv and
  ensurepip), whether it is a debug build and whether a libpython shared library is mapped into it;
- of those that can create a virtualenv and have the minor version of the first one found (`python3`
  on PATH, what the Makefile used before), the first that is neither a debug build nor linked to a
  shared libpython wins, else that first one;
- none usable: `python3`, and the bootstrap's own version check says what is wrong.

Prints the chosen interpreter on stdout, and one line on stderr saying which and, when it is not the
first one found, why. Standard library only: it runs before any virtualenv exists.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

FALLBACK = "python3"
PROBE_TIMEOUT_SECONDS = 30.0  # a pyenv shim starts bash and pyenv first; a healthy interpreter answers in 0.1 s
_NAME = re.compile(r"python3(\.\d+)?")
# Run by each candidate: what the choice needs, as one JSON line. /proc/self/maps lists the shared
# objects mapped into the process (Linux); elsewhere linkage is unknown (None) and only order counts.
PROBE = """\
import importlib.util, json, sys, sysconfig
try:
    with open("/proc/self/maps") as maps:
        shared = any("libpython" in line for line in maps)
except OSError:
    shared = None
print(json.dumps({
    "executable": sys.executable,
    "version": list(sys.version_info[:3]),
    "venv": all(importlib.util.find_spec(m) is not None for m in ("venv", "ensurepip")),
    "debug": bool(sysconfig.get_config_var("Py_DEBUG")),
    "shared": shared,
}))
"""


@dataclass(frozen=True)
class Interpreter:
    """One candidate's answers to PROBE."""

    executable: str
    version: tuple[int, int, int]
    venv: bool
    debug: bool
    shared: bool | None

    def describe(self) -> str:
        linkage = {True: "shared libpython", False: "static", None: "linkage unknown"}[self.shared]
        return f"{self.executable} ({'.'.join(map(str, self.version))}, {linkage}{', debug' if self.debug else ''})"


def candidates(path: str) -> list[Path]:
    """Every python3 and python3.N file in the PATH directories, in PATH order; within a directory
    python3 first, then by minor version."""
    found: list[Path] = []
    for directory in path.split(os.pathsep):
        if not directory:
            continue
        try:
            names = [n for n in os.listdir(directory) if _NAME.fullmatch(n)]
        except OSError:
            continue
        for name in sorted(names, key=lambda n: (n != "python3", int(n.rpartition(".")[2]) if "." in n else 0)):
            candidate = Path(directory) / name
            if candidate.is_file() and os.access(candidate, os.X_OK):
                found.append(candidate)
    return found


def probe(candidate: Path) -> Interpreter | None:
    """The candidate's answers, or None when it does not run (a pyenv shim of an inactive version)."""
    try:
        answered = subprocess.run([str(candidate), "-I", "-c", PROBE], capture_output=True, text=True,
                                  timeout=PROBE_TIMEOUT_SECONDS, check=False, stdin=subprocess.DEVNULL)
        if answered.returncode != 0:
            return None
        fields = json.loads(answered.stdout.strip().splitlines()[-1])
        return Interpreter(str(fields["executable"]), tuple(fields["version"]), bool(fields["venv"]),
                           bool(fields["debug"]), fields["shared"])
    except (OSError, subprocess.TimeoutExpired, ValueError, KeyError, IndexError, TypeError):
        return None


def choose(found: Iterable[Path], ask: Callable[[Path], Interpreter | None] = probe,
           ) -> tuple[Interpreter | None, Interpreter | None]:
    """(the chosen interpreter, the first usable one), by the module's rule; (None, None) when none can
    create a virtualenv. Asks only what the rule needs: once the first usable one fixes the minor
    version, only `python3` and `python3.<that minor>` are asked, and the first fast one ends the search."""
    first: Interpreter | None = None
    seen: set[str] = set()  # one binary under several names (python3 -> python3.11) is one candidate
    for candidate in found:
        if first is not None and candidate.name not in ("python3", f"python3.{first.version[1]}"):
            continue
        interpreter = ask(candidate)
        if interpreter is None or not interpreter.venv:
            continue
        binary = os.path.realpath(interpreter.executable)
        if binary in seen:
            continue
        seen.add(binary)
        if first is None:
            first = interpreter
        elif interpreter.version[:2] != first.version[:2]:
            continue
        if not interpreter.debug and interpreter.shared is False:
            return interpreter, first
    return first, first


def main(path: str | None = None, ask: Callable[[Path], Interpreter | None] = probe) -> int:
    chosen, first = choose(candidates(os.environ.get("PATH", "") if path is None else path), ask)
    if chosen is None or first is None:
        print(f"python: no python3 on PATH can create a virtualenv; trying {FALLBACK}", file=sys.stderr)
        print(FALLBACK)
        return 0
    if chosen is first:
        print(f"python: {chosen.describe()}", file=sys.stderr)
    else:
        print(f"python: {chosen.describe()}, not the first on PATH, {first.describe()}: a shared libpython "
              f"runs this project's renders and tests about a fifth slower (tools/pick_python.py); "
              f"PYTHON=<interpreter> chooses another", file=sys.stderr)
    print(chosen.executable)
    return 0


if __name__ == "__main__":
    sys.exit(main())
