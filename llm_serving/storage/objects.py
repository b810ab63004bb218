"""Weights storage facts and manifests: EFS throughput, mount-target placement, the StorageClass (pure).

Facts: kubernetes-sigs/aws-efs-csi-driver 4.4.1 (docs/parameters.md, README) and the EFS user guide
(https://docs.aws.amazon.com/efs/latest/ug/performance.html, limits.html).
"""

from __future__ import annotations

from typing import Any, TypeVar

from llm_serving.platform import check_dns_label

# Planning figure for one pod reading its weights from EFS with Elastic throughput. The guide gives
# 1,500 MiBps per NFS client for Elastic through the CSI driver, but only with <= 1 ms latency and
# parallel streams, and 500 MiBps per client in every other case; a cold start is planned on the
# lower documented figure. Per file system (us-east-1, Elastic) reads reach 60 GiBps, so replicas
# starting together do not share a lower limit.
EFS_READ_MIB_PER_SECOND = 500.0
EFS_PER_CLIENT_MAX_MIB_PER_SECOND = 1500.0
EFS_PER_FILE_SYSTEM_READ_GIB_PER_SECOND = 60

NFS_PORT = 2049
CSI_ADDON = "aws-efs-csi-driver"
CSI_PROVISIONER = "efs.csi.aws.com"
# The add-on's controller service account, which Pod Identity binds (awsdocs efs-csi.adoc).
CSI_CONTROLLER_SERVICE_ACCOUNT = "efs-csi-controller-sa"
CSI_MANAGED_POLICY = "service-role/AmazonEFSCSIDriverPolicy"
# EFS ignores a claim's capacity (the driver's README: a required placeholder), so every EFS claim
# asks for the same size: a smaller checkpoint never shrinks a claim, which Kubernetes refuses and
# Pulumi would turn into a replacement of the (protected) claim.
EFS_CLAIM_PLACEHOLDER_GIB = 1024


SubnetId = TypeVar("SubnetId")  # a plain id, or one the stack creates (pulumi.Input[str])


def mount_target_subnets(subnets: list[tuple[SubnetId, str]]) -> dict[str, SubnetId]:
    """AZ -> the first node subnet in it: EFS allows one mount target per AZ per file system, and
    nodes in every AZ of the node group must reach one in their own AZ."""
    chosen: dict[str, SubnetId] = {}
    for subnet_id, zone in subnets:
        chosen.setdefault(zone, subnet_id)
    return dict(sorted(chosen.items()))


def storage_class_parameters(*, file_system_id: str, uid: int, gid: int, base_path: str) -> dict[str, str]:
    """Dynamic provisioning through access points (the driver's only mode, `efs-ap`).

    The access point's POSIX identity (uid/gid) owns and is forced on every file, so the non-root
    vLLM and staging pods can read and write. Each claim maps to `<basePath>/<namespace>/<claim>`
    without a unique suffix (`ensureUniqueDirectory: false`): a claim deleted with its namespace and
    created again finds the same directory, and the weights, again.
    """
    return {
        "provisioningMode": "efs-ap",
        "fileSystemId": file_system_id,
        "directoryPerms": DIRECTORY_PERMS,
        "uid": str(uid),
        "gid": str(gid),
        "basePath": base_path,
        "subPathPattern": SUB_PATH_PATTERN,
        "ensureUniqueDirectory": "false",
    }


# Where dynamic provisioning roots each claim's access point: `<basePath>/<namespace>/<claim>` (the
# driver's controller joins "/", basePath and the interpolated subPathPattern; aws-efs-csi-driver
# v3.4.1 pkg/driver/controller.go, CreateVolume).
WEIGHTS_BASE_PATH = "/llm-serving"
SUB_PATH_PATTERN = "${.PVC.namespace}/${.PVC.name}"
DIRECTORY_PERMS = "750"


def claim_directory(namespace: str, claim_name: str) -> str:
    """The directory the StorageClass's access point for this claim is rooted at (and the staging Job
    writes into): the serving access point of the same model is rooted there too."""
    check_dns_label("namespace", namespace)
    return f"{WEIGHTS_BASE_PATH}/{namespace}/{claim_name}"


