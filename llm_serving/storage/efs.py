"""WeightsFileSystem: an encrypted EFS file system with Elastic throughput for the model weights.

Mount targets in every AZ of the GPU node group, a security group admitting NFS only from the GPU and
staging nodes' own groups, the EFS CSI driver add-on with its IAM through Pod Identity (behind the admission
guard that admits its controller's pods only with credentials, llm_serving/platform/pod_identity.py), a Retain
StorageClass the staging Jobs write through, per model a read-only access point, volume and claim
the serving pods mount, and per model with a shared compile cache an access point, volume and claim of
its own (objects.py, above COMPILE_CACHE_ROOT: what each layer enforces). The file system is never deleted
by `pulumi destroy`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from llm_serving.platform import ManifestFields, addon_settings, pod_identity_guard, pod_identity_trust

from . import objects, policy_size


@dataclass(frozen=True)
class ServingMount:
    """One model's read-only way in: an access point on the directory its staging claim writes."""

    key: str  # the model's name: names the child resources
    namespace: str
    staging_claim_name: str  # the StorageClass claim the staging Job writes (its directory)
    claim_name: str  # the serving pods' claim
    volume_name: str  # the static PersistentVolume (cluster-scoped)


@dataclass(frozen=True)
class CompileCacheMount:
    """One model's compile cache: an access point rooted at its own directory, a volume and a claim that its
    producer mounts read-write and its serving pods read-only."""

    key: str  # the model's name: names the child resources and the directory
    namespace: str
    claim_name: str
    volume_name: str  # the static PersistentVolume (cluster-scoped)
    # How long deleting the claim may wait: the API server holds it (pvc-protection) until the last pod that
    # mounts it is gone, a serving pod draining its streams included (the model's workloads' delete timeout).
    delete_timeout_seconds: int


@dataclass(frozen=True)
class WeightsFileSystemArgs:
    cluster_name: str
    vpc_id: pulumi.Input[str]
    # (label, security group id) of every node group that may open NFS to the mount targets: the GPU
    # nodes' own group and the staging nodes' (never the cluster security group, which every node and
    # the control plane carry, unless a dev stack names no staging group).
    nfs_client_security_groups: tuple[tuple[str, pulumi.Input[str]], ...]
    subnets: tuple[tuple[pulumi.Input[str], str], ...]  # (subnet id, availability zone) of the GPU node group
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
    writer_role_arn: pulumi.Input[str] | None = None
    serving_mounts: tuple[ServingMount, ...] = ()
    # The serving namespace's name as an output of the Namespace, so the claims wait for it.
    serving_namespace: pulumi.Input[str] | None = None
    # Per model with a shared compile cache: its own access point, volume and claim; with a file-system policy
    # the GPU nodes may write through those access points only (objects.file_system_policy).
    compile_cache_mounts: tuple[CompileCacheMount, ...] = ()


