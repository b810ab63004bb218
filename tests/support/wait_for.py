"""pulumi-kubernetes' `pulumi.com/waitFor` check, for tests: does an object's live state satisfy the annotation?

It follows the provider's code (pulumi/pulumi-kubernetes provider/pkg/metadata/overrides.go `ReadyCondition`,
provider/pkg/jsonpath/jsonpath.go `Parse`/`Matches`, provider/pkg/await/condition/jsonpath.go, all.go and
kubectl.go `checkCondition`), unchanged from v4.26.0 to the newest snapshot read (commit 94977969d, July 2026,
after v4.32.0; the pinned 4.34.2 was not in it), and evaluates the RFC 9535 subset the edge's expressions use
(the provider's engine is github.com/theory/jsonpath v0.9.0): name segments, filter segments `[?(...)]` or
`[?...]` joining comparisons with `&&`, each `@.<path>` or `$.<path>` against a string or integer literal or
another such path. Anything else raises `ValueError`, as the provider would refuse an expression it cannot
parse: a test of a mistyped expression fails instead of silently waiting on nothing.
"""

from __future__ import annotations

import json
import re
from typing import Any

_BRACKETS = re.compile(r"\{\s*(.*?)\s*\}")  # jsonpath.go _bracketExpr
_TOKEN = re.compile(r'\s*(?:(?P<str>"(?:[^"\\]|\\.)*")|(?P<int>-?\d+)|(?P<path>[@$](?:\.[A-Za-z_][A-Za-z0-9_]*)*)'
                    r"|(?P<op>==|&&)|(?P<paren>[()]))")
_MISSING = object()


def satisfied(annotation: str, obj: dict[str, Any]) -> bool:
    """True when every expression of the annotation holds for `obj` (a JSON list is ANDed: condition.NewAll)."""
    try:
        expressions = json.loads(annotation)
    except json.JSONDecodeError:
        expressions = [annotation]
    if not isinstance(expressions, list):
        expressions = [annotation]
    if not expressions:
        raise ValueError("at least one condition must be specified")
    results = []
    for expression in expressions:
        if expression.startswith("jsonpath="):
            results.append(_jsonpath_satisfied(expression, obj))
        elif expression.startswith("condition="):
            results.append(_condition_satisfied(expression, obj))
        else:
            raise ValueError(f'expected a "jsonpath=" or "condition=" prefix, got {expression!r}')
    return all(results)


def _condition_satisfied(expression: str, obj: dict[str, Any]) -> bool:
    """kubectl's `--for=condition=Type[=Status]` with its generation check (await/condition/kubectl.go)."""
    wanted_type, _, wanted_status = expression.removeprefix("condition=").partition("=")
    wanted_status = wanted_status or "True"
    generation = obj.get("metadata", {}).get("generation")
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type", "").lower() != wanted_type.lower() or "status" not in condition:
            continue
        observed = condition.get("observedGeneration", (obj.get("status") or {}).get("observedGeneration"))
        if generation is not None and observed is not None and observed < generation:
            return False
        return bool(condition["status"].lower() == wanted_status.lower())
    return False


def parse(expression: str) -> tuple[list[Any], str]:
    """(segments, expected value) of a `jsonpath=` expression, split as jsonpath.go `Parse` does."""
    raw = expression.removeprefix("jsonpath=")
    parts = raw.replace("==", "\0").split("=")
    if len(parts) > 2:
        raise ValueError(f"format should be {{.path}}=value or {{.path}}, got {raw!r}")
    path, value = parts[0].replace("\0", "=="), (parts[1].replace("\0", "==") if len(parts) == 2 else "")
    if len(parts) == 2 and not value:
        raise ValueError(f"{path}= requires a value")
    match = _BRACKETS.search(path)
    if match is None:
        raise ValueError(f"{path} should be wrapped in brackets {{ ... }}")
    query = match[1] if match[1].startswith("$") else "$" + match[1]
    return _segments(query), value


def _jsonpath_satisfied(expression: str, obj: dict[str, Any]) -> bool:
    """jsonpath.go `Matches` after await/condition/jsonpath.go's top-level observedGeneration check."""
    segments, value = parse(expression)
    generation = obj.get("metadata", {}).get("generation")
    observed = (obj.get("status") or {}).get("observedGeneration")
    if generation is not None and observed is not None and observed < generation:
        return False
    nodes = _select(segments, obj, obj)
    if not nodes:
        return False
    first = nodes[0]
    if isinstance(first, (dict, list)):
        if value:
            raise ValueError(f"{expression} selects a non-primitive value")
        return True
    return not value or _go_print(first) == value