def serving_access_point(directory: str, *, uid: int, gid: int) -> dict[str, Any]:
    """An access point's inputs, a serving one's or a compile cache's: the POSIX identity and creation
    settings the driver gives the staging claim's access point (so whichever mounts first creates a shared
    directory the same way), and nothing that lets a client pick another identity or path."""
    return {
        "posix_user": {"uid": uid, "gid": gid},
        "root_directory": {"path": directory, "creation_info": {
            "owner_uid": uid, "owner_gid": gid, "permissions": DIRECTORY_PERMS}},
    }


def serving_volume(name: str, *, volume_handle: str, namespace: str, claim_name: str,
                   capacity_gib: int) -> dict[str, Any]:
    """A static, read-only PersistentVolume through one serving access point.

    `volumeHandle: <fs>::<fsap>` is the driver's format for an access point (pkg/driver/node.go
    parseVolumeId; examples/kubernetes/efs/access_points). Not v3's `efs:<fs>::<fsap>`: a cluster's own
    v2 driver (installCsiDriver: false) accepts only the form without the type. NodePublishVolume adds
    `accesspoint=` and `tls`, and `ro` for a read-only volume. `iam` signs the mount with the node's
    role so the file-system policy can tell it from the staging role. The claimRef reserves the volume
    for its one claim: no other claim in the cluster can bind it. Retain: deleting the claim never
    touches the access point or the weights (the driver provisioned neither).
    """
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": "llm-serving",
                                              "app.kubernetes.io/component": "weights"}},
        "spec": {
            "capacity": {"storage": f"{capacity_gib}Gi"},
            "accessModes": ["ReadOnlyMany"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "mountOptions": ["iam"],
            "claimRef": {"namespace": namespace, "name": claim_name},
            "csi": {"driver": CSI_PROVISIONER, "volumeHandle": volume_handle, "readOnly": True},
        },
    }


def serving_claim(name: str, *, namespace: str, volume_name: str, capacity_gib: int) -> dict[str, Any]:
    """The serving pods' claim, bound to its own static volume by name (no StorageClass, so nothing
    is provisioned), ReadOnlyMany."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": namespace,
                     "labels": {"app.kubernetes.io/part-of": "llm-serving", "app.kubernetes.io/component": "weights"}},
        "spec": {
            "accessModes": ["ReadOnlyMany"],
            "storageClassName": "",
            "volumeName": volume_name,
            "resources": {"requests": {"storage": f"{capacity_gib}Gi"}},
        },
    }


# efs-utils mount options the driver passes through (EFS user guide, mounting-IAM-option): `tls`
# encrypts NFS in transit, `iam` signs the mount with the node's credentials so the file-system policy
# can tell who mounts. Without `iam` a client is anonymous, which the policy below refuses.
MOUNT_OPTIONS = ("tls", "iam")


def storage_class(name: str, parameters: dict[str, Any]) -> dict[str, Any]:
    """The weights StorageClass: Retain, so deleting a claim never deletes its access point's data."""
    check_dns_label("name", name)
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": "llm-serving"}},
        "provisioner": CSI_PROVISIONER,
        "reclaimPolicy": "Retain",
        "volumeBindingMode": "Immediate",
        "mountOptions": list(MOUNT_OPTIONS),
        "parameters": parameters,
    }


