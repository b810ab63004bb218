"""A small evaluator of one identity policy, for asking what a role the stack writes lets a request do.

IAM's evaluation logic for a single identity-based policy (IAM user guide, reference_policies_evaluation-logic.html
and reference_policies_evaluation-logic_policy-eval-denyallow.html): an explicit Deny whose statement matches the
request wins; otherwise an Allow that matches allows; otherwise the request is implicitly denied. A statement matches
when the action is one of its Actions, the resource one of its Resources (the `*` and `?` wildcards,
reference_policies_elements_resource.html) and every condition holds.

Conditions (reference_policies_elements_condition_logic_multiple-context-keys-or-values.html and
reference_policies_elements_condition_operators.html): every operator of a block and every key under an operator must
hold (AND); the values listed for one key are alternatives (OR). `Null` with "true" holds when the key is absent from
the request, with "false" when it is present. Any other operator on a key absent from the request does not hold,
except a negated one (StringNotEquals, StringNotLike), which does. The operators this project's policies use are
the only ones known here; any other raises, so a policy outside the subset cannot pass silently.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from typing import Any

NEGATED = {"StringNotEquals", "StringNotLike"}


def _listed(value: Any) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def _like(value: str, pattern: str) -> bool:
    # IAM's wildcards are `*` and `?` only: escape `[` so fnmatch reads it as itself.
    return fnmatch.fnmatchcase(value, pattern.replace("[", "[[]"))


def _holds(operator: str, key: str, wanted: list[str], context: Mapping[str, str]) -> bool:
    present = key in context
    if operator == "Null":
        (flag,) = wanted
        return (not present) if flag == "true" else present
    if not present:
        return operator in NEGATED
    value = context[key]
    match operator:
        case "StringEquals":
            return value in wanted
        case "StringNotEquals":
            return value not in wanted
        case "StringLike":
            return any(_like(value, w) for w in wanted)
        case "StringNotLike":
            return not any(_like(value, w) for w in wanted)
        case "Bool":
            return value.lower() in [w.lower() for w in wanted]
    raise ValueError(f"condition operator {operator} is outside this evaluator's subset")


def _matches(statement: Mapping[str, Any], action: str, resource: str, context: Mapping[str, str]) -> bool:
    if not any(_like(action, a) for a in _listed(statement["Action"])):
        return False
    if not any(_like(resource, r) for r in _listed(statement["Resource"])):
        return False
    return all(_holds(operator, key, _listed(wanted), context)
               for operator, keys in statement.get("Condition", {}).items()
               for key, wanted in keys.items())


def allowed(policy: Mapping[str, Any], action: str, resource: str, context: Mapping[str, str] | None = None) -> bool:
    """Whether `policy` allows `action` on `resource` for a request carrying the condition keys `context`."""
    request = dict(context or {})
    statements = policy["Statement"]
    if any(s["Effect"] == "Deny" and _matches(s, action, resource, request) for s in statements):
        return False
    return any(s["Effect"] == "Allow" and _matches(s, action, resource, request) for s in statements)
