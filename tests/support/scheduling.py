"""A small model of what the scheduler and Helm do with tolerations, selectors and affinity.

Enough to prove where a chart's pods can land: Helm merges maps and replaces lists; a pod fits a
node when it tolerates every NoSchedule taint and matches nodeSelector and required affinity.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any


def helm_merge(defaults: Any, overrides: Any) -> Any:
    """Helm's coalescing of user values over chart defaults: maps key by key, the rest replaced."""
    if isinstance(defaults, dict) and isinstance(overrides, dict):
        merged = copy.deepcopy(defaults)
        for key, value in overrides.items():
            merged[key] = helm_merge(defaults[key], value) if key in defaults else copy.deepcopy(value)
        return merged
    return copy.deepcopy(overrides)


@dataclass(frozen=True)
class Node:
    name: str
    labels: dict[str, str]
    taints: list[dict[str, str]] = field(default_factory=list)


def _tolerates(toleration: dict[str, str], taint: dict[str, str]) -> bool:
    if toleration.get("effect") and toleration["effect"] != taint["effect"]:
        return False
    if not toleration.get("key"):
        return toleration.get("operator") == "Exists"
    if toleration["key"] != taint["key"]:
        return False
    if toleration.get("operator", "Equal") == "Exists":
        return True
    return toleration.get("value", "") == taint.get("value", "")


def _expression_matches(expr: dict[str, Any], labels: dict[str, str]) -> bool:
    operator, key = expr["operator"], expr["key"]
    if operator == "In":
        return labels.get(key) in expr["values"]
    if operator == "NotIn":
        return labels.get(key) not in expr["values"]
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    raise ValueError(f"operator {operator} not modelled")


def fits(node: Node, pod: dict[str, Any]) -> bool:
    """`pod` holds nodeSelector, affinity and tolerations as in a pod spec."""
    for taint in node.taints:
        if taint["effect"] in ("NoSchedule", "NoExecute") and not any(
            _tolerates(t, taint) for t in pod.get("tolerations") or []
        ):
            return False
    for key, value in (pod.get("nodeSelector") or {}).items():
        if node.labels.get(key) != value:
            return False
    required = (
        ((pod.get("affinity") or {}).get("nodeAffinity") or {})
        .get("requiredDuringSchedulingIgnoredDuringExecution")
    )
    if required:
        terms = required.get("nodeSelectorTerms") or []
        if not any(
            all(_expression_matches(e, node.labels) for e in term.get("matchExpressions") or [])
            for term in terms
        ):
            return False
    return True
