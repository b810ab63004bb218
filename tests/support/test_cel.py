"""Tests for the CEL evaluator in tests/support/cel.py: the admission guard's tests trust it to refuse and admit
pods as the API server's CEL would, so its semantics are pinned to the specification's (cel-spec langdef.md)."""

from __future__ import annotations

import pytest

from tests.support.cel import CelError, evaluate

POD = {"spec": {"serviceAccountName": "sa", "containers": [{"name": "a"}, {"name": "b", "env": [{"name": "X"}]}]}}


def test_selection_of_a_missing_field_is_an_error_and_has_tests_presence():
    with pytest.raises(CelError, match="no such key: env"):
        evaluate("object.spec.containers.all(c, c.env.exists(e, e.name == 'X'))", object=POD)
    assert evaluate("has(object.spec.serviceAccountName)", object=POD) is True
    assert evaluate("has(object.spec.nodeName)", object=POD) is False
    assert evaluate("object.spec.serviceAccountName == 'sa' && !(object.spec.serviceAccountName != 'sa')",
                    object=POD) is True


def test_logical_operators_absorb_errors_both_ways_as_the_specification_says():
    # `false && error` and `error && false` are false; `true || error` and `error || true` true.
    assert evaluate("false && object.missing", object={}) is False
    assert evaluate("object.missing && false", object={}) is False
    assert evaluate("object.missing || true", object={}) is True
    for undecided in ("true && object.missing", "object.missing || false"):
        with pytest.raises(CelError):
            evaluate(undecided, object={})


def test_macros_decide_on_one_item_and_otherwise_carry_an_error():
    has_x = "c.env.exists(e, e.name == 'X')"
    # One container with X decides `exists`, although the other has no env to select.
    assert evaluate(f"object.spec.containers.exists(c, {has_x})", object=POD) is True
    assert evaluate(f"object.spec.containers.exists(c, has(c.env) && {has_x})", object=POD) is True
    assert evaluate(f"object.spec.containers.all(c, has(c.env) && {has_x})", object=POD) is False
    with pytest.raises(CelError):
        evaluate("object.spec.containers.exists(c, c.env.exists(e, e.name == 'Y'))", object=POD)
    assert evaluate("object.items.exists(i, i == 1)", object={"items": []}) is False
    assert evaluate("object.items.all(i, i == 1)", object={"items": []}) is True


@pytest.mark.parametrize("expression", [
    "object.spec.containers.map(c, c.name)",  # a macro outside the subset
    "size(object.spec.containers) > 0",  # a function and an operator outside it
    "object.spec.containers[0].name == 'a'",  # indexing
    "'a' + 'b' == 'ab'",
])
def test_anything_outside_the_subset_is_refused_not_guessed(expression):
    with pytest.raises(SyntaxError):
        evaluate(expression, object=POD)
