"""A small PromQL evaluator over synthetic series, for walking alert rules through a simulated event.

Covers the subset our edge and picker rules use, parsed by promql_parser (tests/support/promql.py):
selectors with =, !=, =~, !~; rate() and increase() over a range (no counter resets, no extrapolation:
the difference between the last sample in the range and the first, which is what Prometheus computes
for a steady counter sampled at the range's edges); sum() and max(), alone or `by` labels; + - * / between vectors
with the same labels or with a number; comparisons against a number or a vector (filtering); and, or;
absent(). Anything else raises, so a rule outside the subset cannot pass silently.
"""

from __future__ import annotations

import bisect
import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

import promql_parser

from tests.support.promql import _op_symbol

Labels = tuple[tuple[str, str], ...]
Vector = dict[Labels, float]
LOOKBACK_SECONDS = 300  # Prometheus' default staleness window for instant selectors


@dataclass
class Store:
    """Samples per series: labels include __name__; (time, value) in time order."""

    series: dict[Labels, list[tuple[float, float]]] = field(default_factory=dict)
    # Selections by matchers: a walk evaluates the same selectors at every step.
    _selected: dict[tuple, list[Selected]] = field(default_factory=dict, repr=False)

    def add(self, name: str, labels: dict[str, str], samples: Iterable[tuple[float, float]]) -> None:
        key = tuple(sorted({"__name__": name, **labels}.items()))
        self.series.setdefault(key, []).extend(samples)
        self._selected.clear()

    def select(self, node: promql_parser.VectorSelector) -> list[Selected]:
        matchers = [(m.name, _op_symbol(m.op), m.value) for m in node.matchers.matchers]
        if node.name:
            matchers.append(("__name__", "=", node.name))
        key = tuple(matchers)
        if key not in self._selected:
            self._selected[key] = [Selected(_without_name(labels), [time for time, _ in samples], samples)
                                   for labels, samples in self.series.items() if _matches(dict(labels), matchers)]
        return self._selected[key]


@dataclass(frozen=True)
class Selected:
    """One selected series: its labels without the metric name (what binary operations match on, as in
    Prometheus), its sample times apart (for a plain binary search) and its samples."""

    labels: Labels
    times: list[float]
    samples: list[tuple[float, float]]


def _matches(labels: dict[str, str], matchers: list[tuple[str, str, str]]) -> bool:
    for name, op, value in matchers:
        actual = labels.get(name, "")
        if op in ("=", "!="):
            ok = (actual == value) == (op == "=")
        else:
            ok = (re.fullmatch(value, actual) is not None) == (op == "=~")
        if not ok:
            return False
    return True


def _without_name(labels: Labels) -> Labels:
    return tuple(item for item in labels if item[0] != "__name__")


def _window(times: list[float], start: float, end: float) -> tuple[int, int]:
    """Indexes [first, last) of the samples with start < time <= end; samples are in time order, so a
    binary search keeps a walk over hours of 15 s samples cheap."""
    return bisect.bisect_right(times, start), bisect.bisect_right(times, end)


def _at(series: Selected, t: float) -> float | None:
    first, last = _window(series.times, t - LOOKBACK_SECONDS, t)
    return series.samples[last - 1][1] if last > first else None


def _delta(series: Selected, start: float, end: float) -> tuple[float, float] | None:
    first, last = _window(series.times, start, end)
    if last - first < 2:
        return None
    samples = series.samples
    return samples[last - 1][1] - samples[first][1], samples[last - 1][0] - samples[first][0]


@functools.lru_cache(maxsize=64)
def _parse(expr: str) -> promql_parser.Expr:
    return promql_parser.parse(expr)


def evaluate(expr: str, store: Store, t: float) -> Vector:
    return _eval(_parse(expr), store, t)


