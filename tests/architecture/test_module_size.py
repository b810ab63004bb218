"""No module grows past ~400 lines unless its docstring says why (a `Length:` paragraph)."""

from __future__ import annotations

import ast

from stacks.config.files import PROJECT_DIR

LIMIT_LINES = 400
ROOTS = ("llm_serving", "stacks", "policies", "tools", "tests")


def test_long_modules_explain_their_length() -> None:
    unexplained = []
    for root in ROOTS:
        for path in sorted((PROJECT_DIR / root).rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            if len(text.splitlines()) <= LIMIT_LINES:
                continue
            docstring = ast.get_docstring(ast.parse(text)) or ""
            if "\nLength: " not in f"\n{docstring}":
                unexplained.append(f"{path.relative_to(PROJECT_DIR)} ({len(text.splitlines())} lines)")
    assert unexplained == []
