"""Problems with a stack's args: one line each, naming the key path, the bad value and what is allowed.

pydantic's errors and the stack's cross-field rules end up in the same `Problem` shape, so a user sees
every problem at once, in one format, and never a traceback: from a stack file, from Python, or from
another language through the package (the key paths are the args' camelCase names).
"""

from __future__ import annotations

import difflib
import json
import typing
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from llm_serving.platform.args import fields_of, is_args_type

PROJECT = "llm-serving"  # the package, and the Pulumi config namespace of a stack file's keys


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a stack's configuration."""

    path: str  # dotted camelCase key path below `llm-serving:`, list items as `[i]` or `[name]`
    message: str
    got: Any
    expected: str

    def line(self) -> str:
        return f"{PROJECT}:{self.path}: {self.message} (got {show(self.got)}; expected {self.expected})"


class InvalidArgs(ValueError):
    """Raised with every problem found in a component's args: one line each."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = sorted(problems, key=lambda p: (p.path, p.message))
        super().__init__("\n".join(p.line() for p in self.problems))


MISSING = object()


def show(value: Any) -> str:
    """Render a value compactly for a message; secrets never reach here."""
    if value is MISSING:
        return "nothing"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, dict | list):
        text = json.dumps(value, sort_keys=True, default=str)
        return text if len(text) <= 80 else text[:77] + "..."
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def closest(word: str, candidates: list[str]) -> str | None:
    """The candidate a misspelt `word` most likely meant: difflib's closest at its default cutoff, else one that
    differs only in case (`aws:Region`); None when there is none."""
    close = difflib.get_close_matches(word, candidates, n=1, cutoff=0.6)
    if close:
        return close[0]
    return {c.lower(): c for c in candidates}.get(word.lower())


def suggest(word: str, candidates: list[str]) -> str:
    """`; did you mean "x"?` when a close candidate exists, else an empty string."""
    close = closest(word, candidates)
    return f'; did you mean "{close}"?' if close else ""


def mask_problem(problem: Problem, secret_keys: frozenset[str]) -> Problem:
    """A problem under a secret key shows "[secret]" instead of the value."""
    head = problem.path.split(".", 1)[0].split("[", 1)[0]
    if head in secret_keys and problem.got is not MISSING and problem.got is not None:
        return Problem(problem.path, problem.message, "[secret]", problem.expected)
    return problem


def _model_at(root: type, loc: tuple[Any, ...]) -> type | None:
    """The args type that owns the field at `loc` (for listing allowed keys)."""
    model: Any = root
    for part in loc:
        if isinstance(part, int):
            continue
        if not is_args_type(model):
            return None
        field = next(
            (f for n, f in fields_of(model).items() if (f.alias or n) == part or n == part), None
        )
        if field is None:
            return None
        annotation = field.annotation
        model = None
        for candidate in (annotation, *typing.get_args(annotation)):
            for inner in (candidate, *typing.get_args(candidate)):
                if is_args_type(inner):
                    model = inner
        if model is None:
            return None
    return model if is_args_type(model) else None


def _keys_of(model: type) -> list[str]:
    return sorted(f.alias or n for n, f in fields_of(model).items())


def _path(loc: tuple[Any, ...], data: Any) -> str:
    """Dotted path; list items shown by their `name` when they have one."""
    out = ""
    node = data
    for part in loc:
        if isinstance(part, int):
            label = str(part)
            if isinstance(node, list) and part < len(node) and isinstance(node[part], dict):
                name = node[part].get("name")
                if isinstance(name, str):
                    label = name
            out += f"[{label}]"
        else:
            out += ("." if out else "") + str(part)
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            node = None
    return out


_EXPECTED_BY_TYPE = {
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "a whole number",
    "float_type": "a number",
    "float_parsing": "a number",
    "string_type": "a string",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "dict_type": "a mapping of keys to values",
    "model_type": "a mapping of keys to values",
    "model_attributes_type": "a mapping of keys to values",
    "list_type": "a list",
}


def _expected(err: ErrorDetails) -> str:
    kind = err["type"]
    ctx = err.get("ctx") or {}
    if kind in _EXPECTED_BY_TYPE:
        return _EXPECTED_BY_TYPE[kind]
    if kind == "greater_than_equal":
        return f">= {ctx['ge']}"
    if kind == "greater_than":
        return f"> {ctx['gt']}"
    if kind == "less_than_equal":
        return f"<= {ctx['le']}"
    if kind == "less_than":
        return f"< {ctx['lt']}"
    if kind in ("enum", "literal_error"):
        return f"one of {ctx.get('expected', '')}"
    if kind == "string_pattern_mismatch":
        return f"a string matching {ctx['pattern']}"
    if kind == "too_short":
        return f"at least {ctx.get('min_length')} item(s)"
    if kind == "string_too_short":
        return f"at least {ctx.get('min_length')} characters"
    if kind == "too_long":
        return f"at most {ctx.get('max_length')} item(s)"
    if kind == "string_too_long":
        return f"at most {ctx.get('max_length')} characters"
    return "a valid value"


def from_validation_error(
    error: ValidationError,
    root: type,
    data: dict[str, Any],
    secret_keys: frozenset[str] = frozenset(),
) -> list[Problem]:
    """Translate pydantic's errors into problems with key paths, values and allowed values.
    A secret's value is never echoed back."""
    problems: list[Problem] = []
    for err in error.errors(include_url=False):
        loc = tuple(err["loc"])
        # Union members produce one error each; keep the path readable by dropping type tags.
        loc = tuple(p for p in loc if not (isinstance(p, str) and ("[" in p or p in ("function-after",))))
        path = _path(loc, data)
        kind = err["type"]
        if loc and str(loc[0]) in secret_keys:
            err = {**err, "input": "[secret]"}
        if kind in ("extra_forbidden", "unexpected_keyword_argument"):
            owner = _model_at(root, loc[:-1])
            allowed = _keys_of(owner) if owner else []
            problems.append(
                Problem(
                    path,
                    "unknown key" + suggest(str(loc[-1]), allowed),
                    err.get("input"),
                    "one of " + ", ".join(allowed) if allowed else "no such key",
                )
            )
        elif kind == "missing":
            problems.append(Problem(path, "required key is missing", MISSING, "a value"))
        else:
            message = err["msg"]
            if kind in _EXPECTED_BY_TYPE:
                message = "wrong type"
            elif kind in ("enum", "literal_error"):
                message = "not an allowed value"
            elif kind == "string_pattern_mismatch":
                # An item of a list or map names itself (platform.args.check_each / check_labels).
                message = message if message.startswith(("item ", "key ", "value ")) else "not a valid value"
            elif kind in ("too_short", "string_too_short"):
                message = "too short"
            problems.append(Problem(path, message, err.get("input"), _expected(err)))
    return problems
