"""GpuNodeGroup: an EKS managed node group of GPU instances attached to an existing cluster.

Creates the node IAM role, a security group of the nodes' own, a launch template (IMDSv2, container
storage, EFA, capacity blocks, the cluster's and that security group) and the node group with the GPU
taint and labels; outputs what GPU workloads must carry to land there.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass, field
from typing import cast

import pulumi
import pulumi_aws as aws

from . import node_autoscaling, node_network, scheduling
from .args import AmiType, CapacityType
from .catalog import InstanceType
from .repair import REPAIR_MAX_PARALLEL_NODES, REPAIR_MAX_UNHEALTHY_NODES

# Managed policies a worker node needs. The CNI policy sits on the node role because the VPC CNI
# add-on uses it unless the cluster moved it to IRSA/Pod Identity (EKS user guide, create-node-role).
NODE_POLICIES: dict[str, str] = {
    "worker": "AmazonEKSWorkerNodePolicy",
    "cni": "AmazonEKS_CNI_Policy",
    "ecr": "AmazonEC2ContainerRegistryPullOnly",
}
# Only when asked (gpuNodeGroup.ssmAccess): SSM lets an operator reach a sick GPU node (nvidia-smi,
# dmesg for Xids) without SSH keys, but it is also a root shell next to the weights, the API key in
# every pod's environment and the HF token, for anyone the account lets start SSM sessions.
SSM_POLICY = ("ssm", "AmazonSSMManagedInstanceCore")

# Root device names: AL2023 boots and keeps containerd on xvda; Bottlerocket keeps its OS on xvda
# and container data on the second volume, xvdb (Bottlerocket FAQ: data volume).
ROOT_DEVICE = {"AL2023_x86_64_NVIDIA": "/dev/xvda", "BOTTLEROCKET_x86_64_NVIDIA": "/dev/xvdb"}

# nodeadm NodeConfig asking AL2023 to RAID0 the instance NVMe and put containerd and kubelet on it
# (awslabs/amazon-eks-ami nodeadm API: spec.instance.localStorage.strategy). A p5 has 8 x 3.84 TB
# NVMe that otherwise sit idle while a 200 GiB root volume fills with 10 GB+ images.
_NODEADM_RAID0 = """MIME-Version: 1.0
Content-Type: multipart/mixed; boundary="LLMSERVING"

--LLMSERVING
Content-Type: application/node.eks.aws

---
apiVersion: node.eks.aws/v1alpha1
kind: NodeConfig
spec:
  instance:
    localStorage:
      strategy: RAID0

--LLMSERVING--
"""


@dataclass(frozen=True)
class NodeGroupSpec:
    """Plain values the node group is built from (validated by `stacks` before they get here)."""

    cluster_name: str
    cluster_security_group_id: pulumi.Input[str]
    vpc_id: pulumi.Input[str]  # where the nodes' own security group is created
    kubernetes_version: str
    instance: InstanceType
    subnet_ids: list[pulumi.Input[str]]
    min_nodes: int
    max_nodes: int
    desired_nodes: int
    ami_type: AmiType = AmiType.AL2023_X86_64_NVIDIA
    ami_release_version: str | None = None
    capacity_type: CapacityType = CapacityType.ON_DEMAND
    capacity_reservation_id: str | None = None
    root_volume_gib: int = 200
    nvme_container_storage: bool = True
    efa_interfaces: int = 0
    cluster_placement_group: bool = False
    extra_labels: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    # An autoscaler owns the group's size between min and max; without one `desiredNodes` is the size.
    autoscaled: bool = True
    auto_repair: bool = True
    # What identifies the subnets in the generation hash when their ids are not known yet (subnets
    # the stack creates): zone and CIDR of each. Empty: the ids themselves.
    subnet_keys: tuple[str, ...] = ()
    ssm_access: bool = False  # attach AmazonSSMManagedInstanceCore (a shell on GPU nodes) only when asked


def node_user_data(args: NodeGroupSpec) -> str | None:
    """Base64 user data merged by EKS into the node's bootstrap; None when nothing is needed."""
    if args.nvme_container_storage and args.ami_type is AmiType.AL2023_X86_64_NVIDIA:
        return base64.b64encode(_NODEADM_RAID0.encode()).decode()
    return None