# The compile caches' directory on the weights file system, outside the claims' base path: one directory per
# model, `<COMPILE_CACHE_ROOT>/<model>`, each reached only through that model's own access point, volume and
# claim (llm_serving/serving/compile_cache.py). What each layer enforces, and what it does not:
# - the access point's root directory: a client that mounts through it sees that directory as its root and
#   nothing above it (EFS user guide, enforce-root-directory-access-point.html; API reference, RootDirectory: "NFS
#   clients using the access point can only access data in the access point's RootDirectory and its
#   subdirectories"), so a producer whose pod mounts model A's claim cannot reach model B's directory (nor the
#   weights). The path may be 100 characters and four levels deep: this one is two, at most 90 (a model's name is
#   a DNS label, <= 63);
# - the access point's POSIX user (2000, the pods' own; enforce-identity-access-points.html):
#   every client's operations run as it, so the non-root pods can write; the same on every model's access point,
#   since the root directory already separates them;
# - the serving pods' mount: the claim `readOnly` in their pod spec. The kubelet passes it to NodePublishVolume
#   as `readonly` (kubernetes pkg/kubelet/volumemanager/populator/desired_state_of_world_populator.go,
#   getPVSpec(pvName, pvcSource.ReadOnly, ...)) and the driver then mounts with `ro` (aws-efs-csi-driver v3.4.1
#   pkg/driver/node.go, NodePublishVolume): a serving container, restricted (no CAP_SYS_ADMIN), cannot remount it;
# - the file-system policy (file_system_policy): only the GPU nodes' role may write, and only through these access
#   points; the staging nodes' role may not write through them, nor mount without an access point. It cannot tell
#   a producer from a serving pod: EFS authorizes an NFS client by the IAM identity that signs the mount (the `iam`
#   option, iam-access-control-nfs-efs.html), which with the EFS CSI driver is the CSI node pod's identity
#   (aws-efs-csi-driver docs/parameters.md: "iam: Use the CSI Node Pod's IAM identity"), here the node's role,
#   shared by every GPU node (the add-on gives only its controller a Pod Identity, efs.py; the node component has
#   none to give, kubernetes-sigs/aws-efs-csi-driver issue #1759). The driver does not mount with the consuming
#   pod's role (issue #1439, closed without it; aws/containers-roadmap issue #1003, open) and drops `awscredsuri`
#   (node.go). So
#   root on any GPU node can mount any model's cache access point and write it, and anyone who may create a pod
#   in the serving namespace can mount a cache claim read-write: Kubernetes RBAC, not EFS, guards that.
COMPILE_CACHE_ROOT = "/llm-serving-compile-cache"
COMPILE_CACHE_COMPONENT = "compile-cache"
COMPILE_CACHE_CLAIM_GIB = 100  # EFS ignores a claim's size; Kubernetes requires one


def compile_cache_directory(model_name: str) -> str:
    """The directory one model's cache access point is rooted at."""
    check_dns_label("model name", model_name)
    return f"{COMPILE_CACHE_ROOT}/{model_name}"


def compile_cache_claim_name(model_name: str) -> str:
    """The model's cache claim in the serving namespace, which its producer and serving pods mount."""
    check_dns_label("model name", model_name)
    return f"{model_name}-compile-cache"


def compile_cache_volume(name: str, *, file_system_id: str, access_point_id: str, namespace: str,
                         claim_name: str) -> dict[str, Any]:
    """A static PersistentVolume on one model's cache access point (EFS CSI driver, static provisioning:
    volumeHandle `<file system>::<access point>`), retained, mounted with TLS and IAM like the weights, and
    reserved for that model's claim (claimRef: no other claim in the cluster can bind it). ReadWriteMany:
    the producer mounts it read-write; the serving pods mount the same claim read-only (compile_cache.py)."""
    check_dns_label("namespace", namespace)
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": "llm-serving",
                                              "app.kubernetes.io/component": COMPILE_CACHE_COMPONENT}},
        "spec": {
            "capacity": {"storage": f"{COMPILE_CACHE_CLAIM_GIB}Gi"},
            "accessModes": ["ReadWriteMany"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "mountOptions": list(MOUNT_OPTIONS),
            "claimRef": {"namespace": namespace, "name": claim_name},
            "csi": {"driver": CSI_PROVISIONER, "volumeHandle": f"{file_system_id}::{access_point_id}"},
        },
    }


