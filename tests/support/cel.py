"""A small CEL evaluator, for walking admission policies' expressions over objects without an API server.

Covers the subset the program's ValidatingAdmissionPolicies use, with the semantics the CEL specification gives
it (github.com/google/cel-spec, doc/langdef.md): string, integer and boolean literals; identifiers; field
selection, which is an error on a map without the field; `has(a.b)`, which tests the field's presence instead;
the `exists` and `all` macros over a list; `==`, `!=`, `!`, and `&&` and `||` with the specification's
commutative treatment of errors (`false && error` and `error && false` are false, `true || error` and
`error || true` true). Anything else raises SyntaxError, so an expression outside the subset cannot pass silently.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_TOKEN = re.compile(r"\s*(?:(?P<string>'[^'\\]*'|\"[^\"\\]*\")|(?P<int>\d+)|(?P<name>[A-Za-z_][A-Za-z0-9_]*)"
                    r"|(?P<op>&&|\|\||==|!=|[!().,]))")
_MACROS = ("exists", "all")


class CelError(Exception):
    """An evaluation error (CEL's error value): a missing field, a type mismatch."""


def _tokens(text: str) -> list[tuple[str, str]]:
    found, position = [], 0
    while position < len(text.rstrip()):
        match = _TOKEN.match(text, position)
        if match is None:
            raise SyntaxError(f"outside the CEL subset at {text[position:]!r}")
        kind = match.lastgroup
        assert kind is not None
        found.append((kind, match.group(kind)))
        position = match.end()
    return found


class _Parser:
    def __init__(self, text: str):
        self.tokens = _tokens(text)
        self.at = 0

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def take(self, value: str | None = None) -> tuple[str, str]:
        token = self.peek()
        if token is None or (value is not None and token[1] != value):
            raise SyntaxError(f"expected {value or 'a token'}, found {token}")
        self.at += 1
        return token

    def parse(self) -> tuple:
        node = self.disjunction()
        if self.peek() is not None:
            raise SyntaxError(f"unexpected {self.peek()}")
        return node

    def disjunction(self) -> tuple:
        node = self.conjunction()
        while self.peek() == ("op", "||"):
            self.take()
            node = ("or", node, self.conjunction())
        return node

    def conjunction(self) -> tuple:
        node = self.relation()
        while self.peek() == ("op", "&&"):
            self.take()
            node = ("and", node, self.relation())
        return node

    def relation(self) -> tuple:
        node = self.unary()
        if self.peek() in (("op", "=="), ("op", "!=")):
            operator = self.take()[1]
            node = (operator, node, self.unary())
        return node

    def unary(self) -> tuple:
        if self.peek() == ("op", "!"):
            self.take()
            return ("not", self.unary())
        return self.member()

    def member(self) -> tuple:
        node = self.primary()
        while self.peek() == ("op", "."):
            self.take()
            kind, name = self.take()
            if kind != "name":
                raise SyntaxError(f"expected a field or macro name, found {name!r}")
            if self.peek() == ("op", "("):
                if name not in _MACROS:
                    raise SyntaxError(f"method {name}() is outside the CEL subset")
                self.take("(")
                variable = self.take()
                if variable[0] != "name":
                    raise SyntaxError(f"{name}() needs a variable first")
                self.take(",")
                body = self.disjunction()
                self.take(")")
                node = (name, node, variable[1], body)
            else:
                node = ("select", node, name)
        return node

    def primary(self) -> tuple:
        kind, value = self.take()
        if kind == "string":
            return ("literal", value[1:-1])
        if kind == "int":
            return ("literal", int(value))
        if kind == "name" and value in ("true", "false"):
            return ("literal", value == "true")
        if kind == "name" and value == "has":
            self.take("(")
            operand = self.member()
            self.take(")")
            if operand[0] != "select":
                raise SyntaxError("has() takes a field selection")
            return ("has", operand[1], operand[2])
        if kind == "name":
            if self.peek() == ("op", "("):
                raise SyntaxError(f"function {value}() is outside the CEL subset")
            return ("name", value)
        if value == "(":
            node = self.disjunction()
            self.take(")")
            return node
        raise SyntaxError(f"unexpected {value!r}")


def _boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise CelError(f"{value!r} is not a bool")
    return value


def _evaluate(node: tuple, scope: Mapping[str, Any]) -> Any:
    match node:
        case ("literal", value):
            return value
        case ("name", name):
            if name not in scope:
                raise CelError(f"undeclared reference {name}")
            return scope[name]
        case ("select", operand, field):
            target = _evaluate(operand, scope)
            if not isinstance(target, Mapping):
                raise CelError(f"cannot select {field} from {target!r}")
            if field not in target:
                raise CelError(f"no such key: {field}")
            return target[field]
        case ("has", operand, field):
            target = _evaluate(operand, scope)
            if not isinstance(target, Mapping):
                raise CelError(f"has() on {target!r}")
            return field in target
        case ("not", operand):
            return not _boolean(_evaluate(operand, scope))
        case ("and" | "or" as operator, left, right):
            absorbing = operator == "or"  # the value that decides the result whatever the other side is
            results = []
            for side in (left, right):
                try:
                    value = _boolean(_evaluate(side, scope))
                except CelError as error:
                    results.append(error)
                    continue
                if value is absorbing:
                    return absorbing
                results.append(value)
            for result in results:
                if isinstance(result, CelError):
                    raise result
            return not absorbing
        case ("==" | "!=" as operator, left, right):
            equal = _evaluate(left, scope) == _evaluate(right, scope)
            return equal if operator == "==" else not equal
        case ("exists" | "all" as macro, operand, variable, body):
            items = _evaluate(operand, scope)
            if not isinstance(items, list):
                raise CelError(f"{macro}() over {items!r}")
            # `exists` is `||` over the items and `all` is `&&`, errors treated alike (cel-spec langdef.md,
            # Macros): one deciding item decides, else an error is the result, else the other value.
            deciding = macro == "exists"
            errors = []
            for item in items:
                try:
                    if _boolean(_evaluate(body, {**scope, variable: item})) is deciding:
                        return deciding
                except CelError as error:
                    errors.append(error)
            if errors:
                raise errors[0]
            return not deciding
    raise AssertionError(f"unknown node {node}")


def evaluate(expression: str, **variables: Any) -> Any:
    """The value of `expression` with `variables` bound (CelError for CEL's error value)."""
    return _evaluate(_Parser(expression).parse(), variables)
