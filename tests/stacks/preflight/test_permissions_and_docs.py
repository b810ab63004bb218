"""The read-only policy names real, read-only operations and exactly the ones the checks make; the
docs' table and the policy file are what the catalog generates."""

from __future__ import annotations

import functools
import json

import botocore.session
import pytest

from stacks.preflight import CHECKS, aws_actions
from tools import preflight_docs


@functools.cache  # parsed once per process: each parametrized case only reads the models
def service_models() -> dict[str, object]:
    """IAM's action prefix is the service's signing name (service-quotas signs as servicequotas)."""
    session = botocore.session.get_session()
    models = {}
    for name in ("eks", "ec2", "service-quotas", "sts", "s3", "ssm", "iam"):
        model = session.get_service_model(name)
        models[model.signing_name] = model
    return models


def test_the_policy_file_is_valid_json_and_generated_from_the_checks():
    text = preflight_docs.POLICY.read_text()
    document = json.loads(text)
    assert text == preflight_docs.policy(), "run `make preflight-docs`"
    reads, bucket = document["Statement"]
    assert (reads["Effect"], reads["Resource"]) == ("Allow", "*")
    assert sorted(reads["Action"] + bucket["Action"]) == sorted(aws_actions())
    # The S3 reads (the stack's existing bucket) reach only buckets of the caller's own account.
    assert bucket["Action"] and all(a.startswith("s3:") for a in bucket["Action"])
    assert not any(a.startswith("s3:") for a in reads["Action"])
    assert (bucket["Resource"], bucket["Condition"]) == (
        "arn:aws:s3:::*", {"StringEquals": {"aws:ResourceAccount": "${aws:PrincipalAccount}"}})


# IAM actions that authorize an API operation of another name (S3 API reference, HeadBucket: "you must
# have the s3:ListBucket permission").
OPERATION_OF_ACTION = {"s3:ListBucket": "HeadBucket"}


def _operation(action: str) -> str:
    return OPERATION_OF_ACTION.get(action, action.split(":")[1])


@pytest.mark.parametrize("action", aws_actions())
def test_every_action_is_a_read_only_operation_of_its_service_model(action):
    prefix, operation = action.split(":")[0], _operation(action)
    model = service_models()[prefix]
    assert operation in model.operation_names
    assert operation.startswith(("Describe", "Get", "List", "Head"))


def test_the_calls_the_checks_make_are_the_policy_actions():
    """Every boto3 call in the AWS checks' modules is a declared action, and every declared action is called."""
    import inspect
    import re

    from stacks.preflight import aws_checks, node_checks, reference_checks, s3_checks

    source = "".join(inspect.getsource(m) for m in (aws_checks, s3_checks, node_checks, reference_checks))
    called = set(re.findall(r"ctx\.(?:eks|ec2|quotas|s3|ssm|iam)\.([a-z_]+)\(", source))
    models = service_models()
    declared = set()
    for action in aws_actions():
        declared.add(models[action.split(":")[0]].operation_model(_operation(action)).name)
    snake = {re.sub(r"(?<!^)(?=[A-Z])", "_", op).lower() for op in declared}
    assert called == snake


def test_the_docs_table_lists_every_check_and_is_current():
    page = preflight_docs.PAGE.read_text()
    assert preflight_docs.splice(page) == page, "run `make preflight-docs`"
    for check in CHECKS:
        assert f"| `{check.id}` |" in page


def test_the_quota_figure_in_the_docs_is_preflights():
    from tests.stacks.preflight.support import stack_intent

    prod = stack_intent("prod")
    figure = f"{prod.peak_nodes} x {prod.vcpus_per_node} = {prod.peak_nodes * prod.vcpus_per_node:,}"
    for page in ("operations.md", "preflight.md"):
        assert figure in (preflight_docs.ROOT / "docs" / page).read_text(), page


def test_the_staging_disk_figures_in_the_docs_are_the_checks():
    import math

    from llm_serving import serving
    from llm_serving.cluster import node_disk

    need = serving.S3_STAGE_EPHEMERAL_GIB
    scheduled = math.ceil((need + node_disk.KUBE_RESERVED_EPHEMERAL_GIB) / (1 - node_disk.NODEFS_EVICTION_FRACTION))
    assert node_disk.allocatable_ephemeral_gib(scheduled) >= need > node_disk.allocatable_ephemeral_gib(scheduled - 1)
    page = preflight_docs.PAGE.read_text()
    for figure in (f"requests {need} GiB", f"volume of {scheduled} GiB or more",
                   f"offers {node_disk.allocatable_ephemeral_gib(50):.0f})",
                   f"asks for {node_disk.disk_for_ephemeral_gib(need)} GiB"):
        assert figure in page, figure
