"""Declare a Kubernetes object from a plain manifest dict built by a pure module.

The pure builders (edge, autoscaling, alerts, dashboards) return whole manifests so they can be
tested without Pulumi; this turns one into a resource of exactly that apiVersion and kind.
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s


def manifest_resource(resource_name: str, manifest: dict[str, Any], opts: pulumi.ResourceOptions) -> pulumi.Resource:
    """A resource for `manifest`: typed for ConfigMaps (whose body is `data`), generic for every
    kind whose body is `spec` (custom resources and built-ins alike)."""
    fields = set(manifest) - {"apiVersion", "kind", "metadata"}
    if manifest["kind"] == "ConfigMap" and manifest["apiVersion"] == "v1" and fields <= {"data"}:
        return k8s.core.v1.ConfigMap(resource_name, metadata=manifest["metadata"], data=manifest.get("data"), opts=opts)
    if not fields <= {"spec"}:
        raise ValueError(f"{manifest['kind']} {resource_name}: unsupported top-level fields {sorted(fields)}")
    return k8s.apiextensions.CustomResource(
        resource_name,
        api_version=manifest["apiVersion"],
        kind=manifest["kind"],
        metadata=manifest["metadata"],
        spec=manifest.get("spec"),
        opts=opts,
    )
