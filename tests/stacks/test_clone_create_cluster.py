"""`python -m stacks clone <from> <to> --create-cluster a,b,c`: one command turns a clone into a
stack that creates its own VPC and cluster (a new account or region has none to attach to)."""

from __future__ import annotations

import pytest
import yaml

from stacks import clone
from stacks.cli import main
from stacks.config.problems import ConfigError
from stacks.environment import load_stack_file
from stacks.offline import render


def test_clone_of_prod_creates_its_cluster_in_another_region(stack_dir):
    # prod refuses an API endpoint open to the internet: the clone names the deployers' network.
    path = clone.clone("prod", "prod-eu", ["environment=prod", "aws:region=eu-west-1", "cluster.name=llm-prod-eu",
                                             "cluster.create.publicAccessCidrs=[203.0.113.0/24]"], stack_dir,
                          create_zones=["eu-west-1a", "eu-west-1b", "eu-west-1c"]).path
    config = yaml.safe_load(path.read_text())["config"]
    assert config["aws:region"] == "eu-west-1"
    assert config["llm-serving:cluster"] == {
        "mode": "create", "name": "llm-prod-eu",
        "create": {"zones": ["eu-west-1a", "eu-west-1b", "eu-west-1c"], "publicAccessCidrs": ["203.0.113.0/24"]},
    }
    # prod's GPU nodes use three zones: the clone keeps three, the new ones, without ids.
    assert config["llm-serving:gpuNodeGroup"] == {
        "subnets": [{"availabilityZone": "eu-west-1a"}, {"availabilityZone": "eu-west-1b"},
                    {"availabilityZone": "eu-west-1c"}]
    }
    validated = load_stack_file(path)[1]
    assert validated.cluster.mode.value == "create"
    assert [s.id for s in validated.gpu_node_group.subnets] == [None, None, None]


def test_a_create_clone_into_another_region_keeps_nothing_of_the_bases_region(stack_dir):
    # The region refusal (stacks/config/regions.py) finds nothing: the clone's cluster, zones and subnets are its
    # own, and prod's staging-node security group (of prod's VPC) gives way to the created CPU nodes' group.
    cloned = clone.clone("prod", "prod-eu", ["environment=prod", "aws:region=eu-west-1",
                                             "cluster.create.publicAccessCidrs=[203.0.113.0/24]"], stack_dir,
                         create_zones=["eu-west-1a", "eu-west-1b", "eu-west-1c"])
    assert cloned.kept == []
    config = yaml.safe_load(cloned.path.read_text())["config"]
    assert config["llm-serving:cluster"]["name"] == "llm-prod-eu"
    assert config["llm-serving:weightsStorage"] == {"efs": {"stagingNodeRoleArn": None,
                                                            "stagingNodeSecurityGroupIds": [],
                                                            "stagingNodeSelector": None}}
    efs = load_stack_file(cloned.path)[1].weights_storage.efs
    # The null drops prod's selector (its labels are prod's CPU nodes'), so nothing is inherited to warn about.
    assert (efs.staging_node_role_arn, efs.staging_node_security_group_ids, efs.staging_node_selector) == (
        None, [], {})
    assert not [w for w in cloned.warnings if "stagingNodeSelector" in w]


def test_a_create_clone_stages_weights_through_its_own_cpu_nodes(stack_dir):
    cloned = clone.clone("prod", "prod-new", ["environment=staging",
                                              "cluster.create.publicAccessCidrs=[203.0.113.0/24]"],
                         stack_dir, create_zones=["us-east-1a", "us-east-1b", "us-east-1c"])
    result = render.render_stack(cloned.path)
    # NFS from the created CPU nodes' group, and only their role may write: not prod's group and role.
    nfs = result.resource("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule",
                          "weights-storage-nfs-from-staging-nodes")
    assert nfs["inputs"]["referencedSecurityGroupId"] == "cluster-system-nodes-id"
    policy = result.resource("aws:efs/fileSystemPolicy:FileSystemPolicy", "weights-storage-policy")["inputs"]
    assert "role/cluster-system-node-role" in policy["policy"] and "llm-prod-cpu-nodes" not in policy["policy"]
    # The staging Job runs on the created CPU nodes, not on nodes labelled like prod's.
    (job,) = [m for m in result.manifests if m["kind"] == "Job" and "stage" in m["metadata"]["name"]]
    selector = job["spec"]["template"]["spec"]["nodeSelector"]
    assert selector["llm-serving/node-role"] == "system" and "eks.amazonaws.com/nodegroup" not in selector


