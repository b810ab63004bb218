"""The values bound to a region (stacks/config/regions.py): every one is a key of the schema, and a clone into
another region is refused once per value it inherits of the base's region, with the key, the value and the way
out."""

from __future__ import annotations

import pytest

from stacks.config import regions
from tools import config_reference

# A base that sets every region-bound value, as a stack in us-east-1 would.
BASE = {
    "cluster": {"name": "llm-prod", "create": {"zones": ["us-east-1a", "us-east-1b"]}},
    "gpuNodeGroup": {"subnets": [{"id": "subnet-0bb00000000000001", "availabilityZone": "us-east-1a"}],
                     "capacityReservationId": "cr-0123456789abcdef0",
                     "existing": {"securityGroupId": "sg-0dd00000000000001"}},
    "weightsStorage": {"efs": {"stagingNodeSecurityGroupIds": ["sg-0cc00000000000001"],
                               "stagingNodeRoleArn": "arn:aws:iam::123456789012:role/llm-prod-cpu-nodes",
                               "stagingNodeSelector": {"eks.amazonaws.com/nodegroup": "llm-prod-cpu"}},
                       "s3": {"bucketName": "llm-weights", "bucketRegion": "us-east-1"}},
    "edge": {"tls": {"acmCertificateArn": "arn:aws:acm:us-east-1:123456789012:certificate/0a1b2c3d-aaaa-bbbb"},
             "loadBalancerSubnetIds": ["subnet-0ee00000000000001"], "albControllerRoleArn":
                 "arn:aws:iam::123456789012:role/alb"},
    "models": [{"name": "llama-70b", "image": {"repository": "123456789012.dkr.ecr.us-east-1.amazonaws.com/vllm"}},
               {"name": "llama-8b", "image": {"repository": "vllm/vllm-openai"}}],
}


def test_every_region_bound_key_is_a_key_of_the_schema():
    reference = config_reference.reference()
    for entry in regions.REGION_BOUND:
        assert f"| `{entry.key.replace(regions.EACH_MODEL, 'models[]')}` |" in reference, entry.key


def test_a_clone_into_another_region_is_refused_once_for_each_region_bound_value():
    check = regions.region_problems("prod", "us-east-1", "eu-west-1", BASE, own={})
    # cluster.name is read only by a stack that looks its cluster up: BASE's mode is existing (the default), and
    # the Docker Hub image is pulled from anywhere alike.
    assert [p.path for p in check.problems] == [
        "cluster.name", "cluster.create.zones", "gpuNodeGroup.subnets", "gpuNodeGroup.capacityReservationId",
        "gpuNodeGroup.existing.securityGroupId", "weightsStorage.efs.stagingNodeSecurityGroupIds",
        "weightsStorage.s3.bucketName", "weightsStorage.s3.bucketRegion", "edge.tls.acmCertificateArn",
        "edge.loadBalancerSubnetIds", "models[llama-70b].image.repository"]
    assert check.kept == []
    by_key = {p.path: p for p in check.problems}
    assert by_key["cluster.name"].got == "llm-prod"
    assert by_key["cluster.name"].expected == ("--set 'cluster.name=<its value in eu-west-1>', or --keep "
                                              "cluster.name when prod's value holds in eu-west-1 too")
    # A value that spells its region offers --create-cluster, never --keep.
    assert by_key["gpuNodeGroup.subnets"].expected.endswith("or --create-cluster <zones of eu-west-1> (the clone "
                                                           "creates its subnets); not --keep: its zones are prod's "
                                                           "region's")


def test_iam_roles_and_node_labels_are_not_region_bound():
    listed = " ".join(keys for keys, _ in regions.NOT_REGION_BOUND)
    for key in ("weightsStorage.efs.stagingNodeRoleArn", "edge.albControllerRoleArn",
                "weightsStorage.efs.stagingNodeSelector"):
        assert key in listed and key not in regions.keys_of(BASE)


def test_set_and_keep_each_lift_a_refusal_but_zones_cannot_be_kept():
    own = {"cluster": {"name": "llm-eu"}, "gpuNodeGroup": {"subnets": [{"availabilityZone": "eu-west-1a"}]}}
    keep = {"weightsStorage.efs.stagingNodeSecurityGroupIds", "gpuNodeGroup.capacityReservationId",
            "gpuNodeGroup.existing.securityGroupId", "weightsStorage.s3.bucketName", "weightsStorage.s3.bucketRegion",
            "edge.tls.acmCertificateArn", "edge.loadBalancerSubnetIds", "models[llama-70b].image.repository",
            "cluster.create.zones"}
    check = regions.region_problems("prod", "us-east-1", "eu-west-1", BASE, own, keep)
    assert [p.path for p in check.problems] == ["cluster.create.zones"]
    assert sorted(check.kept) == sorted(keep - {"cluster.create.zones"})


def test_values_already_of_the_new_region_are_not_refused():
    values = {"gpuNodeGroup": {"subnets": [{"availabilityZone": "eu-west-1a"}]},
              "models": [{"name": "m", "image": {"repository": "123456789012.dkr.ecr.eu-west-1.amazonaws.com/vllm"}}],
              "cluster": {"mode": "create", "name": "llm-x", "create": {"zones": ["eu-west-1a", "eu-west-1b"]}}}
    assert regions.region_problems("a", "us-east-1", "eu-west-1", values, own={}).problems == []


@pytest.mark.parametrize(("keep", "line"), [
    ("cluster.nme", 'llm-serving:--keep: not a region-bound key; did you mean "cluster.name"? (got "cluster.nme"; '
                    "expected cluster.name)"),
    ("environment", 'llm-serving:--keep: not a region-bound key (got "environment"; expected one of '
                    "cluster.create.zones, cluster.name, "),
    ("cluster.name", 'llm-serving:--keep: the clone also sets this key with --set (got "cluster.name"; expected '
                     "--set or --keep, not both)"),
])
def test_keep_names_a_region_bound_key_the_clone_does_not_set(keep, line):
    (problem,) = regions.keep_problems([keep], BASE, own={"cluster": {"name": "llm-eu"}})
    assert problem.line().startswith(line)