def _eval(node: promql_parser.Expr, store: Store, t: float) -> Vector | float:
    if isinstance(node, promql_parser.NumberLiteral):
        return float(node.val)
    if isinstance(node, promql_parser.ParenExpr):
        return _eval(node.expr, store, t)
    if isinstance(node, promql_parser.VectorSelector):
        out = {}
        for series in store.select(node):
            value = _at(series, t)
            if value is not None:
                out[series.labels] = value
        return out
    if isinstance(node, promql_parser.Call):
        name = node.func.name
        if name == "absent":
            return {} if _eval(node.args[0], store, t) else {(): 1.0}
        if name == "vector":  # a scalar as one series without labels
            scalar = _eval(node.args[0], store, t)
            assert isinstance(scalar, float)
            return {(): scalar}
        if name in ("rate", "increase"):
            matrix = node.args[0]
            seconds = matrix.range.total_seconds()
            out = {}
            for series in store.select(matrix.vector_selector):
                found = _delta(series, t - seconds, t)
                if found is not None:
                    delta, span = found
                    out[series.labels] = delta if name == "increase" else delta / span
            return out
        raise NotImplementedError(f"function {name}")
    if isinstance(node, promql_parser.AggregateExpr):
        by = node.modifier is not None and node.modifier.type == promql_parser.AggModifierType.By
        if str(node.op) not in ("sum", "max") or (node.modifier is not None and not by):
            raise NotImplementedError(f"aggregation {node.op} {node.modifier}")
        inner = _eval(node.expr, store, t)
        aggregate = sum if str(node.op) == "sum" else max
        kept = frozenset(node.modifier.labels) if by else frozenset()
        groups: dict[Labels, list[float]] = {}
        for labels, value in inner.items():
            groups.setdefault(tuple(item for item in labels if item[0] in kept), []).append(value)
        return {labels: aggregate(values) for labels, values in groups.items()}
    if isinstance(node, promql_parser.BinaryExpr):
        return _binary(str(node.op), _eval(node.lhs, store, t), _eval(node.rhs, store, t))
    raise NotImplementedError(type(node).__name__)


_ARITHMETIC = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
               "/": lambda a, b: a / b if b else float("nan")}
_COMPARE = {">": lambda a, b: a > b, "<": lambda a, b: a < b, ">=": lambda a, b: a >= b,
            "<=": lambda a, b: a <= b, "==": lambda a, b: a == b, "!=": lambda a, b: a != b}


def _binary(op: str, lhs: Vector | float, rhs: Vector | float) -> Vector | float:
    if op == "and":
        return {k: v for k, v in lhs.items() if k in rhs}
    if op == "or":
        return {**rhs, **lhs} if lhs else dict(rhs)
    function = _ARITHMETIC.get(op) or _COMPARE.get(op)
    if function is None:
        raise NotImplementedError(f"operator {op}")
    if isinstance(lhs, float) and isinstance(rhs, float):
        return function(lhs, rhs)

    def pair(a: float, b: float) -> float | None:
        if op in _ARITHMETIC:
            return function(a, b)
        return a if function(a, b) else None

    if isinstance(rhs, float):
        pairs = {k: pair(v, rhs) for k, v in lhs.items()}
    elif isinstance(lhs, float):
        pairs = {k: pair(lhs, v) for k, v in rhs.items()}
    else:
        pairs = {k: pair(v, rhs[k]) for k, v in lhs.items() if k in rhs}
    return {k: v for k, v in pairs.items() if v is not None}


def firing(rule: dict, store: Store, start: float, end: float, step: float = 15) -> list[float]:
    """The evaluation times at which `rule` fires: some series of its expression present for its whole `for`. As in
    Prometheus, each series (label set) is pending on its own: one that goes away resets its own wait only, and
    one that appears later starts its own."""
    hold = int(rule["for"].removesuffix("m")) * 60
    pending_since: dict[Labels, float] = {}
    fired = []
    t = start
    while t <= end:
        present = evaluate(rule["expr"], store, t)
        pending_since = {labels: pending_since.get(labels, t) for labels in present}
        if any(t - since >= hold for since in pending_since.values()):
            fired.append(t)
        t += step
    return fired
