"""Declare a Kubernetes object from a plain manifest dict built by a pure module.

The pure builders (edge, autoscaling, alerts) return whole manifests so they can be tested without
Pulumi; this turns one into a resource of exactly that apiVersion and kind.
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s

# Top-level fields other than apiVersion/kind/metadata that our builders emit.
_BODY_FIELDS = ("spec", "data", "rules", "subjects", "roleRef")


def manifest_resource(resource_name: str, manifest: dict[str, Any], opts: pulumi.ResourceOptions) -> pulumi.Resource:
    """A resource for `manifest`, of its own group/version/kind (built-in kinds included)."""
    unknown = set(manifest) - {"apiVersion", "kind", "metadata", *_BODY_FIELDS}
    if unknown:
        raise ValueError(f"{manifest['kind']} {resource_name}: unsupported top-level fields {sorted(unknown)}")
    body = {key: manifest[key] for key in _BODY_FIELDS if key in manifest}
    return k8s.apiextensions.CustomResource(
        resource_name,
        api_version=manifest["apiVersion"],
        kind=manifest["kind"],
        metadata=manifest["metadata"],
        opts=opts,
        **body,
    )
