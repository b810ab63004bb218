"""Which input changes make the engine replace a resource instead of updating it (pure).

The offline diff cannot ask the providers, so it carries their rules for every type this program
creates. Paths are input paths in Pulumi's camelCase, without list indexes; a change at a path, or
below it, forces replacement. Helm releases replace on a name or namespace change; custom resources
on a metadata.name or namespace change only; a test checks that every AWS type the stacks create is
listed.
"""

from __future__ import annotations

import re
from typing import Any

# pulumi-kubernetes provider/pkg/provider/diff.go (forceNewProperties; read at commit 94977969d641,
# 2026-07-01): metadata.name and metadata.namespace for every kind, plus these per group/version/kind.
# Secrets and ConfigMaps are replaced on a data change unless the provider's enableSecretMutable /
# enableConfigMapMutable is set (this program sets neither).
_KUBERNETES_METADATA = ("metadata.name", "metadata.namespace")
_LABEL_SELECTOR = ("spec.selector",)
# The volume sources of a PersistentVolume: a PV pointing at other storage is another volume.
_PV_SOURCES = tuple(f"spec.{source}" for source in (
    "awsElasticBlockStore", "azureDisk", "azureFile", "cephfs", "cinder", "csi", "fc", "flexVolume", "flocker",
    "gcePersistentDisk", "glusterfs", "hostPath", "iscsi", "local", "nfs", "photonPersistentDisk",
    "portworxVolume", "quobyte", "rbd", "scaleIO", "storageos", "vsphereVolume"))
KUBERNETES_FORCE_NEW: dict[str, tuple[str, ...]] = {
    "apps/v1:Deployment": _LABEL_SELECTOR,
    "apps/v1:DaemonSet": _LABEL_SELECTOR,
    "apps/v1:StatefulSet": (*_LABEL_SELECTOR, "spec.podManagementPolicy", "spec.revisionHistoryLimit",
                            "spec.serviceName", "spec.volumeClaimTemplates"),
    "batch/v1:Job": (*_LABEL_SELECTOR, "spec.completions", "spec.parallelism", "spec.template"),
    "core/v1:ConfigMap": ("binaryData", "data"),
    "core/v1:Secret": ("type", "stringData", "data"),
    "core/v1:Service": ("spec.clusterIP",),
    # Not the size: a bigger storage request is an in-place update (the CSI driver expands the volume
    # when its StorageClass allows expansion).
    "core/v1:PersistentVolumeClaim": ("spec.accessModes", "spec.selector", "spec.storageClassName",
                                      "spec.volumeName"),
    "core/v1:PersistentVolume": _PV_SOURCES,
    "storage.k8s.io/v1:StorageClass": ("parameters", "provisioner"),
    "rbac.authorization.k8s.io/v1:RoleBinding": ("roleRef",),
    "rbac.authorization.k8s.io/v1:ClusterRoleBinding": ("roleRef",),
}
# pulumi-kubernetes provider/pkg/provider/helm_release.go (Diff: forceNewFields ".name", ".namespace"):
# a release under another name or namespace is a new release, created before the old one is uninstalled.
HELM_RELEASE = "kubernetes:helm.sh/v3:Release"
HELM_RELEASE_FORCE_NEW = ("name", "namespace")