def reserved_capacity(args: NodeGroupSpec) -> bool:
    """A capacity block or targeted reservation holds exactly the reserved nodes: a second group beside
    the first cannot launch, so such a group updates in place (see `GpuNodeGroup`)."""
    return args.capacity_type is CapacityType.CAPACITY_BLOCK or args.capacity_reservation_id is not None


def generation(args: NodeGroupSpec) -> str:
    """The node generation label: a hash of every input that decides what a node boots or carries
    (version, AMI, every launch-template input, subnets, labels), so any change of them replaces the
    group and the pods, which select the label, move before the old group goes (scheduling.py).
    Security groups by role, not id: the cluster's is fixed for the cluster's life, the nodes' own is
    created with the group (node_network)."""
    return scheduling.node_generation({
        "cluster": args.cluster_name,
        "kubernetes": args.kubernetes_version,
        "amiType": args.ami_type.value,
        "amiRelease": args.ami_release_version,
        "instance": args.instance.name,
        "capacityType": args.capacity_type.value,
        "capacityReservation": args.capacity_reservation_id,
        "rootVolumeGib": args.root_volume_gib,
        "nvme": args.nvme_container_storage,
        "efaInterfaces": args.efa_interfaces,
        "placementGroup": args.cluster_placement_group,
        "securityGroups": list(node_network.SECURITY_GROUP_ROLES),
        # Subnets, instance, AMI and capacity type replace the group in EKS anyway; hashing them too
        # makes every replacement a generation change, so the pods always move before deletion.
        # (Without keys the ids are known strings: the stack's existing subnets, llm_serving/stack/site.py.)
        "subnets": sorted(args.subnet_keys or cast(list[str], args.subnet_ids)),
        # Launch-template tag specifications and the node labels: a change of either would otherwise
        # update the group in place (a new template version drains every node under the PDB).
        "tags": args.tags,
        "labels": args.extra_labels,
        "gpuProduct": args.instance.gpu.product_label,
    })


def placement_update_warning(args: NodeGroupSpec) -> str | None:
    """What a node update asks of EC2 when the group sits in a cluster placement group: the new
    generation's group launches beside the old one into the same placement group (one launch template,
    one group), so until the old group is deleted the placement group must hold both. EC2 places a
    cluster group in one AZ and refuses launches it cannot co-locate (InsufficientInstanceCapacity),
    so the update stalls at the new group's creation, with the old group still serving."""
    if not args.cluster_placement_group or reserved_capacity(args):
        return None
    peak = 2 * args.max_nodes
    return (f"gpuNodeGroup.placement cluster: a node update (new Kubernetes version, AMI or launch template "
            f"input) runs the new node group beside the old one in the same cluster placement group: up to "
            f"{peak} x {args.instance.name} ({args.max_nodes} old + {args.max_nodes} new) in one availability "
            "zone until the old group is deleted. Check that EC2 can place them (a capacity reservation for "
            "the update window, or a maintenance window with maxNodes lowered) before changing those inputs.")


def labels(node_group: str, args: NodeGroupSpec) -> dict[str, str]:
    return scheduling.node_labels(node_group, generation(args), args.instance.gpu.product_label.lower(),
                                  args.extra_labels)