class WeightsFileSystem(pulumi.ComponentResource):
    storage_class_name: pulumi.Output[str]
    file_system_id: pulumi.Output[str]
    serving_claim_names: dict[str, pulumi.Output[str]]
    """Per model (ServingMount.key): the read-only claim its serving pods mount."""

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
        rules = [
            aws.vpc.SecurityGroupIngressRule(
                # New names, not the old `-nfs-from-nodes` (the cluster security group) edited in place:
                # the old rule is deleted only at the end of the update, after the GPU nodes carrying the
                # new group have replaced those that do not (docs/operations.md).
                f"{name}-nfs-from-{label}",
                security_group_id=group.id,
                referenced_security_group_id=source,
                ip_protocol="tcp",
                from_port=objects.NFS_PORT,
                to_port=objects.NFS_PORT,
                description=f"NFS from the {label}",
                opts=child,
            )
            for label, source in args.nfs_client_security_groups
        ]
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
                opts=pulumi.ResourceOptions(parent=self, delete_before_replace=True, depends_on=rules),
            )
            for zone, subnet_id in objects.mount_target_subnets(list(args.subnets)).items()
        ]
        driver: list[pulumi.Resource] = []
        if args.install_csi_driver:
            partition = aws.get_partition_output(opts=pulumi.InvokeOptions(parent=self)).partition
            # The add-on creates its own association (AddonPodIdentityAssociations) and EKS then installs its
            # controller: nothing documented orders the two, and the controller's pods are admitted by the same
            # webhook, so a controller pod admitted first would never get credentials and could never create an
            # access point. The same admission guard as every other association, but here before the role and the
            # add-on, not after the association as pod_identity_role orders it: the add-on's one CreateAddon call makes
            # both the association and the pods, so nothing comes between them where the guard could go. A CreateAddon
            # that fails therefore leaves the guard refusing the controller's pods until an up succeeds or the binding
            # is deleted (docs/runbooks.md, PodIdentityPodsRefused).
            guard = pod_identity_guard(f"{name}-csi", namespace="kube-system",
                                       service_account=objects.CSI_CONTROLLER_SERVICE_ACCOUNT, parent=self)
            role = aws.iam.Role(
                f"{name}-csi-role",
                # EKS installs the add-on's controller in kube-system.
                assume_role_policy=pod_identity_trust(args.cluster_name, "kube-system",
                                                      objects.CSI_CONTROLLER_SERVICE_ACCOUNT, self),
                description=f"EFS CSI driver controller of {args.cluster_name}",
                tags=args.tags,
                opts=pulumi.ResourceOptions(parent=self, depends_on=guard),
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
                opts=pulumi.ResourceOptions(parent=self, depends_on=[attachment, *guard]),
            ))
        # The serving pods' own access points: same directory as the staging claim, but a separate
        # identity in the file-system policy, which lets the GPU nodes mount only through these.
        access_points = {
            mount.key: aws.efs.AccessPoint(
                f"{name}-serving-{mount.key}",
                file_system_id=file_system.id,
                **objects.serving_access_point(objects.claim_directory(mount.namespace, mount.staging_claim_name),
                                               uid=args.owner_uid, gid=args.owner_gid),
                tags={**args.tags, "Name": f"{args.cluster_name}-{mount.key}-serving"},
                opts=child,
            )
            for mount in args.serving_mounts
        }
        # One per model: a producer whose pod mounts one model's claim reaches only that model's directory.
        cache_points = {
            mount.key: aws.efs.AccessPoint(
                f"{name}-compile-cache-{mount.key}",
                file_system_id=file_system.id,
                # Every client is the pods' own identity here too, and the directory is created owned by it.
                **objects.serving_access_point(objects.compile_cache_directory(mount.key),
                                               uid=args.owner_uid, gid=args.owner_gid),
                tags={**args.tags, "Name": f"{args.cluster_name}-{mount.key}-compile-cache"},
                opts=child,
            )
            for mount in args.compile_cache_mounts
        }
        guards: list[pulumi.Resource] = []
        if args.writer_role_arn is not None:
            # Before any claim binds: a pod must never mount the weights while they are unguarded.
            # EFS evaluates the policy when a client connects (iam-access-control-nfs-efs): mounts made
            # under the previous policy keep their access until they reconnect.
            arns = [point.arn for point in access_points.values()]
            cache_arns = [point.arn for point in cache_points.values()]
            readers = list(args.reader_role_arns)
            guards.append(aws.efs.FileSystemPolicy(
                f"{name}-policy",
                file_system_id=file_system.id,
                # Compact: EFS counts every character against the policy's 20,000 (policy_size.py).
                policy=pulumi.Output.all(file_system.arn, args.writer_role_arn, *readers, *arns, *cache_arns).apply(
                    lambda values: policy_size.file_system_policy_json(objects.file_system_policy(
                        values[0], writer_role_arn=values[1], reader_role_arns=list(values[2:2 + len(readers)]),
                        serving_access_point_arns=list(values[2 + len(readers):2 + len(readers) + len(arns)]),
                        compile_cache_access_point_arns=list(values[2 + len(readers) + len(arns):])))),
                opts=child,
            ))
        else:
            pulumi.log.warn(
                "weights file system without a file-system policy: any node that reaches a mount target may "
                "rewrite the weights; set weightsStorage.efs.stagingNodeRoleArn", resource=self)
        parameters = file_system.id.apply(
            lambda fs: objects.storage_class_parameters(
                file_system_id=fs, uid=args.owner_uid, gid=args.owner_gid, base_path=objects.WEIGHTS_BASE_PATH
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
        ready = [*targets, *driver, *guards]
        self.serving_claim_names = {
            mount.key: self._serving_claim(name, mount, file_system.id, access_points[mount.key].id, args, ready)
            for mount in args.serving_mounts
        }
        self.storage_class_name = storage_class.metadata.name
        self.file_system_id = file_system.id
        self.compile_cache_claims: dict[str, pulumi.Resource] = {
            mount.key: self._compile_cache_claim(name, mount, file_system.id, cache_points[mount.key].id, args, ready)
            for mount in args.compile_cache_mounts
        }
        self.register_outputs({"storage_class_name": self.storage_class_name, "file_system_id": self.file_system_id,
                               "serving_claim_names": self.serving_claim_names})

    def _serving_claim(self, name: str, mount: ServingMount, file_system_id: pulumi.Output[str],
                       access_point_id: pulumi.Output[str], args: WeightsFileSystemArgs,
                       ready: list[pulumi.Resource]) -> pulumi.Output[str]:
        """The static read-only volume through the model's access point, and the claim bound to it.
        New names beside the staging claim: switching the Deployments to them creates both first and
        deletes nothing (docs/operations.md, "The serving pods' own access point")."""
        handle = pulumi.Output.all(file_system_id, access_point_id).apply(lambda ids: f"{ids[0]}::{ids[1]}")
        capacity = objects.EFS_CLAIM_PLACEHOLDER_GIB
        volume_spec = handle.apply(lambda h: objects.serving_volume(
            mount.volume_name, volume_handle=h, namespace=mount.namespace, claim_name=mount.claim_name,
            capacity_gib=capacity)["spec"])
        volume_manifest = objects.serving_volume(mount.volume_name, volume_handle="", namespace=mount.namespace,
                                                 claim_name=mount.claim_name, capacity_gib=capacity)
        # After the driver, every zone's mount target and the policy: the volume is mountable, and only
        # as the policy says.
        # Retained and protected in prod like every weights volume (policy pack): they hold no data, but
        # a mistaken delete would leave new serving pods without a volume while the finalizer waits.
        volume = k8s.core.v1.PersistentVolume(
            f"{name}-serving-{mount.key}-volume",
            metadata=volume_manifest["metadata"],
            spec=volume_spec,
            opts=pulumi.ResourceOptions(parent=self, depends_on=ready, retain_on_delete=True, protect=args.protect),
        )
        claim_manifest = objects.serving_claim(mount.claim_name, namespace=mount.namespace,
                                               volume_name=mount.volume_name, capacity_gib=capacity)
        claim = k8s.core.v1.PersistentVolumeClaim(
            f"{name}-serving-{mount.key}-claim",
            metadata=cast(ManifestFields, {
                **claim_manifest["metadata"],
                "namespace": args.serving_namespace if args.serving_namespace is not None else mount.namespace}),
            spec=claim_manifest["spec"],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[volume, *ready], retain_on_delete=True,
                                        protect=args.protect),
        )
        return claim.metadata.name

    def _compile_cache_claim(self, name: str, mount: CompileCacheMount, file_system_id: pulumi.Output[str],
                             access_point_id: pulumi.Output[str], args: WeightsFileSystemArgs,
                             ready: list[pulumi.Resource]) -> pulumi.Resource:
        """The static volume through one model's cache access point and the claim bound to it, in the serving
        namespace: the model's producer mounts it read-write, its serving pods read-only."""
        def manifest(file_system: str, access_point: str) -> dict:
            return objects.compile_cache_volume(mount.volume_name, file_system_id=file_system,
                                                access_point_id=access_point, namespace=mount.namespace,
                                                claim_name=mount.claim_name)

        spec = pulumi.Output.all(file_system_id, access_point_id).apply(lambda ids: manifest(ids[0], ids[1])["spec"])
        # Mounted only once the policy that scopes the GPU nodes' writes is in force, every zone's mount target
        # answers and the driver runs. Neither retained nor protected: they hold no data (a static volume with
        # reclaim Retain, on an access point whose deletion deletes no data; the directory stays on the retained
        # file system), and a retained pair left in the cluster would fail the create of the next one of the same
        # names, when the cache is turned on again or the model added back, with AlreadyExists (pulumi-kubernetes
        # creates client-side and never adopts an existing object since pulumi/pulumi-kubernetes#4278, issue
        # #2926). Deleting the claim waits for the pods that mount it (pvc-protection), up to the model's drain.
        persistent_volume = k8s.core.v1.PersistentVolume(
            f"{name}-compile-cache-{mount.key}-volume",
            metadata=manifest("", "")["metadata"], spec=spec,
            opts=pulumi.ResourceOptions(parent=self, depends_on=ready),
        )
        claim_manifest = objects.compile_cache_claim(mount.claim_name, namespace=mount.namespace,
                                                     volume_name=mount.volume_name)
        return k8s.core.v1.PersistentVolumeClaim(
            f"{name}-compile-cache-{mount.key}-claim",
            metadata=cast(ManifestFields, {
                **claim_manifest["metadata"],
                "namespace": args.serving_namespace if args.serving_namespace is not None else mount.namespace}),
            spec=claim_manifest["spec"],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[persistent_volume, *ready],
                                        custom_timeouts=pulumi.CustomTimeouts(delete=f"{mount.delete_timeout_seconds}s")),
        )
