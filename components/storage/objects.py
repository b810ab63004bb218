"""Weights storage facts and manifests: EFS throughput, mount-target placement, the StorageClass (pure).

Facts: kubernetes-sigs/aws-efs-csi-driver 4.4.1 (docs/parameters.md, README) and the EFS user guide
(performance.html, limits.html), summarised in research facts.md section T2.6.
"""

from __future__ import annotations

from typing import Any

from components.platform import check_dns_label

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


def mount_target_subnets(subnets: list[tuple[str, str]]) -> dict[str, str]:
    """AZ -> the first node subnet in it: EFS allows one mount target per AZ per file system, and
    nodes in every AZ of the node group must reach one in their own AZ."""
    chosen: dict[str, str] = {}
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
        "directoryPerms": "750",
        "uid": str(uid),
        "gid": str(gid),
        "basePath": base_path,
        "subPathPattern": "${.PVC.namespace}/${.PVC.name}",
        "ensureUniqueDirectory": "false",
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


# The compile cache's own directory on the weights file system, outside the claims' base path, reached
# only through its access point (components/serving/compile_cache.py).
COMPILE_CACHE_ROOT = "/llm-serving-compile-cache"
COMPILE_CACHE_CLAIM = "compile-cache"
COMPILE_CACHE_CLAIM_GIB = 100  # EFS ignores a claim's size; Kubernetes requires one


def compile_cache_volume(name: str, *, file_system_id: str, access_point_id: str) -> dict[str, Any]:
    """A static PersistentVolume on the compile cache's access point (EFS CSI driver, static provisioning:
    volumeHandle `<file system>::<access point>`), retained, mounted with TLS and IAM like the weights."""
    check_dns_label("name", name)
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": "llm-serving",
                                              "app.kubernetes.io/component": COMPILE_CACHE_CLAIM}},
        "spec": {
            "capacity": {"storage": f"{COMPILE_CACHE_CLAIM_GIB}Gi"},
            "accessModes": ["ReadWriteMany"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "mountOptions": list(MOUNT_OPTIONS),
            "csi": {"driver": CSI_PROVISIONER, "volumeHandle": f"{file_system_id}::{access_point_id}"},
        },
    }


def compile_cache_claim(namespace: str, volume_name: str) -> dict[str, Any]:
    """The serving namespace's claim on that volume, bound by name (no class, no provisioner)."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": COMPILE_CACHE_CLAIM, "namespace": namespace,
                     "labels": {"app.kubernetes.io/part-of": "llm-serving"}},
        "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "", "volumeName": volume_name,
                 "resources": {"requests": {"storage": f"{COMPILE_CACHE_CLAIM_GIB}Gi"}}},
    }


# Actions and condition keys of the EFS file-system policy, as the Service Authorization Reference
# lists them for Amazon EFS (docs.aws.amazon.com/service-authorization/latest/reference/
# list_amazonelasticfilesystem.html: ClientMount, ClientWrite, ClientRootAccess;
# elasticfilesystem:AccessedViaMountTarget) and the IAM global condition keys (aws:SecureTransport,
# aws:PrincipalArn). The reference folder vendors no IAM action list to check them against.
EFS_CLIENT_ACTIONS = ("elasticfilesystem:ClientMount", "elasticfilesystem:ClientWrite",
                      "elasticfilesystem:ClientRootAccess")


def file_system_policy(file_system_arn: str, *, reader_role_arns: list[str], writer_role_arn: str,
                       compile_cache_access_point_arn: str | None = None) -> dict[str, Any]:
    """Who may mount and write the weights (EFS user guide, iam-access-control-nfs-efs).

    With a policy in place EFS authorises every NFS mount against it: an anonymous (non-`iam`) client
    gets nothing. Only the readers (the GPU nodes' role) and the writer (the staging nodes' role) may
    mount, only through a mount target, only over TLS; only the writer may write; nobody gets root, so
    the access point's POSIX identity (uid 2000) is forced on every client.

    With `compile_cache_access_point_arn` the readers may also write, but only through that access point
    (condition key `elasticfilesystem:AccessPointArn`), whose root is the compile cache's directory: the
    compile cache's producer runs on a GPU node, and the weights stay out of its reach.
    """
    if not reader_role_arns or not writer_role_arn:
        raise ValueError("a file-system policy needs reader roles and a writer role")
    through_mount_target = {"Bool": {"elasticfilesystem:AccessedViaMountTarget": "true"}}
    everyone = {"AWS": "*"}
    cache = compile_cache_access_point_arn
    deny_writes = {"ArnNotEquals": {"aws:PrincipalArn": writer_role_arn}}
    if cache is not None:
        # Both must differ for the deny (conditions are ANDed): the staging role anywhere, anyone through the cache.
        deny_writes["StringNotEquals"] = {"elasticfilesystem:AccessPointArn": cache}
    cache_writes = [
        {"Sid": "CompileCacheWrites", "Effect": "Allow", "Principal": {"AWS": sorted(set(reader_role_arns))},
         "Action": "elasticfilesystem:ClientWrite", "Resource": file_system_arn,
         "Condition": {**through_mount_target, "StringEquals": {"elasticfilesystem:AccessPointArn": cache}}},
    ] if cache is not None else []
    return {
        "Version": "2012-10-17",
        "Statement": [
            {"Sid": "DenyWithoutTls", "Effect": "Deny", "Principal": everyone, "Action": "*",
             "Resource": file_system_arn, "Condition": {"Bool": {"aws:SecureTransport": "false"}}},
            {"Sid": "DenyRootAccess", "Effect": "Deny", "Principal": everyone,
             "Action": "elasticfilesystem:ClientRootAccess", "Resource": file_system_arn},
            {"Sid": "DenyWritesExceptStaging", "Effect": "Deny", "Principal": everyone,
             "Action": "elasticfilesystem:ClientWrite", "Resource": file_system_arn, "Condition": deny_writes},
            {"Sid": "MountThroughMountTargets", "Effect": "Allow",
             "Principal": {"AWS": sorted({*reader_role_arns, writer_role_arn})},
             "Action": "elasticfilesystem:ClientMount", "Resource": file_system_arn, "Condition": through_mount_target},
            {"Sid": "StagingWrites", "Effect": "Allow", "Principal": {"AWS": writer_role_arn},
             "Action": "elasticfilesystem:ClientWrite", "Resource": file_system_arn, "Condition": through_mount_target},
            *cache_writes,
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
