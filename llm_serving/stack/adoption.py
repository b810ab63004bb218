"""`adoptRetainedObjects`: the first `up` after a `pulumi destroy` adopts the claims and volumes the destroy left.

A retained object the stack names (retainOnDelete) outlives a destroy; created again by a later `up`, it fails with
AlreadyExists (pulumi-kubernetes >= 4.29 creates client-side, without upsert). With the key set, ServingStack puts a
transformation on its children that gives each such claim and volume Pulumi's `import` option with its Kubernetes
id, so the engine reads and adopts the object instead of creating it.
"""

from __future__ import annotations

from typing import Any

import pulumi

# The retained objects the stack names that a destroy leaves (claims and volumes). Charts and ConfigGroups (the CRD
# carriers) are components: their children cannot take an import id.
ADOPTABLE_TYPES = ("kubernetes:core/v1:PersistentVolumeClaim", "kubernetes:core/v1:PersistentVolume")


def adopt_retained(serving_namespace: str) -> pulumi.ResourceTransformation:
    """`adoptRetainedObjects`: each retained claim or volume takes Pulumi's `import` option with its Kubernetes id
    (`<namespace>/<name>`, or `<name>` for a cluster-scoped volume; pulumi-kubernetes' import id), so the engine reads
    and adopts the object a destroy left instead of creating it. A claim whose namespace is an output (the serving
    namespace the stack creates, named so the claim waits for it) is in `serving_namespace`."""

    def field(value: Any, key: str) -> Any:
        return value.get(key) if isinstance(value, dict) else getattr(value, key, None)

    def transformation(args: pulumi.ResourceTransformationArgs) -> pulumi.ResourceTransformationResult | None:
        if args.type_ not in ADOPTABLE_TYPES or not args.opts.retain_on_delete:
            return None
        metadata = args.props.get("metadata")
        name, namespace = field(metadata, "name"), field(metadata, "namespace")
        if namespace is not None and not isinstance(namespace, str):
            namespace = serving_namespace
        if not isinstance(name, str):
            raise ValueError(f"adoptRetainedObjects: {args.name} has no plain name to import it by")
        object_id = f"{namespace}/{name}" if namespace else name
        return pulumi.ResourceTransformationResult(
            args.props, pulumi.ResourceOptions.merge(args.opts, pulumi.ResourceOptions(import_=object_id)))

    return transformation
