"""cluster.mode rules: one line per problem naming the key, for a stack that creates its cluster
(CIDRs, zones, versions, subnets) and for what the account already has (a foreign cluster of the
name, a skipped or backwards minor)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from llm_serving import cluster
from llm_serving.platform.args import validate
from llm_serving.stack.rules import cluster as cluster_checks
from stacks import checks
from stacks.config import ServingStackArgs

BASE: dict[str, Any] = {
    "environment": "dev",
    "cluster": {"name": "llm-sandbox", "kubernetesVersion": "1.34", "mode": "create",
                "create": {"zones": ["us-east-1a", "us-east-1b", "us-east-1c"],
                           "publicAccessCidrs": ["203.0.113.0/24"]}},
    "gpuNodeGroup": {
        "instanceType": "p5.4xlarge",
        "subnets": [{"availabilityZone": "us-east-1a"}],
        "scaling": {"minNodes": 0, "maxNodes": 1, "desiredNodes": 1},
    },
    "observability": {
        "prometheus": {"mode": "existing", "url": "http://prometheus-operated.monitoring.svc:9090"},
        "runbookBaseUrl": "https://runbooks.example.com/llm-serving",
    },
    "apiKey": "a-test-api-key-of-some-length",
    "edge": {"host": "llm.example.com", "tls": {"certManagerIssuer": "letsencrypt"}},
    "models": [{"name": "llama-8b", "modelId": "meta-llama/Llama-3.1-8B-Instruct",
                "revision": "0e9e39f249a16976918f6564b8830bc894c89659", "maxModelLen": 8192,
                "tensorParallelSize": 1}],
}


def config(**changes: Any) -> ServingStackArgs:
    values = copy.deepcopy(BASE)
    for path, value in changes.items():
        node = values
        *parents, last = path.split("__")
        for part in parents:
            node = node[part]
        node[last] = value
    return validate(ServingStackArgs, values)


def lines(**changes: Any) -> list[str]:
    return [p.line() for p in checks.check(config(**changes))]


def test_base_create_config_has_no_problems():
    assert lines() == []


def test_existing_mode_is_unchanged_and_still_needs_subnet_ids():
    assert lines(cluster={"name": "llm-dev"}) == [
        "llm-serving:gpuNodeGroup.subnets[0].id: mode existing needs the subnet's id (got null; expected subnet-...)"
    ]
    assert lines(cluster={"name": "llm-dev"},
                 gpuNodeGroup__subnets=[{"id": "subnet-0aa00000000000001", "availabilityZone": "us-east-1a"}]) == []


def test_create_section_is_refused_in_existing_mode():
    assert lines(cluster__mode="existing",
                 gpuNodeGroup__subnets=[{"id": "subnet-0aa00000000000001", "availabilityZone": "us-east-1a"}]) == [
        'llm-serving:cluster.create: only read with cluster.mode create (got "set"; expected unset, or mode create)'
    ]


def test_create_mode_without_a_create_section_is_refused():
    assert lines(cluster={"name": "x", "mode": "create"}) == [
        "llm-serving:cluster.create: mode create needs the VPC to build (got null; expected {zones: [<zone>, "
        "<zone>, <zone>]} (vpcCidr defaults to 10.40.0.0/16))"
    ]


@pytest.mark.parametrize(("vpc", "service", "expected"), [
    ("10.40.0.0/16", "10.40.0.0/20",
     'llm-serving:cluster.create.serviceCidr: overlaps the VPC\'s 10.40.0.0/16 (got "10.40.0.0/20"; expected a '
     "/12 to /24 in a private range, apart from the VPC)"),
    ("10.40.0.0/22", "172.20.0.0/16",
     'llm-serving:cluster.create.vpcCidr: too small or too large: each private subnet gets a quarter of it, so a '
     '/16 to /20 (got "10.40.0.0/22"; expected a /16 to /20 in 10/8, 172.16/12 or 192.168/16)'),
    ("172.17.0.0/16", "10.100.0.0/16",
     'llm-serving:cluster.create.vpcCidr: overlaps Docker\'s bridge 172.17.0.0/16 (got "172.17.0.0/16"; expected '
     "a /16 to /20 in 10/8, 172.16/12 or 192.168/16)"),
    ("10.40.0.1/16", "172.20.0.0/16",
     'llm-serving:cluster.create.vpcCidr: not a network address (host bits set, or not IPv4) (got "10.40.0.1/16"; '
     "expected a /16 to /20 in 10/8, 172.16/12 or 192.168/16)"),
    ("100.0.0.0/16", "172.20.0.0/16",
     'llm-serving:cluster.create.vpcCidr: not inside a private range (got "100.0.0.0/16"; expected a /16 to /20 '
     "in 10/8, 172.16/12 or 192.168/16)"),
])
def test_rejects_overlapping_or_too_small_cidrs(vpc, service, expected):
    assert lines(cluster__create__vpcCidr=vpc, cluster__create__serviceCidr=service) == [expected]


def test_rejects_fewer_than_two_zones_and_zones_of_two_regions():
    assert lines(cluster__create__zones=["us-east-1a"]) == [
        'llm-serving:cluster.create.zones: EKS needs two zones at least; this plan takes 3 at most (got '
        '["us-east-1a"]; expected 2 to 3 zones)'
    ]
    assert lines(cluster__create__zones=["us-east-1a", "us-west-2a"]) == [
        'llm-serving:cluster.create.zones: zones of more than one region (got ["us-east-1a", "us-west-2a"]; '
        "expected zones of the stack's region)"
    ]


def test_gpu_subnets_must_be_zones_of_the_created_vpc_without_ids():
    assert lines(gpuNodeGroup__subnets=[{"id": "subnet-0aa00000000000001", "availabilityZone": "us-east-1d"}]) == [
        'llm-serving:gpuNodeGroup.subnets[0].id: mode create makes the subnets; give only the zone (got '
        '"subnet-0aa00000000000001"; expected unset)',
        'llm-serving:gpuNodeGroup.subnets[0].availabilityZone: not a zone of the created VPC (got "us-east-1d"; '
        "expected one of us-east-1a, us-east-1b, us-east-1c)",
    ]


@pytest.mark.parametrize(("version", "expected"), [
    ("1.30", 'llm-serving:cluster.kubernetesVersion: EKS does not offer this version for a new cluster (got "1.30"; '
             "expected 1.32, 1.33, 1.34, 1.35)"),
    ("1.35", "llm-serving:cluster.kubernetesVersion: no add-on versions are pinned for it (llm_serving/platform/"
             'versions.py ADDON_VERSIONS) (got "1.35"; expected 1.33, 1.34)'),
])
def test_rejects_a_version_eks_does_not_offer_or_without_pinned_addons(version, expected):
    assert expected in lines(cluster__kubernetesVersion=version)


def test_prod_keeps_the_api_endpoint_off_the_open_internet():
    # (prod's own rules about replicas also apply to this one-node base; only the cluster lines matter here)
    assert [line for line in lines(environment="prod", cluster__create__publicAccessCidrs=["0.0.0.0/0"])
            if "cluster." in line] == [
        'llm-serving:cluster.create.publicAccessCidrs: prod opens the API endpoint to the internet (got '
        '["0.0.0.0/0"]; expected the CIDRs of your deployers and CI runners)'
    ]
    assert [line for line in lines(environment="prod", cluster__create__publicAccessCidrs=["203.0.113.0/24"])
            if "cluster." in line] == []


def test_nat_gateways_are_per_zone_in_prod_and_one_elsewhere():
    assert cluster_checks.network_plan(config()).nat_zones == ("us-east-1a",)
    assert cluster_checks.network_plan(config(environment="prod")).nat_zones == (
        "us-east-1a", "us-east-1b", "us-east-1c")
    assert cluster_checks.network_plan(config(environment="prod", cluster__create__natGateways="one")).nat_zones == (
        "us-east-1a",)


def test_a_cluster_of_the_name_from_elsewhere_is_refused():
    found = cluster_checks.FoundCluster("1.34", None)
    assert [p.line() for p in cluster_checks.existing_cluster_problems(config(), found, "llm-serving/sandbox")] == [
        'llm-serving:cluster.name: a cluster of this name exists, created by no llm-serving stack; mode create will '
        'not adopt it (got "llm-sandbox"; expected another name, or cluster.mode existing)'
    ]
    other = cluster_checks.FoundCluster("1.34", "llm-serving/dev")
    assert "created by stack llm-serving/dev" in cluster_checks.existing_cluster_problems(
        config(), other, "llm-serving/sandbox")[0].message


def test_our_own_cluster_may_move_one_minor_up_never_two_nor_down():
    ours = "llm-serving/sandbox"
    assert cluster_checks.existing_cluster_problems(config(), cluster_checks.FoundCluster("1.34", ours), ours) == []
    assert cluster_checks.existing_cluster_problems(config(), cluster_checks.FoundCluster("1.33", ours), ours) == []
    assert [p.line() for p in cluster_checks.upgrade_problems("1.32", "1.34")] == [
        "llm-serving:cluster.kubernetesVersion: the cluster runs 1.32; a control plane moves one minor per update, "
        'so this would skip a minor (got "1.34"; expected 1.33 first)'
    ]
    assert [p.line() for p in cluster_checks.upgrade_problems("1.34", "1.33")] == [
        'llm-serving:cluster.kubernetesVersion: the cluster runs 1.34; EKS cannot downgrade (got "1.33"; expected '
        "1.34 or 1.35)"
    ]


def test_zones_the_region_does_not_offer_are_refused():
    assert [p.line() for p in cluster_checks.zone_problems(config(), "us-east-1", ["us-east-1a", "us-east-1b"])] == [
        'llm-serving:cluster.create.zones: not an available zone of region us-east-1 (got "us-east-1c"; expected '
        "us-east-1a, us-east-1b)"
    ]


def test_network_plan_quarters_a_20_for_two_zones():
    plan = cluster.plan_network("10.8.0.0/20", ["eu-west-1a", "eu-west-1b"], nat_per_zone=True)
    assert [(s.zone, s.cidr) for s in plan.private] == [("eu-west-1a", "10.8.0.0/22"), ("eu-west-1b", "10.8.4.0/22")]
    assert [(s.zone, s.cidr) for s in plan.public] == [("eu-west-1a", "10.8.12.0/24"), ("eu-west-1b", "10.8.13.0/24")]
    assert plan.nat_zone_for("eu-west-1b") == "eu-west-1b"


def test_a_created_cluster_name_must_leave_room_for_the_node_group_prefix():
    from llm_serving import cluster

    fits = "c" * cluster.MAX_CLUSTER_NAME_LENGTH
    assert not [line for line in lines(cluster__name=fits) if line.startswith("llm-serving:cluster.name:")]
    (problem,) = [line for line in lines(cluster__name=fits + "x") if line.startswith("llm-serving:cluster.name:")]
    assert problem.endswith(f"(got \"{fits}x\"; expected at most {cluster.MAX_CLUSTER_NAME_LENGTH} characters)")
    # `<name>-system-` plus the provider's 26-character unique suffix: EKS's 63-character node group name.
    assert len(fits + "-system-") + 26 == 63


def test_the_public_endpoint_cidrs_have_no_default():
    from pydantic import ValidationError

    from llm_serving.cluster import CreateClusterArgs
    from llm_serving.platform.args import validate

    with pytest.raises(ValidationError) as error:
        validate(CreateClusterArgs, {"zones": ["us-east-1a", "us-east-1b"]})
    assert [(e["loc"], e["type"]) for e in error.value.errors()] == [(("publicAccessCidrs",), "missing")]