def compile_cache_claim(name: str, *, namespace: str, volume_name: str) -> dict[str, Any]:
    """One model's cache claim, bound to its own volume by name (no class, no provisioner)."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": namespace,
                     "labels": {"app.kubernetes.io/part-of": "llm-serving",
                                "app.kubernetes.io/component": COMPILE_CACHE_COMPONENT}},
        "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "", "volumeName": volume_name,
                 "resources": {"requests": {"storage": f"{COMPILE_CACHE_CLAIM_GIB}Gi"}}},
    }


# Actions and condition keys of the EFS file-system policy. Actions: the Service Authorization Reference
# for Amazon EFS (docs.aws.amazon.com/service-authorization/latest/reference/
# list_amazonelasticfilesystem.html: ClientMount, ClientWrite, ClientRootAccess). Condition keys: only
# the four the EFS user guide lists for NFS clients (iam-access-control-nfs-efs.html, "EFS condition
# keys for clients": aws:SecureTransport, aws:SourceIp, elasticfilesystem:AccessPointArn,
# elasticfilesystem:AccessedViaMountTarget; "no other condition keys are enforced"). So principals are
# named in each statement's Principal, never matched through aws:PrincipalArn. The reference folder
# vendors no IAM action list to check them against.
EFS_CLIENT_ACTIONS = ("elasticfilesystem:ClientMount", "elasticfilesystem:ClientWrite",
                      "elasticfilesystem:ClientRootAccess")
EFS_CLIENT_CONDITION_KEYS = ("aws:SecureTransport", "aws:SourceIp", "elasticfilesystem:AccessPointArn",
                             "elasticfilesystem:AccessedViaMountTarget")


def file_system_policy(file_system_arn: str, *, reader_role_arns: list[str], writer_role_arn: str,
                       serving_access_point_arns: list[str],
                       compile_cache_access_point_arns: list[str] | None = None) -> dict[str, Any]:
    """Who may mount and write the weights and the compile caches (EFS user guide, iam-access-control-nfs-efs).

    With a policy in place EFS authorises every NFS connection against it: an anonymous (non-`iam`)
    client gets nothing. The readers (the GPU nodes' role) may mount only through the serving access
    points and never write; the writer (the staging nodes' role) may mount and write, through a mount
    target. Everyone needs TLS; nobody gets root, so an access point's POSIX identity (uid 2000) is
    forced on every client. A reader mounting without an access point has no AccessPointArn in its
    request, and a negated condition on a missing key is true (IAM user guide,
    reference_policies_elements_condition_operators.html): it is denied.

    With `compile_cache_access_point_arns` (one per model, each rooted at that model's cache directory) the
    readers may also mount and write through those access points: a model's producer Job runs on a GPU node,
    as the node's role, and the weights stay out of its reach. Only that identity writes a cache: the writer
    (staging) role is denied writes through the cache access points, and denied any mount without an access
    point (`Null` on AccessPointArn: its own claims all mount through the access points the CSI driver
    provisions, storage_class_parameters), which would otherwise reach the caches' directories from the file
    system's root. What the policy cannot do (every GPU node shares the role, serving or producing): the comment
    above COMPILE_CACHE_ROOT.
    """
    if not reader_role_arns or not writer_role_arn or not serving_access_point_arns:
        raise ValueError("a file-system policy needs reader roles, a writer role and the serving access points")
    if writer_role_arn in reader_role_arns:
        raise ValueError("the writer role must not also be a reader role: the readers' denies would stop it writing")
    through_mount_target = {"Bool": {"elasticfilesystem:AccessedViaMountTarget": "true"}}
    everyone = {"AWS": "*"}
    readers = {"AWS": sorted(reader_role_arns)}
    writer = {"AWS": writer_role_arn}
    access_points = sorted(serving_access_point_arns)
    caches = sorted(compile_cache_access_point_arns or [])
    mountable = sorted([*access_points, *caches])
    # Without a cache the readers never write; with some, only through their access points.
    not_a_cache = {"Condition": {"StringNotEquals": {"elasticfilesystem:AccessPointArn": caches}}} if caches else {}
    cache_statements = [
        {"Sid": "CompileCacheWrites", "Effect": "Allow", "Principal": readers,
         "Action": "elasticfilesystem:ClientWrite", "Resource": file_system_arn,
         "Condition": {**through_mount_target, "StringEquals": {"elasticfilesystem:AccessPointArn": caches}}},
        {"Sid": "DenyStagingCompileCacheWrites", "Effect": "Deny", "Principal": writer,
         "Action": "elasticfilesystem:ClientWrite", "Resource": file_system_arn,
         "Condition": {"StringEquals": {"elasticfilesystem:AccessPointArn": caches}}},
        {"Sid": "DenyStagingWithoutAnAccessPoint", "Effect": "Deny", "Principal": writer,
         "Action": ["elasticfilesystem:ClientMount", "elasticfilesystem:ClientWrite"], "Resource": file_system_arn,
         "Condition": {"Null": {"elasticfilesystem:AccessPointArn": "true"}}},
    ] if caches else []
    return {
        "Version": "2012-10-17",
        "Statement": [
            {"Sid": "DenyWithoutTls", "Effect": "Deny", "Principal": everyone, "Action": "*",
             "Resource": file_system_arn, "Condition": {"Bool": {"aws:SecureTransport": "false"}}},
            {"Sid": "DenyRootAccess", "Effect": "Deny", "Principal": everyone,
             "Action": "elasticfilesystem:ClientRootAccess", "Resource": file_system_arn},
            # Explicit denies for the serving identity: an identity policy that allowed more (an EFS
            # client policy attached to the node role) cannot widen it.
            {"Sid": "DenyServingWrites", "Effect": "Deny", "Principal": readers,
             "Action": "elasticfilesystem:ClientWrite", "Resource": file_system_arn, **not_a_cache},
            {"Sid": "DenyServingOutsideItsAccessPoints", "Effect": "Deny", "Principal": readers,
             "Action": "elasticfilesystem:ClientMount", "Resource": file_system_arn,
             "Condition": {"StringNotEquals": {"elasticfilesystem:AccessPointArn": mountable}}},
            {"Sid": "ServingMountsReadOnlyThroughItsAccessPoints", "Effect": "Allow", "Principal": readers,
             "Action": "elasticfilesystem:ClientMount", "Resource": file_system_arn,
             "Condition": {**through_mount_target,
                           "StringEquals": {"elasticfilesystem:AccessPointArn": mountable}}},
            *cache_statements,
            # No anonymous principal and no other writer: a mount without the `iam` option, or by any
            # other role, matches no Allow here.
            {"Sid": "StagingMountsAndWrites", "Effect": "Allow", "Principal": writer,
             "Action": ["elasticfilesystem:ClientMount", "elasticfilesystem:ClientWrite"],
             "Resource": file_system_arn, "Condition": through_mount_target},
        ],
    }


# FSx for Lustre (PERSISTENT_2 SSD; FSx Lustre user guide ssd-storage.html, performance, and the API
# reference CreateFileSystem): capacity 1200 GiB, 2400 GiB or a multiple of 2400 GiB; per-unit
# throughput 125, 250, 500 or 1000 MB/s per TiB. Reads not served from the file servers' cache run at
# the disk figure, storage TiB x per-unit throughput: the cold-start planning figure.
LUSTRE_PORTS = ((988, 988), (1018, 1023))  # LNET; creation fails without them (cannot-create-fs.html)
LUSTRE_THROUGHPUTS = (125, 250, 500, 1000)
FSX_CSI_ADDON = "aws-fsx-csi-driver"
FSX_CSI_DRIVER = "fsx.csi.aws.com"


def lustre_capacity_problem(capacity_gib: int) -> str | None:
    if capacity_gib in (1200, 2400) or (capacity_gib > 2400 and capacity_gib % 2400 == 0):
        return None
    return "PERSISTENT_2 capacity is 1200 GiB, 2400 GiB or a multiple of 2400 GiB"


def lustre_read_mib_per_second(capacity_gib: int, per_unit_mb_per_second_per_tib: int) -> float:
    """Disk throughput of the whole file system in MiB/s (MB/s per TiB x TiB)."""
    return round(capacity_gib / 1024 * per_unit_mb_per_second_per_tib * 1e6 / 2**20, 1)


def lustre_volume(
    name: str, *, file_system_id: str, dns_name: str, mount_name: str, capacity_gib: int
) -> dict[str, Any]:
    """A static PersistentVolume for the file system (aws-fsx-csi-driver examples/static_provisioning):
    Retain, so deleting the claim never touches the file system, and `flock` for tools that lock."""
    check_dns_label("name", name)
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": "llm-serving"}},
        "spec": {
            "capacity": {"storage": f"{capacity_gib}Gi"},
            "accessModes": ["ReadWriteMany"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "mountOptions": ["flock"],
            "csi": {"driver": FSX_CSI_DRIVER, "volumeHandle": file_system_id,
                    "volumeAttributes": {"dnsname": dns_name, "mountname": mount_name}},
        },
    }
