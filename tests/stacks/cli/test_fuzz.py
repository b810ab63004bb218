"""Every subcommand's every option, given values no option accepts: no traceback ever, exit 2, and
the one-line message names the option. The options are read from the parsers themselves, so a new
option is fuzzed the day it is added."""

from __future__ import annotations

import argparse
import contextlib
import io
from collections.abc import Callable

import pytest

from stacks import cli
from stacks.cli import plan as plan_cli
from stacks.cli import verify
from stacks.config import files as stack_files
from stacks.offline import diff, policy_check

# Values that are wrong for every option that takes one: not a number, negative, not finite, empty,
# broken JSON and YAML, a would-be option, and a number beyond every range.
BAD = ["abc!", "-1", "nan", "inf", "", "{bad", "[unclosed", "1e999", "--x"]
# A valid invocation of each command that the fuzzed option is appended to (nothing renders: every
# bad value is refused before a render or a write would start).
VALID: dict[str, tuple[Callable[[], argparse.ArgumentParser], list[str]]] = {
    "render": (cli.render_parser, ["render", "dev"]),
    "plan": (plan_cli._parser, ["plan", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "p5.48xlarge",
                                "--max-model-len", "8K"]),
    "clone": (cli.clone_parser, ["clone", "dev", "dev-fuzz"]),
    "diff": (diff._parser, ["diff", "dev"]),
    # A closed port on this machine: a value that slipped through would fail to connect (exit 1).
    "verify": (verify._parser, ["verify", "dev", "--url", "http://127.0.0.1:9/v1", "--no-load"]),
}


def _value_options() -> list[tuple[str, str]]:
    found = []
    for command, (parser, _) in VALID.items():
        for action in parser()._actions:
            if action.option_strings and action.nargs != 0:
                found.append((command, max(action.option_strings, key=len)))
    return found


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(argv)
        except SystemExit as exit_:  # argparse's own exit: --help, or a usage error
            code = exit_.code if isinstance(exit_.code, int) else 2
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(autouse=True)
def scratch_project(stack_dir, monkeypatch):
    """Clone writes into the project directory: point it at a scratch copy. verify finds its key."""
    monkeypatch.setattr(stack_files, "PROJECT_DIR", stack_dir)
    monkeypatch.setenv("LLM_SERVING_API_KEY", "fuzz-key-fuzz-key")


def test_every_value_option_is_fuzzed():
    assert len(_value_options()) == 51
    assert ("plan", "--speculative-config") in _value_options() and ("clone", "--set") in _value_options()


# plan --stack switches to the stack mode, fuzzed on its own below.
@pytest.mark.parametrize(("command", "option"), [o for o in _value_options() if o != ("plan", "--stack")])
def test_a_bad_value_exits_2_naming_the_option(command, option):
    base = VALID[command][1]
    # Any non-empty name is a directory render may create; what it must refuse is nothing at all,
    # or a path it cannot create or write.
    values = ["", "Pulumi.dev.yaml", "/proc/version/x"] if option == "--out" else BAD
    for value in values:
        code, _, err = _run([*base, option, value])
        lines = err.splitlines()
        assert code == 2, (option, value, err)
        assert lines and all(option in line for line in lines if not line.startswith("warning:")), (option, value, err)
        assert "Traceback" not in err


@pytest.mark.parametrize("value", BAD)
def test_stack_arguments_refuse_every_bad_value_in_one_line(value):
    for argv, name in ((["plan", "--stack", value, "--model", "llama-70b"], "--stack"),
                       (["render", value], "stack"), (["diff", value], "stack")):
        code, _, err = _run(argv)
        assert code == 2 and name in err and "Traceback" not in err, (argv, err)


@pytest.mark.parametrize("value", BAD)
def test_stack_mode_options_refuse_every_bad_value(value):
    for option in ("--tp", "--max-model-len", "--nodes", "--block-size", "--itl-slo-ms", "--model"):
        code, _, err = _run(["plan", "--stack", "prod", "--model", "llama-70b", option, value])
        assert code == 2 and option in err and "Traceback" not in err, (option, value, err)


@pytest.mark.parametrize("command", [*VALID, "policy-check"])
def test_an_unknown_option_and_a_flag_given_a_value_are_one_line(command):
    if command == "policy-check":
        code, _, err = _policy(["--no-such-option"])
    else:
        code, _, err = _run([*VALID[command][1], "--no-such-option"])
    assert (code, err.count("\n")) == (2, 1) and "--no-such-option" in err
    if command == "plan":
        code, _, err = _run([*VALID[command][1], "--json=yes"])
        assert (code, err) == (2, "python -m stacks plan: argument --json: ignored explicit argument 'yes'\n")


def _policy(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = policy_check.main(argv)
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 2
    return code, out.getvalue(), err.getvalue()


def test_an_unknown_command_lists_the_commands():
    code, _, err = _run(["nope"])
    assert code == 2 and err.startswith("unknown command 'nope'\n") and "Traceback" not in err


def _mutations(original: bytes, count: int) -> list[tuple[str, bytes]]:
    """Deterministic damage to a stack file, the same number of each kind: a byte flipped, a stray byte (often not
    UTF-8) inserted, the file cut short, a line duplicated, a tab or NUL or BOM where YAML does not take it."""
    import random

    rng = random.Random(46)
    found = []
    for index in range(count):
        at = rng.randrange(len(original))
        kind = ("flip", "insert", "truncate", "duplicate", "control")[index % 5]
        if kind == "flip":
            damaged = original[:at] + bytes([original[at] ^ (1 << rng.randrange(8))]) + original[at + 1:]
        elif kind == "insert":
            damaged = original[:at] + bytes([rng.randrange(128, 256)]) + original[at:]
        elif kind == "truncate":
            damaged = original[:at]
        elif kind == "duplicate":
            lines = original.splitlines(keepends=True)
            line = rng.randrange(len(lines))
            damaged = b"".join([*lines[:line], lines[line], *lines[line:]])
        else:
            damaged = original[:at] + rng.choice([b"\t", b"\x00", b"\xef\xbb\xbf", b"\x1b"]) + original[at:]
        found.append((f"{kind}@{at}", damaged))
    return found


@pytest.mark.parametrize(("damage", "content"), _mutations((stack_files.PROJECT_DIR / "Pulumi.dev.yaml").read_bytes(),
                                                            15))
def test_a_damaged_stack_file_is_planned_or_refused_in_lines_naming_keys_never_a_traceback(stack_dir, damage, content):
    path = stack_dir / "Pulumi.dev.yaml"
    path.write_bytes(content)
    code, out, err = _run(["plan", "--stack", str(path), "--model", "llama-8b", "--json"])
    assert "Traceback" not in err, (damage, err)
    if code == 0:
        assert out.startswith("{")  # the damage fell in a comment or a value that still holds
        return
    assert code == 2 and out == "", (damage, code, err)
    assert err and all(line.startswith(("llm-serving:", "aws:", "python -m stacks plan: argument --model"))
                       for line in err.splitlines()), (damage, err)
