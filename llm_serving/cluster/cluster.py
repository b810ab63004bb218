"""Cluster: the VPC and EKS cluster a stack creates for itself (cluster.mode: create).

Plain pulumi_aws resources only, so the offline render and the policy pack see every child (the
pulumi-eks and awsx components are remote multi-language components whose children the mock
runtime never registers; docs/decisions.md). Builds: a VPC over two or three zones with private
and public subnets, NAT, an S3 gateway endpoint on the private route tables, the EKS control plane
(API authentication, KMS-encrypted secrets, control-plane logs), access entries, the four networking
add-ons at pinned versions and a small on-demand CPU node group. `eks` is the same `EksCluster` a
looked-up cluster gives, so the rest of the stack cannot tell the two apart; `ready` is what
workloads must wait for.

Length: one component builds the network, control plane, access, add-ons and CPU nodes in the order each
depends on the last (a node group needs the add-ons, the add-ons the access entries); split across modules,
that order would be spread over files that each only make sense beside the others.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import cast

import pulumi
import pulumi_aws as aws

from llm_serving.platform import EksCluster, versions

from .addons import addon_plan
from .network import NetworkPlan

# Managed policies: the control plane's service role (EKS user guide, cluster-iam-role) and a CPU
# worker's (create-node-role; the CNI policy stays on the node role, where the vpc-cni add-on
# looks for it when it has no Pod Identity association of its own).
CLUSTER_POLICIES = {"policy": "AmazonEKSClusterPolicy"}
NODE_POLICIES = {
    "worker": "AmazonEKSWorkerNodePolicy",
    "cni": "AmazonEKS_CNI_Policy",
    "ecr": "AmazonEC2ContainerRegistryPullOnly",
    "ssm": "AmazonSSMManagedInstanceCore",
}
# Cluster-wide admin for the deployer and the admin roles (EKS access policies, access-policy-permissions).
ADMIN_POLICY = "AmazonEKSClusterAdminPolicy"
SYSTEM_NODE_LABEL = "llm-serving/node-role"
# The CPU node group is named `<cluster>-system-` plus the provider's unique suffix: terraform-provider-aws allows a
# node_group_name_prefix of at most 63 - 26 characters (internal/service/eks/node_group.go, nodeGroupNamePrefix:
# StringLenBetween(0, 63-id.UniqueIDSuffixLength), with terraform-plugin-sdk's helper/id UniqueIDSuffixLength = 26),
# so a longer cluster name failed only at preview.
SYSTEM_NODE_GROUP_SUFFIX = "-system-"
MAX_CLUSTER_NAME_LENGTH = 63 - 26 - len(SYSTEM_NODE_GROUP_SUFFIX)
# A managed node group or add-on create waits for its nodes/pods; EKS typically needs 3-6 minutes
# for a node group and under 2 for an add-on, the defaults of 60 and 20 minutes only hide a stuck one.
NODE_GROUP_TIMEOUT = "30m"
# The CPU nodes' root volume (gp3): the OS, the images of the controllers, pickers and Envoy, their logs. The S3
# staging Job needs more (llm_serving.stack.planning.system_root_volume_gib).
SYSTEM_ROOT_VOLUME_GIB = 50
ADDON_TIMEOUT = "20m"


@dataclass(frozen=True)
class SystemNodes:
    instance_type: str
    min_nodes: int
    max_nodes: int
    desired_nodes: int
    root_volume_gib: int = SYSTEM_ROOT_VOLUME_GIB


@dataclass(frozen=True)
class ClusterSpec:
    """Plain values the cluster is built from (validated by `stacks` before they get here)."""

    cluster_name: str
    kubernetes_version: str
    network: NetworkPlan
    service_cidr: str
    deployer_arn: pulumi.Input[str]
    """The IAM role (or user) running `pulumi up`: it gets the first access entry."""
    system_nodes: SystemNodes
    admin_role_arns: tuple[str, ...] = ()
    public_access_cidrs: tuple[str, ...] = ()  # required: an empty tuple is refused when the cluster is built
    log_types: tuple[str, ...] = ("api", "audit", "authenticator", "controllerManager", "scheduler")
    log_retention_days: int = 30
    key_deletion_window_days: int = 30
    tags: dict[str, str] = field(default_factory=dict)


def admin_access_key(role_arn: str) -> str:
    """An admin role's access entry key: its role name (the ARN's last path segment) and a digest of the whole ARN,
    so two accounts' roles of one name stay apart and the key never depends on the list's order."""
    digest = hashlib.sha256(role_arn.encode()).hexdigest()[:8]
    return f"admin-{role_arn.rsplit('/', 1)[-1]}-{digest}"


class Cluster(pulumi.ComponentResource):
    eks: EksCluster
    private_subnet_ids: dict[str, pulumi.Output[str]]
    """Private subnet id per zone: where the GPU nodes and the weights storage go."""
    ready: list[pulumi.Resource]
    """Resources a workload must wait for: access for the deployer, every add-on, the CPU nodes."""
    system_node_role_arn: pulumi.Output[str]
    system_node_security_group_id: pulumi.Output[str]
    """The CPU nodes' own security group (beside the cluster's): where the staging Jobs run, so the
    weights' mount targets admit it."""

    def __init__(self, name: str, args: ClusterSpec, opts: pulumi.ResourceOptions | None = None):
        super().__init__("llmserving:cluster:Cluster", name, None, opts)
        if not args.public_access_cidrs:
            raise ValueError("the cluster's public endpoint needs its allowed CIDRs (public_access_cidrs)")
        child = pulumi.ResourceOptions(parent=self)
        invoke = pulumi.InvokeOptions(parent=self)
        partition = aws.get_partition_output(opts=invoke).partition
        region = aws.get_region_output(opts=invoke).region
        plan = args.network
        tags = {**args.tags, "llm-serving/cluster": args.cluster_name}

        def managed(policy: str) -> pulumi.Output[str]:
            return pulumi.Output.concat("arn:", partition, ":iam::aws:policy/", policy)

        # --- network -------------------------------------------------------------------------
        vpc = aws.ec2.Vpc(
            f"{name}-vpc",
            cidr_block=plan.vpc_cidr,
            # Both on: nodes register with their private DNS names and the private API endpoint
            # resolves inside the VPC (EKS user guide, network-reqs).
            enable_dns_support=True,
            enable_dns_hostnames=True,
            tags={**tags, "Name": args.cluster_name},
            opts=child,
        )
        gateway = aws.ec2.InternetGateway(
            f"{name}-internet-gateway", vpc_id=vpc.id, tags={**tags, "Name": args.cluster_name}, opts=child
        )
        public_routes = aws.ec2.RouteTable(
            f"{name}-public-routes",
            vpc_id=vpc.id,
            routes=[{"cidr_block": "0.0.0.0/0", "gateway_id": gateway.id}],
            tags={**tags, "Name": f"{args.cluster_name}-public"},
            opts=child,
        )
        public_ids: dict[str, pulumi.Output[str]] = {}
        for subnet in plan.public:
            created = aws.ec2.Subnet(
                f"{name}-public-{subnet.zone}",
                vpc_id=vpc.id,
                cidr_block=subnet.cidr,
                availability_zone=subnet.zone,
                # Nothing launches here but NAT gateways and load balancers, which bring their own
                # addresses; no instance should get a public IP by accident.
                map_public_ip_on_launch=False,
                tags={**tags, **subnet.tags(args.cluster_name), "Name": f"{args.cluster_name}-public-{subnet.zone}"},
                opts=child,
            )
            aws.ec2.RouteTableAssociation(
                f"{name}-public-{subnet.zone}-routes", subnet_id=created.id, route_table_id=public_routes.id,
                opts=child,
            )
            public_ids[subnet.zone] = created.id
        nat_ids: dict[str, pulumi.Output[str]] = {}
        for zone in plan.nat_zones:
            address = aws.ec2.Eip(
                f"{name}-nat-{zone}", domain="vpc", tags={**tags, "Name": f"{args.cluster_name}-nat-{zone}"}, opts=child
            )
            nat = aws.ec2.NatGateway(
                f"{name}-nat-{zone}",
                allocation_id=address.id,
                subnet_id=public_ids[zone],
                tags={**tags, "Name": f"{args.cluster_name}-{zone}"},
                opts=pulumi.ResourceOptions(parent=self, depends_on=[gateway]),
            )
            nat_ids[zone] = nat.id
        self.private_subnet_ids = {}
        # Nodes boot only once their subnet routes through NAT (image pulls and the node's join need it) and
        # to S3 through the gateway endpoint below.
        private_routes: list[pulumi.Resource] = []
        private_tables: dict[str, aws.ec2.RouteTable] = {}
        for subnet in plan.private:
            created = aws.ec2.Subnet(
                f"{name}-private-{subnet.zone}",
                vpc_id=vpc.id,
                cidr_block=subnet.cidr,
                availability_zone=subnet.zone,
                tags={**tags, **subnet.tags(args.cluster_name), "Name": f"{args.cluster_name}-private-{subnet.zone}"},
                opts=child,
            )
            routes = aws.ec2.RouteTable(
                f"{name}-private-{subnet.zone}-routes",
                vpc_id=vpc.id,
                routes=[{"cidr_block": "0.0.0.0/0", "nat_gateway_id": nat_ids[plan.nat_zone_for(subnet.zone)]}],
                tags={**tags, "Name": f"{args.cluster_name}-private-{subnet.zone}"},
                opts=child,
            )
            private_routes.append(aws.ec2.RouteTableAssociation(
                f"{name}-private-{subnet.zone}-routes", subnet_id=created.id, route_table_id=routes.id, opts=child
            ))
            private_tables[subnet.zone] = routes
            self.private_subnet_ids[subnet.zone] = created.id
        # S3 from the private subnets (streamed weights, the staging Job's uploads, ECR's image layers) through a
        # gateway endpoint instead of the NAT gateways, which charge per GB processed and top out at 100 Gbps
        # each (VPC user guide, nat-gateway-basics.html); gateway endpoints "come at no additional charge" (AWS
        # Prescriptive Guidance, wkld-12.html). One association per private table, so a new zone adds one. The
        # tables' inline routes leave the endpoint's prefix-list route alone (terraform-provider-aws
        # internal/service/ec2/vpc_route_table.go flattenRoutes skips vpce- prefix-list routes).
        endpoint = aws.ec2.VpcEndpoint(
            f"{name}-s3-endpoint", vpc_id=vpc.id, vpc_endpoint_type="Gateway",
            service_name=pulumi.Output.concat("com.amazonaws.", region, ".s3"),
            tags={**tags, "Name": f"{args.cluster_name}-s3"}, opts=child,
        )
        private_routes += [aws.ec2.VpcEndpointRouteTableAssociation(
            f"{name}-s3-endpoint-{zone}", vpc_endpoint_id=endpoint.id, route_table_id=table.id, opts=child)
            for zone, table in private_tables.items()]

        # --- control plane ---------------------------------------------------------------------
        cluster_role = aws.iam.Role(
            f"{name}-cluster-role",
            assume_role_policy=pulumi.Output.json_dumps({
                "Version": "2012-10-17",
                "Statement": [{"Effect": "Allow", "Principal": {"Service": "eks.amazonaws.com"},
                               "Action": ["sts:AssumeRole", "sts:TagSession"]}],
            }),
            description=f"EKS control plane of {args.cluster_name}",
            tags=tags,
            opts=child,
        )
        cluster_attachments = [
            aws.iam.RolePolicyAttachment(f"{name}-control-plane-{suffix}", role=cluster_role.name,
                                         policy_arn=managed(policy), opts=child)
            for suffix, policy in CLUSTER_POLICIES.items()
        ]
        key = aws.kms.Key(
            f"{name}-secrets-key",
            description=f"Envelope encryption of Kubernetes Secrets in {args.cluster_name}",
            enable_key_rotation=True,
            # On destroy the key is scheduled for deletion after this window, not deleted at once.
            deletion_window_in_days=args.key_deletion_window_days,
            tags=tags,
            opts=child,
        )
        aws.kms.Alias(f"{name}-secrets-key", name=f"alias/eks/{args.cluster_name}", target_key_id=key.key_id,
                      opts=child)
        # EKS writes control-plane logs here; created first so the retention is ours (EKS would create
        # it with no expiry) and destroy removes it.
        logs = aws.cloudwatch.LogGroup(
            f"{name}-control-plane-logs",
            name=f"/aws/eks/{args.cluster_name}/cluster",
            retention_in_days=args.log_retention_days,
            tags=tags,
            opts=child,
        )
        cluster = aws.eks.Cluster(
            f"{name}-control-plane",
            name=args.cluster_name,
            version=args.kubernetes_version,
            role_arn=cluster_role.arn,
            vpc_config={
                "subnet_ids": [*self.private_subnet_ids.values()],
                "endpoint_private_access": True,
                # `pulumi up` runs outside the VPC: the public endpoint stays on, limited to these CIDRs.
                "endpoint_public_access": True,
                "public_access_cidrs": list(args.public_access_cidrs),
            },
            # API only: access is managed with access entries, never the aws-auth ConfigMap, and the
            # creator gets no hidden admin binding (EKS user guide, setting-up-access-entries).
            access_config={"authentication_mode": "API", "bootstrap_cluster_creator_admin_permissions": False},
            encryption_config={"provider": {"key_arn": key.arn}, "resources": ["secrets"]},
            enabled_cluster_log_types=list(args.log_types),
            kubernetes_network_config={"service_ipv4_cidr": args.service_cidr, "ip_family": "ipv4"},
            # The networking add-ons are created below as managed add-ons at pinned versions; EKS's
            # self-managed copies would conflict with them.
            bootstrap_self_managed_addons=False,
            tags=tags,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[logs, *cluster_attachments]),
        )

        # --- access ----------------------------------------------------------------------------
        access: list[pulumi.Resource] = []
        # (key, principal, former key): an admin's entry is keyed by its ARN, not its place in the list. Keyed by
        # position, removing the first admin re-pointed the second's entry at another principal: a replacement
        # created first, which EKS refuses (CreateAccessEntry: ResourceInUseException, one entry per principal).
        # The former positional name is an alias, so a stack created before keeps its entries.
        principals: list[tuple[str, pulumi.Input[str], str | None]] = [("deployer", args.deployer_arn, None)]
        principals += [(admin_access_key(arn), arn, f"admin-{i}") for i, arn in enumerate(args.admin_role_arns)]
        for entry_key, principal, former in principals:
            def aliased(suffix: str, former: str | None = former) -> pulumi.ResourceOptions:
                # Delete first: the alias goes by today's position, so when the same update also removes an admin
                # above this one, the entry found under the alias is another principal's, and replacing it created
                # first would hit the one-entry-per-principal refusal again.
                return pulumi.ResourceOptions(parent=self, aliases=[pulumi.Alias(
                    name=f"{name}-access-{former}{suffix}")], delete_before_replace=True) if former else child

            entry = aws.eks.AccessEntry(
                f"{name}-access-{entry_key}", cluster_name=cluster.name, principal_arn=principal, type="STANDARD",
                tags=tags, opts=aliased(""),
            )
            access.append(aws.eks.AccessPolicyAssociation(
                f"{name}-access-{entry_key}-admin",
                cluster_name=cluster.name,
                principal_arn=entry.principal_arn,
                policy_arn=pulumi.Output.concat("arn:", partition, ":eks::aws:cluster-access-policy/", ADMIN_POLICY),
                access_scope={"type": "cluster"},
                opts=aliased("-admin"),
            ))

        # --- add-ons and CPU nodes -------------------------------------------------------------
        def addon(spec, depends_on: list[pulumi.Resource]) -> aws.eks.Addon:
            return aws.eks.Addon(
                f"{name}-{spec.name}",
                cluster_name=cluster.name,
                addon_name=spec.name,
                addon_version=spec.version,
                configuration_values=spec.configuration_values(),
                # The add-on owns its objects: a hand edit is overwritten rather than failing the update.
                resolve_conflicts_on_create="OVERWRITE",
                resolve_conflicts_on_update="OVERWRITE",
                tags=tags,
                opts=pulumi.ResourceOptions(
                    parent=self,
                    depends_on=depends_on,
                    custom_timeouts=pulumi.CustomTimeouts(create=ADDON_TIMEOUT, update=ADDON_TIMEOUT),
                ),
            )

        specs = addon_plan(args.kubernetes_version)
        before = [addon(s, []) for s in specs if s.before_nodes]
        nodes = self._system_nodes(name, args, cluster, vpc.id, managed, tags, [*before, *private_routes])
        after = [addon(s, [nodes]) for s in specs if not s.before_nodes]
        self.ready = [*access, *before, nodes, *after]

        self.eks = EksCluster(
            name=args.cluster_name,
            endpoint=cluster.endpoint,
            # EKS reports both for a created cluster; the SDK types them Optional.
            certificate_authority=cluster.certificate_authority.apply(lambda ca: cast(str, ca.data) if ca else ""),
            cluster_security_group_id=cluster.vpc_config.apply(lambda v: cast(str, v.cluster_security_group_id)),
            region=region,
            vpc_id=vpc.id,
            vpc_cidr=vpc.cidr_block,
        )
        self.register_outputs({
            "clusterName": cluster.name,
            "endpoint": cluster.endpoint,
            "vpcId": vpc.id,
            "privateSubnetIds": self.private_subnet_ids,
            "s3EndpointId": endpoint.id,
        })

    def _system_nodes(self, name: str, args: ClusterSpec, cluster: aws.eks.Cluster, vpc_id: pulumi.Output[str],
                      managed, tags: dict[str, str], after: list[pulumi.Resource]) -> aws.eks.NodeGroup:
        child = pulumi.ResourceOptions(parent=self)
        role = aws.iam.Role(
            f"{name}-system-node-role",
            assume_role_policy=pulumi.Output.json_dumps({
                "Version": "2012-10-17",
                "Statement": [{"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"},
                               "Action": "sts:AssumeRole"}],
            }),
            description=f"CPU system nodes of {args.cluster_name}",
            tags=tags,
            opts=child,
        )
        attachments = [
            aws.iam.RolePolicyAttachment(f"{name}-system-node-{suffix}", role=role.name, policy_arn=managed(policy),
                                         opts=child)
            for suffix, policy in NODE_POLICIES.items()
        ]
        # A group of the CPU nodes' own, only to name them as a source (the weights admit NFS from it).
        # Naming any group in the launch template drops EKS's automatic cluster security group, so the
        # cluster's is named too (EKS user guide, launch-templates, "Using custom security groups").
        group = aws.ec2.SecurityGroup(
            f"{name}-system-nodes",
            vpc_id=vpc_id,
            description=f"CPU system nodes of {args.cluster_name}; source for the weights storage",
            tags={**tags, "Name": f"{args.cluster_name}-system-nodes"},
            opts=child,
        )
        self.system_node_security_group_id = group.id
        self.system_node_role_arn = role.arn
        template = aws.ec2.LaunchTemplate(
            f"{name}-system-launch-template",
            description=f"CPU system nodes of {args.cluster_name}",
            # IMDSv2 only, hop limit 1: pods cannot borrow the node role (EKS best practices guide).
            metadata_options={"http_endpoint": "enabled", "http_tokens": "required", "http_put_response_hop_limit": 1},
            block_device_mappings=[{
                "device_name": "/dev/xvda",
                "ebs": {"volume_size": args.system_nodes.root_volume_gib, "volume_type": "gp3",
                        "encrypted": "true", "delete_on_termination": "true"},
            }],
            vpc_security_group_ids=[cluster.vpc_config.apply(lambda v: cast(str, v.cluster_security_group_id)),
                                    group.id],
            tag_specifications=[{"resource_type": "instance",
                                 "tags": {**tags, "Name": f"{args.cluster_name}-system"}}],
            tags=tags,
            opts=child,
        )
        sizes = args.system_nodes
        return aws.eks.NodeGroup(
            f"{name}-system-nodes",
            cluster_name=cluster.name,
            # A prefix, so a change EKS can only make by replacement creates the new group first.
            node_group_name_prefix=f"{args.cluster_name}{SYSTEM_NODE_GROUP_SUFFIX}",
            node_role_arn=role.arn,
            subnet_ids=[*self.private_subnet_ids.values()],
            version=args.kubernetes_version,
            ami_type=versions.SYSTEM_NODE_AMI_TYPE,
            capacity_type="ON_DEMAND",
            instance_types=[sizes.instance_type],
            launch_template={"id": template.id, "version": template.latest_version.apply(str)},
            scaling_config={
                "min_size": sizes.min_nodes, "max_size": sizes.max_nodes, "desired_size": sizes.desired_nodes
            },
            # One node at a time on a version or AMI update: the pickers, Envoy and CoreDNS keep a replica.
            update_config={"max_unavailable": 1},
            labels={SYSTEM_NODE_LABEL: "system"},
            tags=tags,
            opts=pulumi.ResourceOptions(
                parent=self,
                depends_on=[*attachments, *after],
                # An update replaces every node one at a time (drain, boot, join): allow an hour.
                custom_timeouts=pulumi.CustomTimeouts(create=NODE_GROUP_TIMEOUT, update="60m"),
            ),
        )