def autoscaler_tags(node_group: str, args: NodeGroupSpec, cluster_name: str) -> dict[str, str]:
    """Tags Cluster Autoscaler reads on the Auto Scaling group: our discovery tag, and the node
    template it needs to scale the group up from zero, when there is no node to look at: GPU count,
    labels and taint (cluster-autoscaler AWS provider README, "Scaling a node group to 0"). EKS adds
    the two standard auto-discovery tags itself but does not copy node-group tags to the ASG."""
    prefix = "k8s.io/cluster-autoscaler/node-template"
    tags = {
        node_autoscaling.DISCOVERY_TAG: cluster_name,
        f"{prefix}/resources/nvidia.com/gpu": str(args.instance.gpu_count),
        f"{prefix}/taint/{scheduling.GPU_TAINT_KEY}":
            f"{scheduling.GPU_TAINT_VALUE}:{scheduling.GPU_TAINT_EFFECT}",
        f"{prefix}/label/{scheduling.GPU_PRODUCT_LABEL}": args.instance.gpu.product_label,
    }
    if args.efa_interfaces:
        # Without these a group at zero offers no EFA in the autoscaler's simulation, so a pending rank
        # that requests EFA interfaces and huge pages never triggers a scale-up from zero.
        tags[f"{prefix}/resources/{scheduling.EFA_RESOURCE}"] = str(args.efa_interfaces)
        tags[f"{prefix}/resources/hugepages-2Mi"] = scheduling.EFA_NODE_HUGEPAGES_2MI
    for key, value in labels(node_group, args).items():
        tags[f"{prefix}/label/{key}"] = value
    return tags


