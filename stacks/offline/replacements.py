"""Which input changes make the engine replace a resource instead of updating it (pure).

The offline diff cannot ask the providers, so it carries their rules for every type this program
creates. Paths are input paths in Pulumi's camelCase, without list indexes; a change at a path, or
below it, forces replacement. Types missing here (Helm releases, custom resources) replace only
on a metadata.name or namespace change, or never.
"""

from __future__ import annotations

import re

# pulumi-kubernetes provider/pkg/provider/diff.go (forceNewProperties): metadata.name and
# metadata.namespace for every kind, plus these per group/version/kind.
_KUBERNETES_METADATA = ("metadata.name", "metadata.namespace")
_LABEL_SELECTOR = ("spec.selector",)
KUBERNETES_FORCE_NEW: dict[str, tuple[str, ...]] = {
    "apps/v1:Deployment": _LABEL_SELECTOR,
    "apps/v1:DaemonSet": _LABEL_SELECTOR,
    "apps/v1:StatefulSet": (*_LABEL_SELECTOR, "spec.podManagementPolicy", "spec.revisionHistoryLimit",
                            "spec.serviceName", "spec.volumeClaimTemplates"),
    "batch/v1:Job": (*_LABEL_SELECTOR, "spec.completions", "spec.parallelism", "spec.template"),
    "core/v1:ConfigMap": ("binaryData", "data"),
    "core/v1:Secret": ("type", "stringData", "data"),
    "core/v1:Service": ("spec.clusterIP",),
    # The whole spec, storage requests included: a bigger claim is a new claim through Pulumi.
    "core/v1:PersistentVolumeClaim": ("spec",),
    "storage.k8s.io/v1:StorageClass": ("parameters", "provisioner"),
    "rbac.authorization.k8s.io/v1:RoleBinding": ("roleRef",),
    "rbac.authorization.k8s.io/v1:ClusterRoleBinding": ("roleRef",),
}

# terraform-provider-aws (which pulumi-aws 7.x wraps): the ForceNew / RequiresReplace arguments of
# each resource's schema. eks/node_group.go, ec2/ec2_launch_template.go, iam/role.go,
# iam/role_policy.go, iam/role_policy_attachment.go, autoscaling/group_tag.go,
# ec2/ec2_placement_group.go, eks/pod_identity_association.go, eks/addon.go.
AWS_FORCE_NEW: dict[str, tuple[str, ...]] = {
    "aws:eks/nodeGroup:NodeGroup": (
        "amiType", "capacityType", "clusterName", "diskSize", "instanceTypes", "nodeGroupName",
        "nodeGroupNamePrefix", "nodeRoleArn", "subnetIds", "launchTemplate.id", "launchTemplate.name",
        "remoteAccess",
    ),
    # Any other change is a new template version, which rolls the node groups that use it.
    "aws:ec2/launchTemplate:LaunchTemplate": ("name", "namePrefix"),
    "aws:iam/role:Role": ("name", "namePrefix", "path"),
    "aws:iam/rolePolicy:RolePolicy": ("name", "namePrefix", "role"),
    "aws:iam/rolePolicyAttachment:RolePolicyAttachment": ("role", "policyArn"),
    "aws:autoscaling/tag:Tag": ("autoscalingGroupName", "tag.key"),
    "aws:ec2/placementGroup:PlacementGroup": ("name", "strategy", "partitionCount", "spreadLevel"),
    "aws:eks/podIdentityAssociation:PodIdentityAssociation": ("clusterName", "namespace", "serviceAccount"),
    "aws:eks/addon:Addon": ("addonName", "clusterName", "namespaceConfig"),
}

# Node group inputs whose in-place update makes EKS replace every node, draining each under the
# PodDisruptionBudgets (UpdateNodegroupVersion; awsdocs managed-node-update-behavior).
NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
NODE_ROLLING_FIELDS = ("version", "releaseVersion", "launchTemplate.version")

_INDEX = re.compile(r"\[[^\]]*\]")


def plain_path(path: str) -> str:
    """`inputs.spec.template.spec.containers[vllm].args[3]` -> `spec.template.spec.containers.args`."""
    text = _INDEX.sub("", path)
    return text.removeprefix("inputs.") if text != "inputs" else ""


def _under(path: str, rule: str) -> bool:
    return path == rule or path.startswith(rule + ".")


def force_new_paths(resource_type: str) -> tuple[str, ...]:
    """The input paths whose change replaces a resource of this Pulumi type."""
    if resource_type in AWS_FORCE_NEW:
        return AWS_FORCE_NEW[resource_type]
    if resource_type.startswith("kubernetes:") and not resource_type.startswith("kubernetes:helm.sh/"):
        token = resource_type.removeprefix("kubernetes:")
        return (*_KUBERNETES_METADATA, *KUBERNETES_FORCE_NEW.get(token, ()))
    return ()


def replacing_paths(resource_type: str, changed: list[str], replace_on_changes: list[str]) -> list[str]:
    """The changed input paths (plain, as `plain_path` gives them) that force a replacement: the
    provider's own rules plus the resource's `replaceOnChanges` option ("*" means any input)."""
    rules = (*force_new_paths(resource_type), *replace_on_changes)
    found = []
    for path in changed:
        if path and ("*" in replace_on_changes or any(_under(path, rule) for rule in rules)):
            found.append(path)
    return sorted(set(found))


def rolls_nodes(changed: list[str]) -> list[str]:
    """Node group paths whose in-place update replaces every node under a drain."""
    return sorted({p for p in changed if any(_under(p, rule) for rule in NODE_ROLLING_FIELDS)})


# What applies CustomResourceDefinitions: deleting one deletes every object of its kinds in the
# cluster, other teams' included. CRD charts and manifests Pulumi applies itself, and the Helm
# releases whose charts carry CRDs (KEDA and the AI Gateway CRD chart in templates/, lws in crds/).
CRD_CARRIER_TYPES = (
    "kubernetes:helm.sh/v4:Chart",
    "kubernetes:yaml/v2:ConfigFile",
    "kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition",
)
CRD_CARRIER_CHARTS = ("keda", "ai-gateway-crds-helm", "lws")


def applies_crds(resource: dict) -> bool:
    """Whether a rendered resource creates CRDs (a CRD chart or manifest, or a release that ships them)."""
    if resource["type"] in CRD_CARRIER_TYPES:
        return True
    if resource["type"] == "kubernetes:helm.sh/v3:Release":
        chart = str((resource.get("inputs") or {}).get("chart", ""))
        return chart.rsplit("/", 1)[-1] in CRD_CARRIER_CHARTS
    return False
