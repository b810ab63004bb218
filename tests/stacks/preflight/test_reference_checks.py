"""The role ARNs and security-group ids a stack names exist (and a group is in the cluster's VPC): pass, fail and
could-not-check through botocore's Stubber, one line per reference."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from stacks.preflight.intent import Reference
from stacks.preflight.result import Outcome
from tests.stacks.preflight.support import CLUSTER, Aws, context, stack_intent
from tests.stacks.preflight.test_aws_checks import run

ROLE_KEY = "weightsStorage.efs.stagingNodeRoleArn"
GROUP_KEY = "weightsStorage.efs.stagingNodeSecurityGroupIds[0]"
ROLE = "arn:aws:iam::111122223333:role/llm-prod-cpu-nodes"  # the account of support.CLUSTER
GROUP = "sg-0cc00000000000001"
VPC = CLUSTER["resourcesVpcConfig"]["vpcId"]


@pytest.fixture
def aws():
    clients = Aws()
    yield clients
    clients.done()


def role(arn: str = ROLE) -> dict:
    return {"Role": {"Path": "/", "RoleName": arn.rsplit("/", 1)[1], "RoleId": "AROAEXAMPLEID12345678",
                     "Arn": arn, "CreateDate": datetime(2026, 1, 1, tzinfo=UTC)}}


def security_groups(group_id: str, vpc: str = VPC) -> dict:
    return {"SecurityGroups": [{"GroupId": group_id, "GroupName": "llm-prod-cpu-nodes", "VpcId": vpc,
                                "Description": "CPU nodes", "OwnerId": "111122223333"}]}


def references(*roles: Reference, groups: tuple[Reference, ...] = ()):
    return stack_intent(role_references=roles, security_group_references=groups)


STAGING = Reference(ROLE_KEY, ROLE, node_role=True)
STAGING_GROUP = Reference(GROUP_KEY, GROUP)


def test_prods_references_are_the_keys_the_program_reads():
    prod = stack_intent("prod")
    assert prod.role_references == (Reference(ROLE_KEY, "arn:aws:iam::123456789012:role/llm-prod-cpu-nodes",
                                              node_role=True),)
    assert prod.security_group_references == (STAGING_GROUP,)


def test_a_role_and_a_group_that_exist_in_the_clusters_vpc_pass(aws):
    aws.respond("iam", "get_role", role(), {"RoleName": "llm-prod-cpu-nodes"})
    aws.respond("ec2", "describe_security_groups", security_groups(GROUP), {"GroupIds": [GROUP]})
    found = run("iam.references", context(aws, references(STAGING, groups=(STAGING_GROUP,)), cluster=CLUSTER))
    assert [(f.outcome, f.reason) for f in found] == [
        (Outcome.PASS, f"{ROLE_KEY}: role {ROLE} exists"),
        (Outcome.PASS, f"{GROUP_KEY}: security group {GROUP} (llm-prod-cpu-nodes) in {VPC} (the cluster's VPC)"),
    ]


def test_a_missing_role_fails_naming_the_key_and_the_arn(aws):
    aws.error("iam", "get_role", "NoSuchEntity", 404, {"RoleName": "llm-prod-cpu-nodes"})
    (finding,) = run("iam.references", context(aws, references(STAGING), cluster=CLUSTER))
    assert finding.outcome is Outcome.FAIL
    assert finding.reason == f"{ROLE_KEY}: no role llm-prod-cpu-nodes in account 111122223333 ({ROLE})"
    assert finding.fix.startswith(f"create the role, or set {ROLE_KEY} to an existing role's ARN")


def test_prods_placeholder_role_fails_without_a_call(aws):
    (finding,) = run("iam.references", context(aws, references(*stack_intent("prod").role_references),
                                               account="111122223333"))
    assert finding.outcome is Outcome.FAIL
    assert finding.reason == (f"{ROLE_KEY} arn:aws:iam::123456789012:role/llm-prod-cpu-nodes: 123456789012 is the "
                              "AWS documentation's example account, a placeholder")
    assert finding.fix == f"set {ROLE_KEY} to the real role's ARN"


def test_a_node_role_of_another_account_fails_and_another_role_could_not_check(aws):
    elsewhere = "arn:aws:iam::444455556666:role/llm-prod-cpu-nodes"
    alb = Reference("edge.albControllerRoleArn", "arn:aws:iam::444455556666:role/alb-controller")
    node, controller = run("iam.references", context(aws, references(Reference(ROLE_KEY, elsewhere, node_role=True),
                                                                      alb), cluster=CLUSTER))
    assert node.outcome is Outcome.FAIL
    assert node.reason.startswith(f"{ROLE_KEY} {elsewhere} is a role of account 444455556666; the cluster's nodes "
                                  "run in 111122223333")
    assert controller.outcome is Outcome.COULD_NOT_CHECK
    assert controller.reason == ("edge.albControllerRoleArn arn:aws:iam::444455556666:role/alb-controller is a role "
                                 "of account 444455556666; preflight reads 111122223333's roles only")


def test_a_role_at_another_path_fails_with_its_real_arn(aws):
    aws.respond("iam", "get_role", role("arn:aws:iam::111122223333:role/nodes/llm-prod-cpu-nodes"))
    (finding,) = run("iam.references", context(aws, references(STAGING), cluster=CLUSTER))
    assert finding.outcome is Outcome.FAIL
    assert finding.fix == f"set {ROLE_KEY} to arn:aws:iam::111122223333:role/nodes/llm-prod-cpu-nodes"


def test_a_missing_group_or_one_in_another_vpc_fails_naming_the_key(aws):
    aws.error("ec2", "describe_security_groups", "InvalidGroup.NotFound", 400, {"GroupIds": [GROUP]})
    (finding,) = run("iam.references", context(aws, references(groups=(STAGING_GROUP,)), cluster=CLUSTER))
    assert finding.outcome is Outcome.FAIL
    assert finding.reason == f"{GROUP_KEY}: no security group {GROUP} in us-east-1"
    assert finding.fix == (f"set {GROUP_KEY} to a group of the cluster's VPC {VPC} (aws ec2 describe-security-groups "
                           f"--filters Name=vpc-id,Values={VPC})")
    aws.respond("ec2", "describe_security_groups", security_groups(GROUP, vpc="vpc-0fff0000000000009"))
    (finding,) = run("iam.references", context(aws, references(groups=(STAGING_GROUP,)), cluster=CLUSTER))
    assert finding.outcome is Outcome.FAIL
    assert finding.reason.startswith(f"{GROUP_KEY}: {GROUP} is in vpc-0fff0000000000009, the cluster in {VPC}")


def test_a_refused_lookup_could_not_check_that_reference_only(aws):
    aws.error("iam", "get_role", "AccessDenied", 403)
    aws.respond("ec2", "describe_security_groups", security_groups(GROUP))
    role_line, group_line = run("iam.references", context(aws, references(STAGING, groups=(STAGING_GROUP,)),
                                                          cluster=CLUSTER))
    assert role_line.outcome is Outcome.COULD_NOT_CHECK
    assert role_line.reason == f"{ROLE_KEY} {ROLE}: GetRole refused: AccessDenied"
    assert role_line.fix.startswith("allow iam:GetRole for this identity")
    assert group_line.outcome is Outcome.PASS


def test_without_the_cluster_a_group_is_found_but_its_vpc_not_compared(aws):
    aws.respond("ec2", "describe_security_groups", security_groups(GROUP))
    (finding,) = run("iam.references", context(aws, references(groups=(STAGING_GROUP,))))
    assert finding.outcome is Outcome.PASS
    assert finding.reason.endswith("(VPC not compared: the cluster was not found)")


def test_a_stack_naming_no_role_nor_group_checks_nothing(aws):
    assert run("iam.references", context(aws, references())) == []