class GpuNodeGroup(pulumi.ComponentResource):
    """A managed node group of GPU instances, tainted so only GPU workloads land on it."""

    node_selector: pulumi.Output[dict[str, str]]
    """Node selector GPU workloads must carry: this group and the GPU product GFD reports."""
    tolerations: pulumi.Output[list[dict[str, str]]]
    """Tolerations GPU workloads must carry for the `nvidia.com/gpu` taint."""
    gpus_per_node: pulumi.Output[int]
    max_gpus: pulumi.Output[int]
    """GPUs the group can offer at its maximum size; autoscaling bounds must fit within it."""
    node_group_name: pulumi.Output[str]
    node_role_arn: pulumi.Output[str]
    security_group_id: pulumi.Output[str]
    """The nodes' own security group: what the weights' mount targets admit NFS from."""
    node_group: aws.eks.NodeGroup
    replaced_generation: str | None
    """The generation label a node update replaces the group on; None: reserved capacity updates in place."""

    def __init__(self, name: str, args: NodeGroupSpec, opts: pulumi.ResourceOptions | None = None):
        super().__init__("llmserving:gpu:GpuNodeGroup", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        partition = aws.get_partition_output(opts=pulumi.InvokeOptions(parent=self)).partition

        role = aws.iam.Role(
            f"{name}-node-role",
            assume_role_policy=pulumi.Output.json_dumps({"Version": "2012-10-17", "Statement": [
                {"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}]}),
            description=f"GPU worker nodes of {args.cluster_name} ({name})",
            tags=args.tags,
            opts=child,
        )
        attachments = [
            aws.iam.RolePolicyAttachment(
                f"{name}-node-{suffix}",
                role=role.name,
                policy_arn=pulumi.Output.concat("arn:", partition, ":iam::aws:policy/", policy),
                opts=child,
            )
            for suffix, policy in [*NODE_POLICIES.items(), *([SSM_POLICY] if args.ssm_access else [])]
        ]

        placement: aws.ec2.LaunchTemplatePlacementArgsDict | None = None
        warning = placement_update_warning(args)
        if warning is not None:
            pulumi.log.warn(warning, resource=self)
        if args.cluster_placement_group:
            group = aws.ec2.PlacementGroup(
                f"{name}-placement", strategy="cluster", tags=args.tags, opts=child
            )
            placement = {"group_name": group.name}

        # No rules of its own: the cluster security group, which the nodes keep, carries node and
        # control-plane traffic and egress. This group only names the GPU nodes as a source, so the
        # weights admit them and not every node of the cluster. Not tagged kubernetes.io/cluster/<name>:
        # the AWS Load Balancer Controller wants exactly one such group per node ENI.
        nodes_group = aws.ec2.SecurityGroup(
            f"{name}-nodes",
            vpc_id=args.vpc_id,
            description=f"GPU nodes of {args.cluster_name} ({name}); source for the weights storage",
            tags={**args.tags, "Name": f"{args.cluster_name}-{name}-nodes"},
            opts=child,
        )
        security_groups = [args.cluster_security_group_id, nodes_group.id]

        template = aws.ec2.LaunchTemplate(
            f"{name}-launch-template",
            description=f"GPU nodes of {args.cluster_name} ({args.instance.name})",
            # IMDSv2 only, hop limit 1: pods cannot read the node role's credentials through the
            # metadata service (EKS best practices guide, "Restrict access to the instance profile").
            metadata_options={
                "http_endpoint": "enabled",
                "http_tokens": "required",
                "http_put_response_hop_limit": 1,
            },
            block_device_mappings=[
                {
                    "device_name": ROOT_DEVICE[args.ami_type],
                    "ebs": {
                        "volume_size": args.root_volume_gib,
                        "volume_type": "gp3",
                        "encrypted": "true",
                        "delete_on_termination": "true",
                    },
                }
            ],
            # The interfaces' keys are the SDK's own (node_network is pure, so it cannot name the type).
            network_interfaces=cast(list[aws.ec2.LaunchTemplateNetworkInterfaceArgsDict] | None,
                                    node_network.efa_interfaces(args.efa_interfaces, security_groups)),
            vpc_security_group_ids=node_network.instance_security_groups(args.efa_interfaces, security_groups),
            # A capacity block must name the instance type in the launch template (EKS user guide,
            # capacity-blocks-mng); the node group then may not list instance types itself.
            instance_type=args.instance.name if args.capacity_type is CapacityType.CAPACITY_BLOCK else None,
            instance_market_options={"market_type": "capacity-block"}
            if args.capacity_type is CapacityType.CAPACITY_BLOCK
            else None,
            capacity_reservation_specification={
                "capacity_reservation_target": {"capacity_reservation_id": args.capacity_reservation_id}
            }
            if args.capacity_reservation_id
            else None,
            placement=placement,
            user_data=node_user_data(args),
            tag_specifications=[
                {"resource_type": "instance", "tags": {**args.tags, "Name": f"{args.cluster_name}-{name}"}},
                {"resource_type": "volume", "tags": args.tags},
            ],
            tags=args.tags,
            opts=child,
        )

        node_group = aws.eks.NodeGroup(
            f"{name}-node-group",
            cluster_name=args.cluster_name,
            # A prefix, not a fixed name: changing the instance type, AMI type, capacity type or
            # subnets replaces the group, and only a generated name lets the new group come up
            # before the old one is deleted, so serving never drops to zero GPU nodes.
            node_group_name_prefix=f"{name}-",
            node_role_arn=role.arn,
            subnet_ids=args.subnet_ids,
            # The looked-up cluster's version (stacks/program.py stops the program when the stack file
            # disagrees): CreateNodegroup accepts only the control plane's own minor.
            version=args.kubernetes_version,
            release_version=args.ami_release_version,
            ami_type=args.ami_type.value,
            capacity_type=args.capacity_type.value,
            instance_types=None if args.capacity_type is CapacityType.CAPACITY_BLOCK else [args.instance.name],
            # A pinned template version, not $Latest: $Latest shows a diff on every preview.
            launch_template={"id": template.id, "version": template.latest_version.apply(str)},
            scaling_config={
                "min_size": args.min_nodes,
                "max_size": args.max_nodes,
                "desired_size": args.desired_nodes,
            },
            # Version, AMI and launch template changes replace the whole group (replace_on_changes
            # below), so this program never starts EKS's in-place rolling update, which drains under
            # the PDB and fails after 15 minutes. One node at a time if someone starts one by hand.
            # MINIMAL for reserved capacity, whose in-place updates terminate an old node before its
            # replacement can launch into the reservation (API NodegroupUpdateConfig: "useful with
            # hardware accelerators such as GPUs").
            update_config={"max_unavailable": 1, "update_strategy": "MINIMAL"}
            if reserved_capacity(args)
            else {"max_unavailable": 1},
            node_repair_config={
                "enabled": args.auto_repair,
                "max_unhealthy_node_threshold_count": REPAIR_MAX_UNHEALTHY_NODES,
                "max_parallel_nodes_repaired_count": REPAIR_MAX_PARALLEL_NODES,
            }
            if args.auto_repair
            else {"enabled": False},
            labels=labels(name, args),
            taints=[
                {
                    "key": scheduling.GPU_TAINT_KEY,
                    "value": scheduling.GPU_TAINT_VALUE,
                    "effect": scheduling.GPU_TAINT_EFFECT_EKS,
                }
            ],
            tags=args.tags,
            opts=pulumi.ResourceOptions(
                parent=self,
                depends_on=attachments,
                # An autoscaler owns the current size; a later `pulumi up` must not reset it. Without
                # one, desiredNodes is the size and a change must apply.
                ignore_changes=["scalingConfig.desiredSize"] if args.autoscaled else [],
                # A new generation label (what nodes boot: version, AMI, launch template inputs) means
                # a new group beside the old one: the name prefix lets both exist, and Pulumi deletes
                # the old group at the end of the update, after the vLLM Deployments (which select
                # the label) have rolled onto the new nodes.
                # Reserved capacity has no room for a second group: it updates in place (docs/operations.md).
                replace_on_changes=[] if reserved_capacity(args) else ["labels"],
            ),
        )

        # Copy the node-template tags onto the Auto Scaling group EKS created for the node group.
        asg_name = node_group.resources.apply(
            lambda r: r[0].autoscaling_groups[0].name)  # type: ignore[index]  # EKS creates one per group
        asg_tags = []
        for key, value in sorted(autoscaler_tags(name, args, args.cluster_name).items()):
            suffix = re.sub(r"[^a-z0-9]+", "-", key.split("/node-template/", 1)[-1].lower())
            asg_tags.append(aws.autoscaling.Tag(
                f"{name}-asg-{suffix}",
                autoscaling_group_name=asg_name,
                tag={"key": key, "value": value, "propagate_at_launch": False},
                opts=child,
            ))

        self.node_selector = pulumi.Output.from_input(
            # Reserved capacity updates in place: a selector following the generation would leave an
            # evicted replica no node (the old nodes lose the label, the new ones are not up yet) and
            # every later eviction blocked by the PDB until EKS fails with PodEvictionFailure.
            scheduling.workload_node_selector(
                name, None if reserved_capacity(args) else generation(args), args.instance.gpu.product_label)
        )
        self.tolerations = pulumi.Output.from_input(scheduling.gpu_tolerations())
        self.gpus_per_node = pulumi.Output.from_input(args.instance.gpu_count)
        self.max_gpus = pulumi.Output.from_input(args.instance.gpu_count * args.max_nodes)
        # Known once the group and its Auto Scaling group tags exist: workloads that wait for it (the
        # vLLM Deployments) roll onto a new group only when Cluster Autoscaler can discover it.
        self.node_group_name = pulumi.Output.all(node_group.node_group_name, *[t.id for t in asg_tags]).apply(
            lambda values: values[0]
        )
        self.node_role_arn = role.arn
        self.security_group_id = nodes_group.id
        self.node_group = node_group
        self.replaced_generation = None if reserved_capacity(args) else generation(args)
        self.register_outputs({
            "node_selector": self.node_selector, "tolerations": self.tolerations,
            "gpus_per_node": self.gpus_per_node, "max_gpus": self.max_gpus,
            "node_group_name": self.node_group_name, "node_role_arn": self.node_role_arn,
            "security_group_id": self.security_group_id,
        })
