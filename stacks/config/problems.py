"""Configuration problems of stack files and command lines, in the library's one-line `Problem` shape
(llm_serving.platform.problems), and the error that carries them to the command line (exit 2).
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, NoReturn, TextIO

from llm_serving.platform.problems import (
    MISSING,
    PROJECT,
    InvalidArgs,
    Problem,
    closest,
    from_validation_error,
    mask_problem,
    show,
    suggest,
)

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

__all__ = [
    "MISSING",
    "PROJECT",
    "CommandLineParser",
    "ConfigError",
    "InvalidArgs",
    "Problem",
    "closest",
    "from_validation_error",
    "mask_problem",
    "show",
    "suggest",
]


class ConfigError(Exception):
    """Raised with every problem of a stack file or a command line; the CLI prints them and exits 2."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = sorted(problems, key=lambda p: (p.path, p.message))
        super().__init__("\n".join(p.line() for p in self.problems))



class CommandLineParser(argparse.ArgumentParser):
    """argparse with the project's error shape: one line naming the option, the value and what is
    allowed, then exit 2 (argparse's own code for bad usage); `--help` is unchanged.

    `use_streams(out, err)` sends `--help` and the error lines to a caller's streams rather than the
    process's: no process-wide `redirect_stdout`, which two commands running in threads of one process
    (the suite runs verify's load tests at once) would each swap and restore out of order."""

    _out: TextIO | None = None
    _err: TextIO | None = None

    def use_streams(self, out: TextIO | None, err: TextIO | None) -> CommandLineParser:
        self._out, self._err = out, err
        return self

    def _print_message(self, message: str, file: SupportsWrite[str] | None = None) -> None:
        # argparse passes sys.stdout for --help and sys.stderr for usage errors.
        if file is sys.stdout and self._out is not None:
            file = self._out
        elif file is sys.stderr and self._err is not None:
            file = self._err
        super()._print_message(message, file)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message}\n")
