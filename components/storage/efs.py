"""WeightsFileSystem: an encrypted EFS file system with Elastic throughput for the model weights.

Mount targets in every AZ of the GPU node group, a security group admitting NFS from the nodes,
the EFS CSI driver add-on with its IAM through Pod Identity, and a Retain StorageClass whose access
points run as the pods' own UID. The file system is never deleted by `pulumi destroy`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from components.platform import addon_settings, pod_identity_trust

from . import objects


@dataclass(frozen=True)
class WeightsFileSystemArgs:
    cluster_name: str
    vpc_id: pulumi.Input[str]
    node_security_group_id: pulumi.Input[str]  # the cluster security group, which the GPU nodes carry
    subnets: tuple[tuple[str, str], ...]  # (subnet id, availability zone) of the GPU node group
    storage_class_name: str
    owner_uid: int
    owner_gid: int
    protect: bool  # prod: `pulumi destroy` and replacements stop at the file system
    install_csi_driver: bool
    kubernetes_version: str  # the cluster's minor: the CSI driver add-on's version is pinned for it
    tags: dict[str, str]
    # The file-system policy's principals (mounts are signed with the node's role, `iam` option): the
    # GPU nodes' role may only mount, the staging nodes' role may also write. None: no policy (dev).
    reader_role_arns: tuple[pulumi.Input[str], ...] = ()
    writer_role_arn: str | None = None
    # A shared compile cache: its own access point and a static volume on it; with a file-system policy the
    # GPU nodes may write through that access point only (objects.file_system_policy).
    compile_cache: bool = False


class WeightsFileSystem(pulumi.ComponentResource):
    storage_class_name: pulumi.Output[str]
    file_system_id: pulumi.Output[str]

    def __init__(self, name: str, args: WeightsFileSystemArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("llmserving:storage:WeightsFileSystem", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        file_system = aws.efs.FileSystem(
            f"{name}-file-system",
            encrypted=True,
            performance_mode="generalPurpose",
            # Elastic: reads scale with demand (60 GiBps per file system in us-east-1); Bursting
            # would fall to 50 KiBps per GiB stored once credits run out, hours per cold start.
            throughput_mode="elastic",
            tags={**args.tags, "Name": f"{args.cluster_name}-{name}"},
            opts=pulumi.ResourceOptions(parent=self, protect=args.protect, retain_on_delete=True),
        )
        group = aws.ec2.SecurityGroup(
            f"{name}-nfs",
            vpc_id=args.vpc_id,
            description=f"NFS from the GPU nodes of {args.cluster_name} to the weights file system",
            tags=args.tags,
            opts=child,
        )
        aws.vpc.SecurityGroupIngressRule(
            f"{name}-nfs-from-nodes",
            security_group_id=group.id,
            referenced_security_group_id=args.node_security_group_id,
            ip_protocol="tcp",
            from_port=objects.NFS_PORT,
            to_port=objects.NFS_PORT,
            description="NFS from nodes carrying the cluster security group",
            opts=child,
        )
        targets = [
            aws.efs.MountTarget(
                f"{name}-mount-{zone}",
                file_system_id=file_system.id,
                subnet_id=subnet_id,
                security_groups=[group.id],
                # EFS allows one mount target per AZ per file system, and a new subnet in a zone replaces
                # the zone's target: created first, the new one fails with MountTargetConflict part-way
                # through an update that also replaces the node group. Deleted first, the zone has no
                # target for a minute or two; mounts in it stall until the new target's DNS answers
                # (docs/operations.md, "Changing the GPU node group's subnets").
                opts=pulumi.ResourceOptions(parent=self, delete_before_replace=True),
            )
            for zone, subnet_id in objects.mount_target_subnets(list(args.subnets)).items()
        ]
        driver: list[pulumi.Resource] = []
        if args.install_csi_driver:
            partition = aws.get_partition_output(opts=pulumi.InvokeOptions(parent=self)).partition
            role = aws.iam.Role(
                f"{name}-csi-role",
                assume_role_policy=pod_identity_trust(args.cluster_name, self),
                description=f"EFS CSI driver controller of {args.cluster_name}",
                tags=args.tags,
                opts=child,
            )
            attachment = aws.iam.RolePolicyAttachment(
                f"{name}-csi-policy",
                role=role.name,
                policy_arn=pulumi.Output.concat("arn:", partition, ":iam::aws:policy/", objects.CSI_MANAGED_POLICY),
                opts=child,
            )
            driver.append(aws.eks.Addon(
                f"{name}-csi-driver",
                cluster_name=args.cluster_name,
                **addon_settings(objects.CSI_ADDON, args.kubernetes_version),
                pod_identity_associations=[{
                    "role_arn": role.arn, "service_account": objects.CSI_CONTROLLER_SERVICE_ACCOUNT}],
                tags=args.tags,
                opts=pulumi.ResourceOptions(parent=self, depends_on=[attachment]),
            ))
        cache_point: aws.efs.AccessPoint | None = None
        if args.compile_cache:
            cache_point = aws.efs.AccessPoint(
                f"{name}-compile-cache",
                file_system_id=file_system.id,
                # Every client is the pods' own identity here too, and the directory is created owned by it.
                posix_user={"uid": args.owner_uid, "gid": args.owner_gid},
                root_directory={"path": objects.COMPILE_CACHE_ROOT, "creation_info": {
                    "owner_uid": args.owner_uid, "owner_gid": args.owner_gid, "permissions": "0750"}},
                tags={**args.tags, "Name": f"{args.cluster_name}-{name}-compile-cache"},
                opts=child,
            )
        guards: list[pulumi.Resource] = []
        if args.writer_role_arn is not None:
            # Before any claim binds: a pod must never mount the weights while they are unguarded.
            guards.append(aws.efs.FileSystemPolicy(
                f"{name}-policy",
                file_system_id=file_system.id,
                policy=pulumi.Output.all(file_system.arn, cache_point.arn if cache_point else "",
                                         *args.reader_role_arns).apply(
                    lambda values: json.dumps(objects.file_system_policy(
                        values[0], reader_role_arns=list(values[2:]), writer_role_arn=args.writer_role_arn,
                        compile_cache_access_point_arn=values[1] or None))),
                opts=child,
            ))
        else:
            pulumi.log.warn(
                "weights file system without a file-system policy: any node that reaches a mount target may "
                "rewrite the weights; set weightsStorage.efs.stagingNodeRoleArn", resource=self)
        parameters = file_system.id.apply(
            lambda fs: objects.storage_class_parameters(
                file_system_id=fs, uid=args.owner_uid, gid=args.owner_gid, base_path="/llm-serving"
            )
        )
        manifest = objects.storage_class(args.storage_class_name, {})
        storage_class = k8s.storage.v1.StorageClass(
            f"{name}-storage-class",
            metadata=manifest["metadata"],
            provisioner=manifest["provisioner"],
            reclaim_policy=manifest["reclaimPolicy"],
            volume_binding_mode=manifest["volumeBindingMode"],
            mount_options=manifest["mountOptions"],
            parameters=parameters,
            # Claims bind only once the driver runs, the file system can be mounted in every zone and
            # its policy is in force.
            opts=pulumi.ResourceOptions(parent=self, depends_on=[*targets, *driver, *guards]),
        )
        self.storage_class_name = storage_class.metadata.name
        self.file_system_id = file_system.id
        self.compile_cache_volume_name: pulumi.Output[str] | None = None
        if cache_point is not None:
            volume = pulumi.Output.all(file_system.id, cache_point.id).apply(
                lambda ids: objects.compile_cache_volume(f"{args.storage_class_name}-compile-cache",
                                                         file_system_id=ids[0], access_point_id=ids[1]))
            persistent_volume = k8s.core.v1.PersistentVolume(
                f"{name}-compile-cache-volume",
                metadata=volume["metadata"], spec=volume["spec"],
                # Mounted only once the policy that scopes the GPU nodes' writes is in force.
                opts=pulumi.ResourceOptions(parent=self, depends_on=[*targets, *driver, *guards],
                                            retain_on_delete=True),
            )
            self.compile_cache_volume_name = persistent_volume.metadata.name
        self.register_outputs({"storage_class_name": self.storage_class_name, "file_system_id": self.file_system_id})