# terraform-provider-aws (which pulumi-aws 7.x wraps): the ForceNew / RequiresReplace arguments of
# each resource's schema. eks/node_group.go, ec2/ec2_launch_template.go, iam/role.go,
# iam/role_policy.go, iam/role_policy_attachment.go, autoscaling/group_tag.go,
# ec2/ec2_placement_group.go, eks/pod_identity_association.go, eks/addon.go; and, read for this table:
# ec2/vpc_security_group.go (0160692), efs/file_system.go (0389f46), efs/mount_target.go (0593466),
# ec2/vpc_security_group_ingress_rule.go (00a3220: security_group_id RequiresReplace, and ModifyPlan
# replaces the rule when its source kind changes, see INGRESS_RULE_SOURCES), fsx/lustre_file_system.go
# (06ee53d: also a storageCapacity decrease, see LUSTRE_CAPACITY).
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
    # Even the description: EC2 cannot change a group's description, so a reworded one is a new group.
    "aws:ec2/securityGroup:SecurityGroup": ("description", "name", "namePrefix", "vpcId"),
    "aws:efs/fileSystem:FileSystem": ("availabilityZoneName", "creationToken", "encrypted", "kmsKeyId",
                                      "performanceMode"),
    # securityGroups is updated in place (ModifyMountTargetSecurityGroups).
    "aws:efs/mountTarget:MountTarget": ("fileSystemId", "ipAddress", "subnetId"),
    "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule": ("securityGroupId",),
    # The same resource shape for egress (vpc_security_group_egress_rule shares the ingress rule's schema).
    "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule": ("securityGroupId",),
    # efs_access_point: everything but tags is ForceNew (terraform-provider-aws internal/service/efs/
    # access_point.go: "Tags only" in its update). A new one has a new ARN and id: the file-system policy
    # and the serving volume's handle follow it.
    "aws:efs/accessPoint:AccessPoint": ("fileSystemId", "posixUser", "rootDirectory"),
    # efs_file_system_policy: file_system_id is ForceNew; the policy document updates in place
    # (PutFileSystemPolicy replaces it whole).
    "aws:efs/fileSystemPolicy:FileSystemPolicy": ("fileSystemId",),
    "aws:fsx/lustreFileSystem:LustreFileSystem": (
        "backupId", "copyTagsToBackups", "deploymentType", "driveCacheType", "exportPath", "fileSystemTypeVersion",
        "importPath", "importedFileChunkSize", "kmsKeyId", "perUnitStorageThroughput", "securityGroupIds",
        "storageType", "subnetIds",
    ),
}
INGRESS_RULE = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
INGRESS_RULE_SOURCES = ("cidrIpv4", "cidrIpv6", "prefixListId", "referencedSecurityGroupId")
LUSTRE = "aws:fsx/lustreFileSystem:LustreFileSystem"

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
    if resource_type == HELM_RELEASE:
        return HELM_RELEASE_FORCE_NEW
    if resource_type.startswith("kubernetes:") and not resource_type.startswith("kubernetes:helm.sh/"):
        token = resource_type.removeprefix("kubernetes:")
        return (*_KUBERNETES_METADATA, *KUBERNETES_FORCE_NEW.get(token, ()))
    return ()


def _conditional_replacements(resource_type: str, old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Replacements a provider decides from both values, not from a changed path alone."""
    if resource_type == INGRESS_RULE:
        kinds = [sorted(k for k in INGRESS_RULE_SOURCES if side.get(k) is not None) for side in (old, new)]
        return sorted(set(kinds[0]) | set(kinds[1])) if kinds[0] != kinds[1] else []
    if resource_type == LUSTRE:
        before, after = old.get("storageCapacity"), new.get("storageCapacity")
        shrinks = isinstance(before, int) and isinstance(after, int) and after < before
        if shrinks or (before != after and new.get("deploymentType", "SCRATCH_1") == "SCRATCH_1"):
            return ["storageCapacity"]
    return []


def replacing_paths(resource_type: str, changed: list[str], replace_on_changes: list[str],
                    old: dict[str, Any] | None = None, new: dict[str, Any] | None = None) -> list[str]:
    """The changed input paths (plain, as `plain_path` gives them) that force a replacement: the
    provider's own rules plus the resource's `replaceOnChanges` option ("*" means any input)."""
    rules = (*force_new_paths(resource_type), *replace_on_changes)
    found = []
    for path in changed:
        if path and ("*" in replace_on_changes or any(_under(path, rule) for rule in rules)):
            found.append(path)
    found += _conditional_replacements(resource_type, old or {}, new or {})
    return sorted(set(found))


def is_ignored(path: str, ignore_changes: list[str]) -> bool:
    """Whether a plain input path is under one of the resource's ignoreChanges paths: the engine resets
    those inputs to their old values before it asks the provider to diff (pulumi/pulumi
    pkg/resource/deploy/step_generator.go, processIgnoreChanges), so they neither update nor replace."""
    return any(_under(path, rule) for rule in ignore_changes if rule)


def rolls_nodes(changed: list[str]) -> list[str]:
    """Node group paths whose in-place update replaces every node under a drain."""
    return sorted({p for p in changed if any(_under(p, rule) for rule in NODE_ROLLING_FIELDS)})


# What applies CustomResourceDefinitions: deleting one deletes every object of its kinds in the
# cluster, other teams' included. CRD charts and manifests Pulumi applies itself, and the Helm
# releases whose charts carry CRDs (KEDA and the AI Gateway CRD chart in templates/, lws in crds/).
CRD_CARRIER_TYPES = (
    "kubernetes:helm.sh/v4:Chart",
    "kubernetes:yaml/v2:ConfigFile",
    "kubernetes:yaml/v2:ConfigGroup",
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
