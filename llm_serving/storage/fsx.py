"""WeightsLustre: an FSx for Lustre (PERSISTENT_2) file system for the weights, for the fastest cold starts.

One file system in the node group's first subnet, a security group admitting Lustre's LNET ports from
the nodes and from itself, the `aws-fsx-csi-driver` add-on, and a static PersistentVolume with one
ReadWriteMany claim that every model's weights share (each in its own revision directory). Static
provisioning makes no AWS API call, so the driver needs no IAM role. Never deleted by `pulumi destroy`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from llm_serving.platform import ManifestFields, addon_settings

from . import objects


@dataclass(frozen=True)
class WeightsLustreArgs:
    cluster_name: str
    vpc_id: pulumi.Input[str]
    node_security_group_id: pulumi.Input[str]
    subnet_id: pulumi.Input[str]  # the node group's first subnet: a Lustre file system lives in one subnet
    capacity_gib: int
    per_unit_throughput: int  # MB/s per TiB
    namespace: pulumi.Input[str]  # where the shared claim lives (the serving namespace)
    volume_name: str  # the cluster-scoped PersistentVolume
    claim_name: str
    protect: bool
    install_csi_driver: bool
    kubernetes_version: str  # the cluster's minor: the CSI driver add-on's version is pinned for it
    tags: dict[str, str]


class WeightsLustre(pulumi.ComponentResource):
    claim_name: pulumi.Output[str]

    def __init__(self, name: str, args: WeightsLustreArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("llmserving:storage:WeightsLustre", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        group = aws.ec2.SecurityGroup(
            f"{name}-lnet",
            vpc_id=args.vpc_id,
            description=f"Lustre LNET between the GPU nodes of {args.cluster_name} and the weights file system",
            tags=args.tags,
            opts=child,
        )
        rules: list[pulumi.Resource] = []
        for source, referenced in (("nodes", args.node_security_group_id), ("self", group.id)):
            for low, high in objects.LUSTRE_PORTS:
                rules.append(aws.vpc.SecurityGroupIngressRule(
                    f"{name}-lnet-{source}-{low}",
                    security_group_id=group.id,
                    referenced_security_group_id=referenced,
                    ip_protocol="tcp",
                    from_port=low,
                    to_port=high,
                    description=f"Lustre LNET {low}-{high} from {source}",
                    opts=child,
                ))
                # The provider creates security groups without AWS's default allow-all egress, and Lustre
                # servers open connections back to clients and to each other on the same LNET ports
                # (FSx for Lustre user guide, limit-access-security-groups: inbound and outbound rules).
                rules.append(aws.vpc.SecurityGroupEgressRule(
                    f"{name}-lnet-to-{source}-{low}",
                    security_group_id=group.id,
                    referenced_security_group_id=referenced,
                    ip_protocol="tcp",
                    from_port=low,
                    to_port=high,
                    description=f"Lustre LNET {low}-{high} to {source}",
                    opts=child,
                ))
        file_system = aws.fsx.LustreFileSystem(
            f"{name}-file-system",
            deployment_type="PERSISTENT_2",
            storage_capacity=args.capacity_gib,
            per_unit_storage_throughput=args.per_unit_throughput,
            subnet_ids=args.subnet_id,
            security_group_ids=[group.id],
            file_system_type_version="2.15",
            tags={**args.tags, "Name": f"{args.cluster_name}-{name}"},
            opts=pulumi.ResourceOptions(parent=self, protect=args.protect, retain_on_delete=True,
                                        depends_on=rules),
        )
        driver: list[pulumi.Resource] = []
        if args.install_csi_driver:
            driver.append(aws.eks.Addon(
                f"{name}-csi-driver", cluster_name=args.cluster_name,
                **addon_settings(objects.FSX_CSI_ADDON, args.kubernetes_version), tags=args.tags, opts=child,
            ))
        spec = pulumi.Output.all(file_system.id, file_system.dns_name, file_system.mount_name).apply(
            lambda values: objects.lustre_volume(
                args.volume_name, file_system_id=values[0], dns_name=values[1], mount_name=values[2],
                capacity_gib=args.capacity_gib,
            )["spec"]
        )
        volume = k8s.core.v1.PersistentVolume(
            f"{name}-volume",
            metadata={"name": args.volume_name, "labels": {"app.kubernetes.io/part-of": "llm-serving"}},
            spec=spec,
            opts=pulumi.ResourceOptions(parent=self, depends_on=driver, retain_on_delete=True),
        )
        claim = k8s.core.v1.PersistentVolumeClaim(
            f"{name}-claim",
            metadata={"name": args.claim_name, "namespace": args.namespace,
                      "labels": {"app.kubernetes.io/component": "weights"}},
            spec=cast(ManifestFields, {
                "accessModes": ["ReadWriteMany"],
                "storageClassName": "",
                "volumeName": args.volume_name,
                "resources": {"requests": {"storage": f"{args.capacity_gib}Gi"}},
            }),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[volume], retain_on_delete=True,
                                        protect=args.protect),
        )
        self.claim_name = claim.metadata.name
        self.register_outputs({"claim_name": self.claim_name})
