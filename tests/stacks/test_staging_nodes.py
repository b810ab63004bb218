"""Which nodes the weights storage admits and lets write, per cluster mode: the stack file's staging nodes
with an existing cluster, the created CPU nodes where a created cluster's file is silent."""

from __future__ import annotations

import re
from typing import Any

import pytest
from pydantic import ValidationError

from llm_serving.platform import EksCluster
from llm_serving.platform.args import validate
from llm_serving.stack import ClusterFacts, site
from llm_serving.stack.site import StagingNodes
from stacks import checks
from stacks.config import ServingStackArgs
from tests.stacks.checks.test_model_checks import BASE, LLAMA_70B

CLUSTER = EksCluster(name="llm-prod", endpoint="https://e", certificate_authority="ca",  # type: ignore[arg-type]
                     cluster_security_group_id="sg-0123456789abcdef0", region="us-east-1",  # type: ignore[arg-type]
                     vpc_id="vpc-1", vpc_cidr="10.0.0.0/16")  # type: ignore[arg-type]
ROLE = "arn:aws:iam::123456789012:role/llm-prod-cpu-nodes"
# What the program hands over for a cluster it created (stacks/program.py created_facts).
CREATED = ClusterFacts(vpc_id="vpc-1", cluster_security_group_id="sg-0123456789abcdef0", region="us-east-1",
                       gpu_subnet_ids={"us-east-1a": "subnet-created-a", "us-east-1b": "subnet-created-b"},
                       staging_node_role_arn="arn:aws:iam::123456789012:role/cluster-system-node-role",
                       staging_node_security_group_id="cluster-system-nodes-id",
                       staging_node_selector={"llm-serving/node-role": "system"})


def config(efs: dict[str, Any], **top: Any) -> ServingStackArgs:
    return validate(ServingStackArgs, {**BASE, "models": [LLAMA_70B], "weightsStorage": {"efs": efs}, **top})


def test_an_existing_cluster_admits_the_stack_files_staging_groups():
    staging = site.resolve(config({"stagingNodeRoleArn": ROLE,
                                   "stagingNodeSecurityGroupIds": ["sg-0cc00000000000001"],
                                   "stagingNodeSelector": {"pool": "cpu"}}), CLUSTER).staging
    assert staging == StagingNodes(ROLE, (("staging-nodes-sg-0cc00000000000001", "sg-0cc00000000000001"),),
                                   {"pool": "cpu"})


def test_a_created_cluster_stands_in_its_cpu_nodes_where_the_file_is_silent():
    staging = site.resolve(config({}, clusterFacts=CREATED), None).staging
    assert staging == StagingNodes(CREATED.staging_node_role_arn, (("staging-nodes", "cluster-system-nodes-id"),),
                                   {"llm-serving/node-role": "system"})
    # What the file names wins.
    named = site.resolve(
        config({"stagingNodeRoleArn": ROLE, "stagingNodeSecurityGroupIds": ["sg-0cc00000000000001"]},
               clusterFacts=CREATED), None).staging
    assert (named.role_arn, named.security_groups) == (ROLE, (("staging-nodes-sg-0cc00000000000001",
                                                               "sg-0cc00000000000001"),))


def test_a_dev_stack_without_staging_groups_falls_back_to_the_cluster_group_and_warns(monkeypatch):
    warned: list[str] = []
    monkeypatch.setattr(site.pulumi.log, "warn", lambda message, *_, **__: warned.append(message))
    staging = site.resolve(config({}, environment="dev"), CLUSTER).staging
    assert staging.security_groups == (("cluster-security-group", "sg-0123456789abcdef0"),)
    assert staging.role_arn is None
    assert warned == ["weightsStorage.efs.stagingNodeSecurityGroupIds is empty: the mount targets admit NFS from the "
                      "cluster security group, i.e. from every node"]
    # FSx and existing classes have no mount targets to warn about.
    site.resolve(config({}, environment="dev", weightsStorage={"backend": "fsxLustre"}), CLUSTER)
    assert len(warned) == 1


def test_prod_on_an_existing_cluster_must_name_the_staging_nodes_role_and_group():
    lines = [p.line() for p in checks.check(config({}))]
    assert lines == [
        "llm-serving:weightsStorage.efs.stagingNodeRoleArn: prod needs the staging nodes' role so the file-system "
        "policy lets only it write the weights (got null; expected the IAM role ARN of the nodes the staging Jobs "
        "run on)",
        "llm-serving:weightsStorage.efs.stagingNodeSelector: prod needs the staging nodes' labels so the staging Job "
        "runs where the file-system policy and the mount targets let it write (got {}; expected the labels of the "
        "nodes whose role is stagingNodeRoleArn, e.g. {eks.amazonaws.com/nodegroup: <the CPU node group>})",
        "llm-serving:weightsStorage.efs.stagingNodeSecurityGroupIds: prod needs the staging nodes' own security group "
        "so the mount targets admit NFS only from them and the GPU nodes (got []; expected the id of a security group "
        "the staging nodes carry besides the cluster's, e.g. [sg-0123456789abcdef0])",
    ]
    assert [p.line() for p in checks.check(config({}, environment="dev"))] == []


@pytest.mark.parametrize(("groups", "message"), [
    (["sg-123"], "item 'sg-123' is not valid"),
    ([f"sg-0cc0000000000000{i}" for i in range(6)], "List should have at most 5 items after validation, not 6"),
])
def test_staging_group_ids_that_cannot_be_security_groups_are_refused(groups, message):
    with pytest.raises(ValidationError, match=re.escape(message)):
        config({"stagingNodeRoleArn": ROLE, "stagingNodeSecurityGroupIds": groups})
