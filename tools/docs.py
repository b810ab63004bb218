"""`make docs`: every figure in README.md and docs/*.md that the program computes, regenerated.

A figure lives between two markers, inline or over several lines:

    prod: <!-- generated: prod-scale-down-window -->1,140 s<!-- end generated: prod-scale-down-window -->

and GENERATORS (tools/doc_figures.py) say what goes between them, read from the stack files, the planner
(`python -m stacks plan --json`, the command users run), the offline render and the workflows. The
same command also rewrites the output of every `console` block that shows a `python -m stacks plan`
command, and the two older generated sections (the configuration reference of `make config-docs`, the
planner tables of `make planner-docs`). tests/docs/test_generated.py fails when any block is stale.

`python -m tools.docs` rewrites the pages in place; `--check` only lists the stale ones (exit 1).
"""

from __future__ import annotations

import argparse
import re
import shlex
import sys
from collections.abc import Iterable
from pathlib import Path

from stacks.config.files import PROJECT_DIR
from tools import config_reference, planner_tables
from tools.doc_facts import Facts, run_plan
from tools.doc_figures import GENERATORS

__all__ = ["GENERATORS", "Facts", "main", "pages_text", "regenerate", "run_plan", "splice_blocks", "splice_console"]

DOCS = PROJECT_DIR / "docs"
BLOCK = re.compile(r"<!-- generated: ([a-z0-9-]+) -->(.*?)<!-- end generated: \1 -->", re.S)
# A console block: "$ <command>" then the command's output, up to the closing fence.
CONSOLE = re.compile(r"^(```console\n\$ (.+?)\n)(.*?)(^```)", re.M | re.S)
PLAN_COMMAND = [".venv/bin/python", "-m", "stacks", "plan"]


def pages() -> list[Path]:
    return [PROJECT_DIR / "README.md", *sorted(DOCS.glob("*.md"))]


def pages_text() -> dict[Path, str]:
    """Every page, read once (tests share it)."""
    return {page: page.read_text(encoding="utf-8") for page in pages()}


# --- splicing ----------------------------------------------------------------------------------------


def block_names(text: str) -> list[str]:
    return [match[1] for match in BLOCK.finditer(text)]


def splice_blocks(text: str, facts: Facts, skip: Iterable[str] = ()) -> str:
    """Every marked block with its generator's text; an unknown name is an error naming it."""
    skipped = set(skip)
    unknown = sorted(set(block_names(text)) - set(GENERATORS))
    if unknown:
        raise SystemExit(f"no generator for block(s) {', '.join(unknown)} (tools/docs.py GENERATORS)")
    done: dict[str, str] = {}

    def replace(match: re.Match[str]) -> str:
        name = match[1]
        if name in skipped:
            return match[0]
        if name not in done:
            done[name] = GENERATORS[name](facts)
        return f"<!-- generated: {name} -->{done[name]}<!-- end generated: {name} -->"

    return BLOCK.sub(replace, text)


def plan_examples(text: str) -> list[tuple[str, str]]:
    """(command, shown output) of every console block that runs `python -m stacks plan`."""
    return [(match[2], match[3]) for match in CONSOLE.finditer(text) if _is_plan(match[2])]


def _is_plan(command: str) -> bool:
    return shlex.split(command, comments=True)[:4] == PLAN_COMMAND


def expected_exit(command: str) -> int:
    """A shown command that fails on purpose says so: `... # exits 2`; any other must exit 0."""
    match = re.search(r"#\s*exits (\d+)\s*$", command)
    return int(match[1]) if match else 0


def splice_console(text: str) -> str:
    """Each plan command's shown output replaced with what the command prints now."""

    def replace(match: re.Match[str]) -> str:
        if not _is_plan(match[2]):
            return match[0]
        _, output = run_plan(shlex.split(match[2], comments=True)[4:])
        return match[1] + output + match[4]

    return CONSOLE.sub(replace, text)


def regenerate(page: Path, text: str, facts: Facts, skip: Iterable[str] = ()) -> str:
    """The page as `make docs` writes it."""
    if page.name == "configuration.md":
        text = config_reference.splice(text)
    if page.name == "capacity-planner.md":
        text = planner_tables.splice(text)
    return splice_blocks(splice_console(text), facts, skip)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.docs", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="write nothing; list stale pages and exit 1 if any")
    args = parser.parse_args(argv)
    facts = Facts()
    stale = []
    for page, text in pages_text().items():
        new = regenerate(page, text, facts)
        if new != text:
            stale.append(page.relative_to(PROJECT_DIR).as_posix())
            if not args.check:
                page.write_text(new, encoding="utf-8")
    verb = "stale" if args.check else "regenerated"
    sys.stdout.write("".join(f"{verb}: {name}\n" for name in stale) or "every generated block is current\n")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    raise SystemExit(main())

