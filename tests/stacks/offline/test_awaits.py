"""Tests for stacks/offline/awaits.py: how long one resource can hold `pulumi up`, as the providers decide it."""

from __future__ import annotations

from typing import Any

import pytest

from stacks.offline import awaits


def kubernetes(kind: str, annotations: dict[str, str] | None = None, timeouts: dict[str, str] | None = None,
               api: str = "gateway.networking.k8s.io/v1") -> dict[str, Any]:
    return {"type": f"kubernetes:{api}:{kind}", "name": kind.lower(),
            "inputs": {"metadata": {"name": kind.lower(), **({"annotations": annotations} if annotations else {})}},
            "options": {"customTimeouts": timeouts or {"create": "", "update": "", "delete": ""}}}


@pytest.mark.parametrize("resource,seconds", [
    # A custom resource with `pulumi.com/waitFor` is awaited like a built-in kind: 10 minutes by default
    # (pulumi-kubernetes provider/pkg/await/await.go Creation/Update).
    (kubernetes("HTTPRoute", {"pulumi.com/waitFor": "condition=Accepted"}), 600),
    # ... or the `pulumi.com/timeoutSeconds` annotation (metadata/overrides.go TimeoutDuration) ...
    (kubernetes("Gateway", {"pulumi.com/waitFor": "condition=Programmed", "pulumi.com/timeoutSeconds": "900"}), 900),
    # ... and the resource's custom timeouts before either.
    (kubernetes("Gateway", {"pulumi.com/waitFor": "condition=Programmed", "pulumi.com/timeoutSeconds": "900"},
                {"create": "1200s", "update": "1200s", "delete": ""}), 1200),
    (kubernetes("Gateway", {"pulumi.com/waitFor": "condition=Programmed", "pulumi.com/skipAwait": "true"}), 0),
    (kubernetes("InferencePool", api="inference.networking.k8s.io/v1"), 0),  # not awaited without the annotation
    (kubernetes("Deployment", api="apps/v1"), 600),
], ids=["waitFor", "timeoutSeconds", "customTimeouts", "skipAwait", "plain-custom-resource", "deployment"])
def test_await_seconds_counts_every_kubernetes_object_the_provider_awaits(resource: dict[str, Any],
                                                                         seconds: int) -> None:
    assert awaits.await_seconds(resource) == seconds


def test_an_awaited_route_after_an_awaited_picker_adds_up_in_the_chain() -> None:
    picker = kubernetes("Deployment", api="apps/v1")
    route = kubernetes("HTTPRoute", {"pulumi.com/waitFor": "condition=Accepted"})
    route["options"]["dependsOn"] = ["kubernetes:apps/v1:Deployment::deployment"]
    assert awaits.longest_await([picker, route]) == (1200, ["kubernetes:apps/v1:Deployment::deployment",
                                                            "kubernetes:gateway.networking.k8s.io/v1:HTTPRoute::httproute"])