def test_a_create_clone_renders_with_its_own_cluster(stack_dir):
    path = clone.clone("dev", "dev-new-account", ["cluster.create.publicAccessCidrs=[203.0.113.0/24]"], stack_dir,
                       create_zones=["us-east-1a", "us-east-1b", "us-east-1c"]).path
    result = render.render_stack(path)
    # Its own cluster, named after the clone: never the base's, which exists elsewhere.
    control_plane = result.resource("aws:eks/cluster:Cluster", "cluster-control-plane")
    assert control_plane["inputs"]["name"] == "llm-dev-new-account"
    assert result.resource("aws:eks/nodeGroup:NodeGroup", "gpu-p5-4xlarge-node-group")["inputs"]["subnetIds"] == [
        "cluster-private-us-east-1a-id", "cluster-private-us-east-1b-id"]


def test_create_cluster_needs_two_or_three_distinct_zones(stack_dir):
    with pytest.raises(ConfigError) as error:
        clone.clone("dev", "dev-one-zone", [], stack_dir, create_zones=["us-east-1a"])
    assert [p.line() for p in error.value.problems] == [
        'llm-serving:--create-cluster: two or three distinct availability zones (got "us-east-1a"; expected e.g. '
        "eu-west-1a,eu-west-1b,eu-west-1c)"
    ]
    assert not (stack_dir / "Pulumi.dev-one-zone.yaml").exists()


def test_cli_flag_writes_the_create_clone(stack_dir, monkeypatch, capsys):
    monkeypatch.setattr("stacks.config.files.PROJECT_DIR", stack_dir)
    monkeypatch.setattr("stacks.cli.stack_files.PROJECT_DIR", stack_dir)
    assert main(["clone", "dev", "dev-b", "--create-cluster", "us-east-1a,us-east-1b",
                 "--set", "cluster.create.publicAccessCidrs=[203.0.113.0/24]"]) == 0
    config = yaml.safe_load((stack_dir / "Pulumi.dev-b.yaml").read_text())["config"]
    assert config["llm-serving:cluster"] == {"mode": "create", "name": "llm-dev-b", "create": {
        "zones": ["us-east-1a", "us-east-1b"], "publicAccessCidrs": ["203.0.113.0/24"]}}


def test_a_create_clone_must_name_who_may_reach_its_api_endpoint(stack_dir):
    # EKS's default is the whole internet: the clone is refused until the CIDRs are set, and nothing is written.
    with pytest.raises(ConfigError) as error:
        clone.clone("dev", "dev-open", [], stack_dir, create_zones=["us-east-1a", "us-east-1b"])
    assert [p.line() for p in error.value.problems] == [
        "llm-serving:cluster.create.publicAccessCidrs: required key is missing (got nothing; expected a value)"]
    assert not (stack_dir / "Pulumi.dev-open.yaml").exists()


def test_a_create_clone_names_its_cluster_within_the_limit():
    from llm_serving.cluster import MAX_CLUSTER_NAME_LENGTH

    long = clone.created_cluster_name("staging-eu-west-with-a-very-long-name")
    assert len(long) <= MAX_CLUSTER_NAME_LENGTH and long.startswith("llm-staging-eu-west")
    assert not long.endswith(("-", "_"))
