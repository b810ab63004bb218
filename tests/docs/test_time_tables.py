"""Every time figure in a table of the docs reads the one clock: it is generated from the code (the planner and
llm_serving/stack/timing.py, through tools/doc_figures.py and the other generators), or it is an upstream fact
whose source the same row links. A typed figure cannot drift from the code: it fails here first."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from stacks.config.files import PROJECT_DIR
from tools import docs

PAGES = docs.pages_text()
# Both marker styles: `make docs` blocks, and the whole generated sections (config reference, verification table).
GENERATED = re.compile(r"<!-- generated: ([\w-]+) -->.*?<!-- end generated: \1 -->"
                       r"|<!-- BEGIN [^>]*-->.*?<!-- END [^>]*-->", re.S)
QUOTED = re.compile(r"`[^`\n]*`")  # a quoted message or flag, not a figure the page states
TIME = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?\s?(?:s|min|minutes|seconds|h|hours)\b")
SOURCE = re.compile(r"\]\(https?://")


def typed_time_rows(text: str) -> Iterator[tuple[int, str]]:
    """(line number, row) of each table row that states a time figure neither generated nor sourced."""
    outside = GENERATED.sub(lambda match: "\n" * match[0].count("\n"), text)
    for number, line in enumerate(outside.splitlines(), 1):
        if line.startswith("|") and TIME.search(QUOTED.sub("", line)) and not SOURCE.search(line):
            yield number, line


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(PROJECT_DIR).as_posix() for p in PAGES])
def test_every_time_figure_in_a_table_is_generated_or_an_upstream_fact_with_its_source(page: Path):
    assert list(typed_time_rows(PAGES[page])) == [], "generate the figure (tools/doc_figures.py) or link its source"


def test_a_typed_figure_is_caught_and_a_generated_or_sourced_one_is_not():
    text = "\n".join([
        "| `--shutdown-timeout` | 300 s | why |",
        "| grace | <!-- generated: prod-drain -->1850 s<!-- end generated: prod-drain --> | why |",
        "| Envoy route timeout | 15 s | [RouteAction](https://www.envoyproxy.io/docs) |",
        "| message | `took 0.18 s` | a quoted output |",
        "| nodes | 4 | no time |",
    ])
    assert list(typed_time_rows(text)) == [(1, "| `--shutdown-timeout` | 300 s | why |")]
