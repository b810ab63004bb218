"""Shared helpers for installing official charts and creating namespaces.

Charts are installed as `helm.v3.Release`: a real Helm release (visible to `helm list`, with
hooks and rollback) that the offline render can show with its chart, version, repo and values.
"""

from __future__ import annotations

import importlib.resources
from collections.abc import Mapping, Sequence
from typing import Any, cast

import pulumi
import pulumi_kubernetes as k8s

from . import chart_images
from .pod_security import POD_SECURITY_REASON_ANNOTATION, PodSecurity, pod_security_labels
from .versions import CHARTS, ChartImage

# Charts whose pods pull multi-GB images or wait for GPU nodes to appear can take long to become
# ready; Helm's own default of 300 s turns a slow node launch into a failed `pulumi up`.
HELM_TIMEOUT_SECONDS = 900


def namespace_labels(pod_security: PodSecurity, labels: dict[str, str] | None = None) -> dict[str, str]:
    """The labels a namespace of ours carries (the API server adds `kubernetes.io/metadata.name`)."""
    return {"app.kubernetes.io/part-of": "llm-serving", **pod_security_labels(pod_security.level), **(labels or {})}


def namespace(
    resource_name: str,
    name: str,
    *,
    parent: pulumi.Resource,
    pod_security: PodSecurity,
    labels: dict[str, str] | None = None,
    depends_on: list[pulumi.Resource] | None = None,
) -> k8s.core.v1.Namespace:
    """A namespace of ours, with Pod Security Admission labels (`pod_security_labels`) and, below
    `restricted`, the reason as an annotation the policy pack requires."""
    metadata: k8s.meta.v1.ObjectMetaArgsDict = {"name": name, "labels": namespace_labels(pod_security, labels)}
    if pod_security.level != "restricted":
        metadata["annotations"] = {POD_SECURITY_REASON_ANNOTATION: pod_security.reason}
    return k8s.core.v1.Namespace(
        resource_name, metadata=metadata, opts=pulumi.ResourceOptions(parent=parent, depends_on=depends_on or [])
    )


def helm_release(
    resource_name: str,
    *,
    chart: str,
    version: str,
    release_namespace: pulumi.Input[str],
    values: pulumi.Input[dict[str, Any]],
    parent: pulumi.Resource,
    depends_on: list[pulumi.Resource] | None = None,
    crds_only: bool = False,
    protect: bool = False,
    image_digests: Mapping[str, str] | None = None,
    images: Sequence[ChartImage] | None = None,
) -> k8s.helm.v3.Release:
    """A pinned chart from its official repository; the release is named after the chart.

    `crds_only`: a chart that holds nothing but CRDs in its templates (which `helm uninstall` would
    delete): the release is retained on delete like every CRD (`crd_options`), protected when asked.

    `image_digests` (`repository:tag` -> `sha256:...`, a stack's chartImageDigests): each of the chart's images
    with a digest there is pulled by it, through the values key versions.py names for it; `images` narrows the
    chart's images to those this release runs (default: all those versions.py lists for `version`)."""
    repository = CHARTS[chart].repository
    oci = repository.startswith("oci://")
    running = tuple(images) if images is not None else chart_images.runs(CHARTS[chart], version)
    pinned = chart_images.image_values(running, image_digests or {})
    if isinstance(values, Mapping):
        # A mapping stays one: its other keys stay known at preview even where a value is an unknown Output.
        values = chart_images.merged(values, pinned)
    elif pinned:
        values = pulumi.Output.from_input(cast(Any, values)).apply(lambda v: chart_images.merged(v, pinned))
    return k8s.helm.v3.Release(
        resource_name,
        name=chart,
        # An OCI chart is addressed by its full reference; a classic one by name plus repository.
        chart=repository if oci else chart,
        version=version,
        repository_opts=None if oci else {"repo": repository},
        namespace=release_namespace,
        values=values,
        # Roll back on failure instead of leaving a half-installed release behind.
        atomic=True,
        timeout=HELM_TIMEOUT_SECONDS,
        # Never skip the await: `pulumi up` must fail when the add-on does not come up.
        skip_await=False,
        opts=crd_options(parent=parent, protect=protect, depends_on=depends_on)
        if crds_only
        else pulumi.ResourceOptions(parent=parent, depends_on=depends_on or []),
    )


def crd_options(
    *, parent: pulumi.Resource, protect: bool, depends_on: list[pulumi.Resource] | None = None
) -> pulumi.ResourceOptions:
    """Options for whatever applies CRDs: deleting a CRD deletes every object of its kind in the
    cluster, other teams' included, so neither `pulumi destroy` nor a rename or replacement may delete
    one. retain_on_delete on a component propagates to every child custom resource (Pulumi docs,
    resource option retainOnDelete), and so does protect (prod: destroy stops until
    `pulumi state unprotect`). Removing them on purpose is docs/operations.md#destroying."""
    return pulumi.ResourceOptions(parent=parent, retain_on_delete=True, protect=protect, depends_on=depends_on or [])


# What applied these CRDs before they were read from the package: a ConfigFile naming a repository path.
# The alias keeps its state (and its children's) instead of deleting and recreating the CRDs: the engine
# aliases each child under its parent's former URN (pulumi/pulumi pkg/resource/deploy/step_generator.go
# inheritedChildAlias, v3.259.0) and both components name children `<component>:<name>`
# (pulumi/pulumi-kubernetes provider/pkg/provider/yaml/v2/yaml.go register, v4.32.0).
FORMER_CRD_MANIFEST_TYPE = "kubernetes:yaml/v2:ConfigFile"


def crd_manifest_text(file_name: str) -> str:
    """A CRD manifest shipped in this package (platform/crds/, package data)."""
    return (importlib.resources.files(__package__) / "crds" / file_name).read_text(encoding="utf-8")


def crd_manifests(resource_name: str, file_name: str, *, parent: pulumi.Resource,
                  protect: bool) -> k8s.yaml.v2.ConfigGroup:
    """CRDs no chart publishes, applied from the manifest's content: the bytes reviewed are the bytes the
    provider applies, wherever the library is installed (a `file` path would differ per machine), and a
    CRD change shows in the preview's diff of `yaml`. Retained and protected like every CRD carrier."""
    return k8s.yaml.v2.ConfigGroup(
        resource_name,
        yaml=crd_manifest_text(file_name),
        opts=pulumi.ResourceOptions.merge(crd_options(parent=parent, protect=protect),
                                          pulumi.ResourceOptions(aliases=[pulumi.Alias(type_=FORMER_CRD_MANIFEST_TYPE)])),
    )


def crd_chart(
    resource_name: str,
    *,
    chart: str,
    version: str,
    values: dict[str, Any],
    parent: pulumi.Resource,
    protect: bool = False,
) -> k8s.helm.v4.Chart:
    """CRDs from a CRD-only chart, rendered and applied by Pulumi (server-side apply) rather than kept
    in a Helm release: Helm never upgrades CRDs a chart ships in `crds/`, so a chart bump would leave
    them stale, and large CRD sets outgrow the 1 MiB Secret a release is stored in (the projects
    document `helm template ... | kubectl apply --server-side` for the same reason: envoyproxy/gateway
    install-helm.md, tigera/docs#2636). A version bump updates every CRD in place."""
    repository = CHARTS[chart].repository
    oci = repository.startswith("oci://")
    return k8s.helm.v4.Chart(
        resource_name,
        chart=repository if oci else chart,
        version=version,
        repository_opts=None if oci else {"repo": repository},
        values=values,
        opts=crd_options(parent=parent, protect=protect),
    )
