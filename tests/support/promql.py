"""PromQL checker shared by every test that emits an expression: alerts, KEDA triggers, dashboards.

Parses with promql_parser (Rust port of the Prometheus parser) and walks the AST for metric names,
label matchers and counter-only functions, so a typo in a metric name fails a unit test, not a page.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import promql_parser

# Functions whose argument must be a monotonic counter. Applying them to a gauge gives numbers that
# look plausible and mean nothing (Prometheus docs, "rate()": "should only be used with counters").
COUNTER_ONLY_FUNCTIONS = frozenset({"rate", "irate", "increase", "resets"})

_METRIC_NAME_LABEL = "__name__"
_LEAVES = (promql_parser.VectorSelector, promql_parser.NumberLiteral, promql_parser.StringLiteral)


@dataclass(frozen=True)
class Selector:
    """One vector selector: its exact metric name (None if not fixed) and (label, op, value) matchers."""

    name: str | None
    matchers: tuple[tuple[str, str, str], ...]


def _op_symbol(op: promql_parser.MatchOp) -> str:
    # The parser reports regex ops with their compiled pattern attached, so compare by enum identity.
    if op == promql_parser.MatchOp.Equal:
        return "="
    if op == promql_parser.MatchOp.NotEqual:
        return "!="
    if op == promql_parser.MatchOp.Re:
        return "=~"
    if op == promql_parser.MatchOp.NotRe:
        return "!~"
    raise TypeError(f"unknown PromQL match operator {op!r}")


def _children(node: promql_parser.Expr) -> list[promql_parser.Expr]:
    """Direct sub-expressions of one AST node. Unknown node types fail loudly, never silently skip."""
    if isinstance(node, _LEAVES):
        return []
    if isinstance(node, promql_parser.MatrixSelector):
        return [node.vector_selector]
    if isinstance(node, promql_parser.Call):
        return list(node.args)
    if isinstance(node, promql_parser.AggregateExpr):
        return [node.expr] + ([node.param] if node.param is not None else [])
    if isinstance(node, promql_parser.BinaryExpr):
        return [node.lhs, node.rhs]
    if isinstance(node, (promql_parser.UnaryExpr, promql_parser.ParenExpr, promql_parser.SubqueryExpr)):
        return [node.expr]
    raise TypeError(f"promql checker does not know AST node type {type(node).__name__}")


def _walk(node: promql_parser.Expr) -> Iterator[promql_parser.Expr]:
    yield node
    for child in _children(node):
        yield from _walk(child)


def _selector(node: promql_parser.VectorSelector) -> Selector:
    matchers = [(m.name, _op_symbol(m.op), m.value) for m in node.matchers.matchers]
    for group in node.matchers.or_matchers:
        matchers.extend((m.name, _op_symbol(m.op), m.value) for m in group)
    name = node.name
    if name is None:
        exact = [value for label, op, value in matchers if label == _METRIC_NAME_LABEL and op == "="]
        name = exact[0] if len(exact) == 1 else None
    return Selector(name=name, matchers=tuple(matchers))


def parse(expr: str) -> promql_parser.Expr:
    """Parse or raise ValueError with the parser's message."""
    return promql_parser.parse(expr)


def parse_errors(expr: str, *, allow_experimental: bool = False) -> list[str]:
    """Empty when `expr` is valid, portable PromQL; otherwise one message per problem.

    Beyond syntax this rejects what a stock Prometheus refuses at rule-load time: experimental
    functions (need --enable-feature=promql-experimental-functions) and the parser's non-standard
    `{a="x" or b="y"}` matcher groups.
    """
    if not expr.strip():
        return ["empty PromQL expression"]
    try:
        ast = parse(expr)
    except ValueError as err:
        return [f"PromQL parse error in {expr!r}: {err}"]
    errors: list[str] = []
    for node in _walk(ast):
        if isinstance(node, promql_parser.Call) and node.func.experimental and not allow_experimental:
            errors.append(f"{node.func.name}() is experimental in Prometheus (feature flag needed): {expr!r}")
        if isinstance(node, promql_parser.VectorSelector) and node.matchers.or_matchers:
            errors.append(f"'or' inside label matchers is not standard PromQL: {expr!r}")
    return errors


def selectors(expr: str) -> list[Selector]:
    """Every vector selector in `expr`, including those inside ranges, subqueries and function args."""
    return [_selector(node) for node in _walk(parse(expr)) if isinstance(node, promql_parser.VectorSelector)]


def metric_names(expr: str) -> set[str]:
    """Exact metric names referenced by `expr` (bare names and `__name__="..."` matchers)."""
    return {sel.name for sel in selectors(expr) if sel.name is not None}


def label_matchers(expr: str) -> dict[str, set[str]]:
    """Metric name -> label names used in its matchers (`__name__` excluded; "" for nameless selectors)."""
    result: dict[str, set[str]] = {}
    for sel in selectors(expr):
        labels = result.setdefault(sel.name or "", set())
        labels.update(label for label, _, _ in sel.matchers if label != _METRIC_NAME_LABEL)
    return result


def function_names(expr: str) -> set[str]:
    """Names of every function called in `expr`."""
    return {node.func.name for node in _walk(parse(expr)) if isinstance(node, promql_parser.Call)}


def unknown_metric_errors(expr: str, known: set[str]) -> list[str]:
    """Problems that make `expr` reference something outside `known`: parse errors, unknown names,
    and selectors whose metric name is not fixed (a regex on `__name__` cannot be checked)."""
    errors = parse_errors(expr)
    if errors:
        return errors
    for sel in selectors(expr):
        if sel.name is None:
            errors.append(f"selector without a fixed metric name cannot be checked: {expr!r}")
        elif sel.name not in known:
            errors.append(f"unknown metric {sel.name!r} in {expr!r}")
    return errors


def counter_function_errors(expr: str, metric_types: dict[str, str]) -> list[str]:
    """rate()/irate()/increase()/resets() applied straight to a metric whose type is not 'counter'."""
    errors: list[str] = []
    for node in _walk(parse(expr)):
        if not (isinstance(node, promql_parser.Call) and node.func.name in COUNTER_ONLY_FUNCTIONS):
            continue
        for arg in node.args:
            if isinstance(arg, promql_parser.MatrixSelector):
                name = _selector(arg.vector_selector).name
                if name is not None and metric_types.get(name) != "counter":
                    errors.append(
                        f"{node.func.name}() on {name!r} of type {metric_types.get(name)!r}, not a counter"
                    )
    return errors


# Grafana's interval macros are not PromQL; a fixed range stands in for them when parsing.
GRAFANA_MACROS = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h"}


def expand_grafana_macros(expr: str) -> str:
    """A dashboard query as Prometheus receives it (`$var` in label values is left as text)."""
    for macro, value in GRAFANA_MACROS.items():
        expr = expr.replace(macro, value)
    return expr
