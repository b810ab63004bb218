"""How long `pulumi up` can wait, from a render: the longest chain of awaits through dependsOn (pure).

A CI job that times out while the engine still waits leaves the stack locked with pending
operations, so the deploy job's timeout must exceed this (tests/test_workflows.py asserts it).
Each resource waits at most its custom timeout, else its provider's default:
- helm.sh/v3 Release: its own `timeout` input (seconds);
- aws:eks/nodeGroup:NodeGroup: 60 minutes (terraform-provider-aws aws_eks_node_group, create timeout);
- Kubernetes kinds pulumi-kubernetes awaits (Deployment, StatefulSet, DaemonSet, Job, Pod, Service,
  Ingress), and any Kubernetes object annotated `pulumi.com/waitFor` (the Gateway, the routes, the
  LeaderWorkerSet): the `pulumi.com/timeoutSeconds` annotation, else 10 minutes (pulumi/pulumi-kubernetes
  provider/pkg/await/await.go `Creation`/`Update`, metadata/overrides.go `TimeoutDuration`), unless annotated
  `pulumi.com/skipAwait: "true"`.
Everything else is treated as immediate.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

NODE_GROUP_CREATE_SECONDS = 60 * 60
KUBERNETES_AWAIT_SECONDS = 10 * 60
AWAITED_KINDS = ("Deployment", "StatefulSet", "DaemonSet", "Job", "Pod", "Service", "Ingress")


def _seconds(duration: str) -> int | None:
    """Pulumi custom timeouts as the render records them ("13080s", "1h", "30m")."""
    match = re.fullmatch(r"(\d+)([smh])", duration or "")
    if not match:
        return None
    return int(match[1]) * {"s": 1, "m": 60, "h": 3600}[match[2]]


def await_seconds(resource: Mapping[str, Any]) -> int:
    """The longest one resource can keep `pulumi up` waiting."""
    timeouts = (resource.get("options") or {}).get("customTimeouts") or {}
    custom = [s for s in (_seconds(timeouts.get("create", "")), _seconds(timeouts.get("update", ""))) if s]
    if custom:
        return max(custom)
    kind = resource["type"].rsplit(":", 1)[-1]
    inputs = resource.get("inputs") or {}
    if resource["type"] == "kubernetes:helm.sh/v3:Release":
        return int(inputs.get("timeout") or 300)  # Helm's own default
    if resource["type"] == "aws:eks/nodeGroup:NodeGroup":
        return NODE_GROUP_CREATE_SECONDS
    annotations = (inputs.get("metadata") or {}).get("annotations") or {}
    awaited = kind in AWAITED_KINDS or bool(annotations.get("pulumi.com/waitFor"))
    if resource["type"].startswith("kubernetes:") and awaited:
        if annotations.get("pulumi.com/skipAwait") == "true":
            return 0
        timeout = annotations.get("pulumi.com/timeoutSeconds", "")
        return int(timeout) if timeout.isdigit() else KUBERNETES_AWAIT_SECONDS
    return 0


def longest_await(resources: list[Mapping[str, Any]]) -> tuple[int, list[str]]:
    """(seconds, the chain of "type::name" that waits longest), following each resource's dependsOn."""
    by_key = {f"{r['type']}::{r['name']}": r for r in resources}
    memo: dict[str, tuple[int, list[str]]] = {}

    def chain(key: str) -> tuple[int, list[str]]:
        if key not in memo:
            deps = [d for d in (by_key[key].get("options") or {}).get("dependsOn", []) if d in by_key]
            before = max((chain(d) for d in deps), default=(0, []), key=lambda c: c[0])
            memo[key] = (before[0] + await_seconds(by_key[key]), [*before[1], key])
        return memo[key]

    return max((chain(key) for key in sorted(by_key)), default=(0, []), key=lambda c: c[0])
