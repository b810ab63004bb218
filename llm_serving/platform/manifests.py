"""Declare a Kubernetes object from a plain manifest dict built by a pure module.

The pure builders (edge, autoscaling, alerts, dashboards) return whole manifests so they can be
tested without Pulumi; this turns one into a resource of exactly that apiVersion and kind.
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s

# A manifest's metadata or body in the Kubernetes API's own camelCase, as the pure builders write it: the
# provider takes it as it is, but pulumi_kubernetes types each input as an `...ArgsDict` with snake_case keys,
# which such a dict is not. A typed resource gets it as `cast(ManifestFields, fields)`, which the type checker
# leaves alone (the tests validate the rendered objects against the Kubernetes schemas instead).
ManifestFields = Any


def manifest_resource(resource_name: str, manifest: dict[str, Any], opts: pulumi.ResourceOptions) -> pulumi.Resource:
    """A resource for `manifest`: typed for ConfigMaps (whose body is `data`), generic for every
    kind whose body is `spec` (custom resources and built-ins alike)."""
    fields = set(manifest) - {"apiVersion", "kind", "metadata"}
    if manifest["kind"] == "ConfigMap" and manifest["apiVersion"] == "v1" and fields <= {"data"}:
        return k8s.core.v1.ConfigMap(resource_name, metadata=manifest["metadata"], data=manifest.get("data"), opts=opts)
    if manifest["apiVersion"] == "rbac.authorization.k8s.io/v1":
        return _rbac_resource(resource_name, manifest, opts)
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


def _rbac_resource(resource_name: str, manifest: dict[str, Any], opts: pulumi.ResourceOptions) -> pulumi.Resource:
    """RBAC kinds keep their body in `rules` or `roleRef` and `subjects`, not `spec`."""
    kind, metadata = manifest["kind"], manifest["metadata"]
    if kind in ("Role", "ClusterRole"):
        cls = k8s.rbac.v1.Role if kind == "Role" else k8s.rbac.v1.ClusterRole
        return cls(resource_name, metadata=metadata, rules=manifest.get("rules"), opts=opts)
    if kind in ("RoleBinding", "ClusterRoleBinding"):
        binding = k8s.rbac.v1.RoleBinding if kind == "RoleBinding" else k8s.rbac.v1.ClusterRoleBinding
        return binding(resource_name, metadata=metadata, role_ref=manifest["roleRef"],
                       subjects=manifest.get("subjects"), opts=opts)
    raise ValueError(f"{kind} {resource_name}: unsupported RBAC kind")
