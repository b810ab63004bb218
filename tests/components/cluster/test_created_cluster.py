"""examples/Pulumi.sandbox.yaml creates its own cluster: the exact VPC, subnets and tags, control
plane, access entries, add-ons, CPU node group, and the GPU node group in the created subnets, all
in the offline render (plain pulumi_aws resources, so the mock runtime sees every child)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pulumi
import pytest

from llm_serving.cluster import allocatable_ephemeral_gib
from policies import rules
from stacks.config.files import PROJECT_DIR
from stacks.config.problems import ConfigError
from stacks.offline import mocks, render
from tests.conftest import render_file

SANDBOX = PROJECT_DIR / "examples" / "Pulumi.sandbox.yaml"
GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "sandbox"
TAGS = {
    "app.kubernetes.io/part-of": "llm-serving",
    "llm-serving/cluster": "llm-sandbox",
    "llm-serving/environment": "dev",
    "llm-serving/stack": "llm-serving/sandbox",
}
ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")


@pytest.fixture(scope="module")
def sandbox() -> render.RenderResult:
    # The session's cached render: other modules read the same example.
    return render_file(SANDBOX)


@pytest.fixture(scope="module")
def sandbox_on_s3(tmp_path_factory: pytest.TempPathFactory) -> render.RenderResult:
    """The sandbox with its weights on S3 (`weightsStorage.backend: s3`), rendered once for the module."""
    path = tmp_path_factory.mktemp("sandbox-s3") / "Pulumi.sandbox-s3.yaml"
    path.write_text(SANDBOX.read_text() + "  llm-serving:weightsStorage:\n    backend: s3\n")
    return render_file(path)


def _inputs(result: render.RenderResult, type_: str, name: str) -> dict[str, Any]:
    return result.resource(type_, name)["inputs"]


def _depends(result: render.RenderResult, type_: str, name: str) -> list[str]:
    return result.resource(type_, name)["options"]["dependsOn"]


def test_sandbox_render_matches_its_golden(sandbox, tmp_path):
    manifests, resources = render.write(sandbox, tmp_path)
    assert manifests.read_text() == (GOLDEN / "manifests.yaml").read_text(), "run `make golden` after review"
    assert resources.read_text() == (GOLDEN / "resources.json").read_text(), "run `make golden` after review"


def test_vpc_spans_three_zones_with_private_and_public_subnets_and_one_nat_in_dev(sandbox):
    assert _inputs(sandbox, "aws:ec2/vpc:Vpc", "cluster-vpc") == {
        "cidrBlock": "10.40.0.0/16", "enableDnsHostnames": True, "enableDnsSupport": True,
        "tags": {**TAGS, "Name": "llm-sandbox"},
    }
    private = {"us-east-1a": "10.40.0.0/18", "us-east-1b": "10.40.64.0/18", "us-east-1c": "10.40.128.0/18"}
    public = {"us-east-1a": "10.40.192.0/20", "us-east-1b": "10.40.208.0/20", "us-east-1c": "10.40.224.0/20"}
    for zone in ZONES:
        assert _inputs(sandbox, "aws:ec2/subnet:Subnet", f"cluster-private-{zone}") == {
            "availabilityZone": zone, "cidrBlock": private[zone], "vpcId": "cluster-vpc-id",
            "tags": {**TAGS, "Name": f"llm-sandbox-private-{zone}", "kubernetes.io/cluster/llm-sandbox": "shared",
                     "kubernetes.io/role/internal-elb": "1"},
        }
        assert _inputs(sandbox, "aws:ec2/subnet:Subnet", f"cluster-public-{zone}") == {
            "availabilityZone": zone, "cidrBlock": public[zone], "vpcId": "cluster-vpc-id",
            "mapPublicIpOnLaunch": False,
            "tags": {**TAGS, "Name": f"llm-sandbox-public-{zone}", "kubernetes.io/cluster/llm-sandbox": "shared",
                     "kubernetes.io/role/elb": "1"},
        }
        # Every private subnet leaves through the one NAT gateway of a dev stack.
        assert _inputs(sandbox, "aws:ec2/routeTable:RouteTable", f"cluster-private-{zone}-routes")["routes"] == [
            {"cidrBlock": "0.0.0.0/0", "natGatewayId": "cluster-nat-us-east-1a-id"}
        ]
    assert [r["name"] for r in sandbox.by_type()["aws:ec2/natGateway:NatGateway"]] == ["cluster-nat-us-east-1a"]
    assert _inputs(sandbox, "aws:ec2/routeTable:RouteTable", "cluster-public-routes")["routes"] == [
        {"cidrBlock": "0.0.0.0/0", "gatewayId": "cluster-internet-gateway-id"}
    ]


def test_s3_from_every_private_subnet_takes_the_gateway_endpoint_and_the_cpu_nodes_wait_for_it(sandbox):
    assert _inputs(sandbox, "aws:ec2/vpcEndpoint:VpcEndpoint", "cluster-s3-endpoint") == {
        "serviceName": "com.amazonaws.us-east-1.s3", "tags": {**TAGS, "Name": "llm-sandbox-s3"},
        "vpcEndpointType": "Gateway", "vpcId": "cluster-vpc-id",
    }
    associations = sandbox.by_type()["aws:ec2/vpcEndpointRouteTableAssociation:VpcEndpointRouteTableAssociation"]
    assert {a["name"]: a["inputs"] for a in associations} == {
        f"cluster-s3-endpoint-{zone}": {"routeTableId": f"cluster-private-{zone}-routes-id",
                                        "vpcEndpointId": "cluster-s3-endpoint-id"} for zone in ZONES}
    # The public table (NAT gateways and load balancers only) never carries S3 traffic of the pods.
    assert "cluster-public-routes-id" not in [a["inputs"]["routeTableId"] for a in associations]
    depends = _depends(sandbox, "aws:eks/nodeGroup:NodeGroup", "cluster-system-nodes")
    for zone in ZONES:
        assert ("aws:ec2/vpcEndpointRouteTableAssociation:VpcEndpointRouteTableAssociation::"
                f"cluster-s3-endpoint-{zone}") in depends


def test_control_plane_uses_api_authentication_kms_secrets_and_every_log(sandbox):
    assert _inputs(sandbox, "aws:eks/cluster:Cluster", "cluster-control-plane") == {
        "name": "llm-sandbox",
        "version": "1.34",
        "roleArn": "arn:aws:iam::123456789012:role/cluster-cluster-role",
        "accessConfig": {"authenticationMode": "API", "bootstrapClusterCreatorAdminPermissions": False},
        "bootstrapSelfManagedAddons": False,
        "enabledClusterLogTypes": ["api", "audit", "authenticator", "controllerManager", "scheduler"],
        "encryptionConfig": {
            "provider": {"keyArn": "arn:aws:kms:us-east-1:123456789012:key/cluster-secrets-key-key-id"},
            "resources": ["secrets"],
        },
        "kubernetesNetworkConfig": {"ipFamily": "ipv4", "serviceIpv4Cidr": "172.20.0.0/16"},
        "tags": TAGS,
        "vpcConfig": {
            "endpointPrivateAccess": True, "endpointPublicAccess": True, "publicAccessCidrs": ["203.0.113.0/24"],
            "subnetIds": [f"cluster-private-{z}-id" for z in ZONES],
        },
    }
    assert _inputs(sandbox, "aws:kms/key:Key", "cluster-secrets-key")["enableKeyRotation"] is True
    assert _inputs(sandbox, "aws:kms/key:Key", "cluster-secrets-key")["deletionWindowInDays"] == 7
    assert _inputs(sandbox, "aws:cloudwatch/logGroup:LogGroup", "cluster-control-plane-logs") == {
        "name": "/aws/eks/llm-sandbox/cluster", "retentionInDays": 30, "tags": TAGS,
    }
    # The log group exists before EKS would create it without an expiry.
    assert "aws:cloudwatch/logGroup:LogGroup::cluster-control-plane-logs" in _depends(
        sandbox, "aws:eks/cluster:Cluster", "cluster-control-plane")


def test_the_deploying_role_gets_the_only_access_entry_with_cluster_admin(sandbox):
    entries = sandbox.by_type()["aws:eks/accessEntry:AccessEntry"]
    assert [(e["name"], e["inputs"]["principalArn"], e["inputs"]["type"]) for e in entries] == [
        ("cluster-access-deployer", "arn:aws:iam::123456789012:user/render", "STANDARD")
    ]
    assert _inputs(sandbox, "aws:eks/accessPolicyAssociation:AccessPolicyAssociation",
                   "cluster-access-deployer-admin") == {
        "accessScope": {"type": "cluster"},
        "clusterName": "llm-sandbox",
        "policyArn": "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy",
        "principalArn": "arn:aws:iam::123456789012:user/render",
    }


def test_addons_run_at_their_pinned_versions_with_network_policy_enforced(sandbox):
    addons = {r["inputs"]["addonName"]: r["inputs"] for r in sandbox.by_type()["aws:eks/addon:Addon"]
              if r["parent"] == "llmserving:cluster:Cluster::cluster"}
    assert {name: a["addonVersion"] for name, a in addons.items()} == {
        "vpc-cni": "v1.22.3-eksbuild.1",
        "kube-proxy": "v1.34.6-eksbuild.2",
        "eks-pod-identity-agent": "v1.3.10-eksbuild.1",
        "coredns": "v1.13.2-eksbuild.4",
    }
    assert json.loads(addons["vpc-cni"]["configurationValues"]) == {"enableNetworkPolicy": "true"}
    assert all("configurationValues" not in a for n, a in addons.items() if n != "vpc-cni")
    assert {(a["resolveConflictsOnCreate"], a["resolveConflictsOnUpdate"]) for a in addons.values()} == {
        ("OVERWRITE", "OVERWRITE")}


def test_cpu_node_group_is_small_on_demand_and_spans_every_zone(sandbox):
    assert _inputs(sandbox, "aws:eks/nodeGroup:NodeGroup", "cluster-system-nodes") == {
        "amiType": "AL2023_x86_64_STANDARD",
        "capacityType": "ON_DEMAND",
        "clusterName": "llm-sandbox",
        "instanceTypes": ["m7i.xlarge"],
        "labels": {"llm-serving/node-role": "system"},
        "launchTemplate": {"id": "cluster-system-launch-template-id", "version": "1"},
        "nodeGroupNamePrefix": "llm-sandbox-system-",
        "nodeRoleArn": "arn:aws:iam::123456789012:role/cluster-system-node-role",
        "scalingConfig": {"desiredSize": 2, "maxSize": 4, "minSize": 2},
        "subnetIds": [f"cluster-private-{z}-id" for z in ZONES],
        "tags": TAGS,
        "updateConfig": {"maxUnavailable": 1},
        "version": "1.34",
    }


def test_the_cpu_nodes_carry_a_group_of_their_own_which_alone_with_the_gpu_nodes_reaches_the_weights(sandbox):
    template = _inputs(sandbox, "aws:ec2/launchTemplate:LaunchTemplate", "cluster-system-launch-template")
    # Naming a group drops EKS's automatic cluster security group, so it is named first.
    assert template["vpcSecurityGroupIds"] == ["sg-0123456789abcdef0", "cluster-system-nodes-id"]
    assert _inputs(sandbox, "aws:ec2/securityGroup:SecurityGroup", "cluster-system-nodes") == {
        "vpcId": "cluster-vpc-id", "description": "CPU system nodes of llm-sandbox; source for the weights storage",
        "tags": {**TAGS, "Name": "llm-sandbox-system-nodes"}}
    sources = sorted(r["inputs"]["referencedSecurityGroupId"]
                     for r in sandbox.by_type()["aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"]
                     if r["inputs"]["securityGroupId"] == "weights-storage-nfs-id")
    assert sources == ["cluster-system-nodes-id", "gpu-p5-4xlarge-nodes-id"]
    # The created CPU nodes are the staging nodes: their role is the only writer, and the Job runs there.
    (policy,) = sandbox.by_type()["aws:efs/fileSystemPolicy:FileSystemPolicy"]
    (writes,) = [s for s in json.loads(policy["inputs"]["policy"])["Statement"] if s["Sid"] == "StagingMountsAndWrites"]
    assert writes["Principal"] == {"AWS": "arn:aws:iam::123456789012:role/cluster-system-node-role"}
    (job,) = [m for m in sandbox.manifests if m["kind"] == "Job" and "-stage-" in m["metadata"]["name"]]
    assert job["spec"]["template"]["spec"]["nodeSelector"] == {"kubernetes.io/arch": "amd64",
                                                               "llm-serving/node-role": "system"}


def _root_volume_gib(result: render.RenderResult) -> int:
    template = _inputs(result, "aws:ec2/launchTemplate:LaunchTemplate", "cluster-system-launch-template")
    (root,) = template["blockDeviceMappings"]
    assert root["deviceName"] == "/dev/xvda"
    return root["ebs"]["volumeSize"]


def test_with_s3_weights_the_cpu_nodes_root_volume_holds_the_staging_jobs_ephemeral_storage(sandbox, sandbox_on_s3):
    """The S3 staging Job runs on the created CPU nodes (the GPU nodes are tainted) and requests 68 GiB of
    ephemeral storage: a 50 GiB root leaves 44 GiB allocatable, so the program sizes the volume to fit."""
    assert _root_volume_gib(sandbox) == 50  # EFS: no scratch on the node
    on_s3 = sandbox_on_s3
    (job,) = [m for m in on_s3.manifests if m["kind"] == "Job" and m["metadata"]["name"].startswith("llama-8b-stage")]
    spec = job["spec"]["template"]["spec"]
    assert not spec.get("tolerations") and spec["nodeSelector"] == {"kubernetes.io/arch": "amd64"}
    request = int(spec["containers"][0]["resources"]["requests"]["ephemeral-storage"].removesuffix("Gi"))
    root = _root_volume_gib(on_s3)
    assert (request, root) == (68, 99)
    assert allocatable_ephemeral_gib(root) >= request > allocatable_ephemeral_gib(50)


def test_gpu_node_group_runs_in_the_created_private_subnets_of_its_zones(sandbox):
    gpu = _inputs(sandbox, "aws:eks/nodeGroup:NodeGroup", "gpu-p5-4xlarge-node-group")
    assert gpu["subnetIds"] == ["cluster-private-us-east-1a-id", "cluster-private-us-east-1b-id"]
    assert gpu["clusterName"] == "llm-sandbox"
    assert gpu["version"] == "1.34"
    assert gpu["scalingConfig"] == {"desiredSize": 1, "maxSize": 1, "minSize": 0}
    # The weights file system mounts in the same created subnets.
    targets = sandbox.by_type()["aws:efs/mountTarget:MountTarget"]
    assert sorted(t["inputs"]["subnetId"] for t in targets) == gpu["subnetIds"]


def test_order_on_create_and_on_upgrade_is_control_plane_then_addons_then_node_groups(sandbox):
    plane = "aws:eks/cluster:Cluster::cluster-control-plane"
    before = ["aws:eks/addon:Addon::cluster-eks-pod-identity-agent", "aws:eks/addon:Addon::cluster-kube-proxy",
              "aws:eks/addon:Addon::cluster-vpc-cni"]
    system = "aws:eks/nodeGroup:NodeGroup::cluster-system-nodes"
    coredns = "aws:eks/addon:Addon::cluster-coredns"
    for addon in before:
        assert _depends(sandbox, "aws:eks/addon:Addon", addon.rsplit("::", 1)[1]) == [plane]
    routes = {f"aws:ec2/routeTableAssociation:RouteTableAssociation::cluster-private-{z}-routes" for z in ZONES}
    # The CPU nodes boot once the CNI add-ons exist and their subnets route through NAT.
    assert set(before) | routes | {plane} <= set(_depends(sandbox, "aws:eks/nodeGroup:NodeGroup",
                                                           "cluster-system-nodes"))
    # CoreDNS is a Deployment: it can only turn ACTIVE once the CPU nodes exist.
    assert _depends(sandbox, "aws:eks/addon:Addon", "cluster-coredns") == [plane, system]
    gpu = set(_depends(sandbox, "aws:eks/nodeGroup:NodeGroup", "gpu-p5-4xlarge-node-group"))
    assert {*before, system, coredns, "aws:eks/accessPolicyAssociation:AccessPolicyAssociation::"
            "cluster-access-deployer-admin"} <= gpu
    # Every Kubernetes object waits for the same set through the provider.
    provider = sandbox.resource("pulumi:providers:kubernetes", "kubernetes")["options"]["dependsOn"]
    assert set(provider) == {*before, system, coredns, plane,
                             "aws:eks/accessPolicyAssociation:AccessPolicyAssociation::cluster-access-deployer-admin"}


def test_a_one_minor_upgrade_moves_control_plane_addons_and_both_node_groups(tmp_path, caplog):
    text = SANDBOX.read_text().replace('kubernetesVersion: "1.34"', 'kubernetesVersion: "1.33"')
    older = tmp_path / "Pulumi.sandbox.yaml"
    older.write_text(text)
    caplog.set_level("INFO")
    before = render.render_stack(older)
    after = render.render_stack(SANDBOX, cluster_version="1.33")  # the stack's cluster runs 1.33
    changed = {
        (r["type"], r["name"]): (r["inputs"].get("version") or r["inputs"].get("addonVersion"))
        for r in after.resources
        if r["type"] in ("aws:eks/cluster:Cluster", "aws:eks/addon:Addon", "aws:eks/nodeGroup:NodeGroup")
        and r["inputs"] != before.resource(r["type"], r["name"])["inputs"]
    }
    assert changed == {
        ("aws:eks/cluster:Cluster", "cluster-control-plane"): "1.34",
        ("aws:eks/addon:Addon", "cluster-kube-proxy"): "v1.34.6-eksbuild.2",
        ("aws:eks/nodeGroup:NodeGroup", "cluster-system-nodes"): "1.34",
        ("aws:eks/nodeGroup:NodeGroup", "gpu-p5-4xlarge-node-group"): "1.34",
    }
    # The preview lists the order the dependencies enforce.
    assert [r.getMessage() for r in caplog.records if "cluster upgrade step" in r.getMessage()] == [
        "cluster upgrade step 1: control plane 1.33 -> 1.34 (UpdateClusterVersion, about 10 minutes)",
        "cluster upgrade step 2: add-ons: vpc-cni v1.22.3-eksbuild.1, kube-proxy v1.34.6-eksbuild.2, "
        "eks-pod-identity-agent v1.3.10-eksbuild.1",
        "cluster upgrade step 3: CPU system node group to 1.34, one node at a time",
        "cluster upgrade step 4: add-ons: coredns v1.13.2-eksbuild.4",
        "cluster upgrade step 5: GPU node group: a new generation at 1.34 beside the old one, then the old one is "
        "drained and deleted",
    ]
    # The GPU group moves through a new generation beside the old one (its label changes).
    labels = "labels"
    assert (before.resource("aws:eks/nodeGroup:NodeGroup", "gpu-p5-4xlarge-node-group")["inputs"][labels]
            ["llm-serving/node-generation"]
            != after.resource("aws:eks/nodeGroup:NodeGroup", "gpu-p5-4xlarge-node-group")["inputs"][labels]
            ["llm-serving/node-generation"])


def test_a_skipped_minor_or_a_downgrade_is_refused_before_any_resource():
    with pytest.raises(ConfigError) as skipped:
        render.render_stack(SANDBOX, cluster_version="1.32")
    assert [p.line() for p in skipped.value.problems] == [
        "llm-serving:cluster.kubernetesVersion: the cluster runs 1.32; a control plane moves one minor per "
        'update, so this would skip a minor (got "1.34"; expected 1.33 first)'
    ]
    with pytest.raises(ConfigError) as downgrade:
        render.render_stack(SANDBOX, cluster_version="1.35")
    assert [p.line() for p in downgrade.value.problems] == [
        'llm-serving:cluster.kubernetesVersion: the cluster runs 1.35; EKS cannot downgrade (got "1.34"; expected '
        "1.35 or 1.36)"
    ]


def test_policy_pack_passes_the_sandbox_and_reads_its_cluster(sandbox):
    assert rules.violations(sandbox, "dev") == {rule.name: [] for rule in rules.RULES}
    plane = sandbox.resource("aws:eks/cluster:Cluster", "cluster-control-plane")["inputs"]
    weakened = {**plane, "encryptionConfig": {}, "enabledClusterLogTypes": ["api"],
                "accessConfig": {"authenticationMode": "API_AND_CONFIG_MAP",
                                 "bootstrapClusterCreatorAdminPermissions": True},
                "vpcConfig": {**plane["vpcConfig"], "endpointPrivateAccess": False}}
    (rule,) = [r for r in rules.RULES if r.name == "eks-cluster-hardened"]
    context = rules.RuleContext(environment="dev", name="cluster-control-plane", protect=False, retain_on_delete=False)
    assert rule.check("aws:eks/cluster:Cluster", weakened, context) == [
        "EKS cluster llm-sandbox: Secrets are not envelope-encrypted with a KMS key (encryptionConfig); API keys "
        "and tokens would sit in etcd under EKS's default encryption only.",
        "EKS cluster llm-sandbox: authenticationMode is API_AND_CONFIG_MAP; use API, so access is granted only by "
        "access entries in state and never by the aws-auth ConfigMap.",
        "EKS cluster llm-sandbox: bootstrapClusterCreatorAdminPermissions is not false; the creator's admin "
        "access would be an invisible side effect instead of a reviewed access entry.",
        "EKS cluster llm-sandbox: control-plane logs audit, authenticator are off; an incident review needs them.",
        "EKS cluster llm-sandbox: the private API endpoint is off, so nodes reach the API over the internet.",
    ]


def test_the_program_refuses_zones_the_region_does_not_offer(tmp_path, caplog):
    stack = tmp_path / "Pulumi.sandbox.yaml"
    stack.write_text(SANDBOX.read_text().replace("zones: [us-east-1a, us-east-1b, us-east-1c]",
                                                 "zones: [us-east-1a, us-east-1b, us-east-1g]"))
    with pytest.raises(pulumi.RunError, match="stack sandbox cannot create its cluster; nothing was created"):
        render.render_stack(stack)
    assert [r.getMessage() for r in caplog.records if r.levelname == "ERROR"] == [
        'llm-serving:cluster.create.zones: not an available zone of region us-east-1 (got "us-east-1g"; expected '
        "us-east-1a, us-east-1b, us-east-1c, us-east-1d, us-east-1e, us-east-1f)"
    ]


def test_on_s3_a_created_vpc_fences_the_streaming_pods_to_s3s_prefix_list(sandbox_on_s3):
    # The sandbox with its weights on S3: the VPC it creates routes S3 through the gateway endpoint above, so
    # with weightsStorage.s3.vpcEndpoint unset the serving pods may reach on 443 only S3's prefix list.
    result = sandbox_on_s3
    (https,) = [rule for rule in result.manifest("NetworkPolicy", "vllm-serving")["spec"]["egress"]
                if rule["ports"] == [{"protocol": "TCP", "port": 443}]]
    assert sorted(b["ipBlock"]["cidr"] for b in https["to"]) == sorted(mocks.S3_PREFIX_LISTS["us-east-1"])
    # The staging Job reaches the Hub too, through the NAT gateway: any address on 443.
    staging = result.manifest("NetworkPolicy", "weights-staging")["spec"]["egress"]
    assert {"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}, {"ipBlock": {"cidr": "::/0"}}],
            "ports": [{"protocol": "TCP", "port": 443}]} in staging