def _go_print(value: Any) -> str:
    """fmt.Sprint of a decoded JSON value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return "<nil>" if value is None else str(value)


def _segments(query: str) -> list[Any]:
    """`$.a.b[?(...)].c` -> ["a", "b", <filter>, "c"]."""
    if not query.startswith("$"):
        raise ValueError(f"{query}: a query starts with $")
    segments: list[Any] = []
    i = 1
    while i < len(query):
        if query[i] == ".":
            name = re.match(r"[A-Za-z_][A-Za-z0-9_]*", query[i + 1:])
            if name is None:
                raise ValueError(f"{query}: a name expected at {i + 1}")
            segments.append(name[0])
            i += 1 + len(name[0])
        elif query.startswith("[?", i):
            depth, j = 0, i + 2
            while j < len(query) and not (query[j] == "]" and depth == 0):
                depth += {"(": 1, ")": -1}.get(query[j], 0)
                j += 1
            if j == len(query):
                raise ValueError(f"{query}: unclosed filter at {i}")
            segments.append(_filter(query[i + 2:j]))
            i = j + 1
        else:
            raise ValueError(f"{query}: unsupported at {i}: {query[i:]!r}")
    return segments


def _filter(text: str) -> list[tuple[Any, Any]]:
    """A filter as the comparisons it ANDs: [(left, right)], each a literal or ("@"|"$", [names])."""
    tokens: list[tuple[str, str]] = []
    position = 0
    while position < len(text.rstrip()):
        match = _TOKEN.match(text, position)
        if match is None or match.end() == position:
            raise ValueError(f"filter {text!r}: unsupported at {position}: {text[position:]!r}")
        kind = match.lastgroup
        assert kind is not None
        tokens.append((kind, match[kind]))
        position = match.end()
    if tokens and tokens[0] == ("paren", "(") and tokens[-1] == ("paren", ")"):
        tokens = tokens[1:-1]
    if any(kind == "paren" for kind, _ in tokens):
        raise ValueError(f"filter {text!r}: nested parentheses are not supported here")
    if len(tokens) % 4 != 3:
        raise ValueError(f"filter {text!r}: expected <a> == <b> [&& ...]")
    comparisons = []
    for start in range(0, len(tokens), 4):
        chunk = tokens[start:start + 3]
        joiner = tokens[start + 3] if start + 3 < len(tokens) else None
        if len(chunk) != 3 or chunk[1] != ("op", "==") or (joiner is not None and joiner != ("op", "&&")):
            raise ValueError(f"filter {text!r}: expected <a> == <b> [&& ...]")
        comparisons.append((_operand(chunk[0]), _operand(chunk[2])))
    if not comparisons:
        raise ValueError(f"empty filter {text!r}")
    return comparisons


def _operand(token: tuple[str, str]) -> Any:
    kind, text = token
    if kind == "str":
        return json.loads(text)
    if kind == "int":
        return int(text)
    if kind == "path":
        root, *names = text.split(".")
        return (root, names)
    raise ValueError(f"{text!r} cannot be compared")


def _resolve(operand: Any, current: Any, root: Any) -> Any:
    if not isinstance(operand, tuple):
        return operand
    node, names = (current if operand[0] == "@" else root), operand[1]
    for name in names:
        if not isinstance(node, dict) or name not in node:
            return _MISSING
        node = node[name]
    return node


def _equal(left: Any, right: Any) -> bool:
    """RFC 9535 `==`: a missing node equals only another missing one; numbers by value, never a string."""
    if left is _MISSING or right is _MISSING:
        return left is right
    numbers = (int, float)
    if isinstance(left, bool) or isinstance(right, bool):
        return left is right
    if isinstance(left, numbers) and isinstance(right, numbers):
        return bool(left == right)
    return type(left) is type(right) and bool(left == right)


def _select(segments: list[Any], node: Any, root: Any) -> list[Any]:
    nodes = [node]
    for segment in segments:
        found: list[Any] = []
        for current in nodes:
            if isinstance(segment, str):
                if isinstance(current, dict) and segment in current:
                    found.append(current[segment])
            else:
                children = current if isinstance(current, list) else (
                    list(current.values()) if isinstance(current, dict) else [])
                found.extend(child for child in children if all(
                    _equal(_resolve(a, child, root), _resolve(b, child, root)) for a, b in segment))
        nodes = found
    return nodes
