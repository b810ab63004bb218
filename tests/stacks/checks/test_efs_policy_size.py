"""The weights file system's policy against EFS's 20,000 characters (PutFileSystemPolicy): sent compact, and a stack
whose policy would pass the limit refused at preview, naming the models, instead of failing `pulumi up` after every
access point exists."""

from __future__ import annotations

import json
import re
from typing import Any

import boto3

from llm_serving import storage
from llm_serving.platform.args import validate
from llm_serving.stack.rules import RULES
from llm_serving.stack.rules import platform as platform_rules
from llm_serving.storage import objects, policy_size
from stacks import checks
from stacks.config import ServingStackArgs
from tests.stacks.checks.test_gpu_node_group_checks import BASE


def _models(count: int, compile_cache: str = "shared") -> ServingStackArgs:
    """BASE with `count` copies of its one-GPU model and room for every producer (maxNodes 100)."""
    model = BASE["models"][0]
    models = [{**model, "name": f"qwen-{i}", "route": {"pathPrefix": f"/q{i}"}, "compileCache": compile_cache}
              for i in range(count)]
    group = {**BASE["gpuNodeGroup"], "scaling": {"minNodes": 1, "maxNodes": 100, "desiredNodes": 1}}
    return validate(ServingStackArgs, {**BASE, "gpuNodeGroup": group, "models": models})


def _lines(config: ServingStackArgs) -> list[str]:
    return [p.line() for p in checks.check(config)]


def test_efs_receives_the_policy_compact(rendered):
    (policy,) = rendered["prod"].by_type()["aws:efs/fileSystemPolicy:FileSystemPolicy"]
    sent = policy["inputs"]["policy"]
    assert sent == json.dumps(json.loads(sent), separators=(",", ":"))


def test_a_stack_whose_file_system_policy_would_pass_efs_limit_is_refused_at_preview():
    # 28 one-GPU models with a shared cache each, in us-east-1, with BASE's staging role and a created GPU role. The
    # weights storage rules are among the preview's (stack.rules.RULES); the other rules plan each model again.
    assert platform_rules.weights_storage_rules in RULES
    assert [p.line() for p in platform_rules.weights_storage_rules(_models(28))] == [
        "llm-serving:models: the weights file system's policy would be 20,225 characters, over the 20,000 EFS takes: "
        "it names each model's serving access point twice and each shared compile cache's access point five times "
        '(got "28 models, 28 with a shared compile cache"; expected compileCache off on 1 of them, or fewer models '
        "on this file system)"]
    # One under the limit, or the caches off: the rule (which the preview above runs) has nothing to say.
    assert list(platform_rules.efs_policy_rules(_models(27))) == []
    assert list(platform_rules.efs_policy_rules(_models(28, compile_cache="off"))) == []


def test_the_estimate_counts_arns_shaped_as_efs_and_iam_shape_them(monkeypatch):
    # The placeholders match the EFS API's own patterns (botocore's efs model), so the estimate counts the characters
    # of real ARNs; a role the stack creates counts at IAM's longest name.
    model = boto3.client("efs", region_name="us-east-1").meta.service_model
    captured: dict[str, Any] = {}

    def capture(file_system_arn: str, **kwargs: Any) -> dict[str, Any]:
        captured.update(kwargs, file_system_arn=file_system_arn)
        return objects.file_system_policy(file_system_arn, **kwargs)

    monkeypatch.setattr(policy_size, "file_system_policy", capture)
    storage.file_system_policy_length("us-east-1", reader_role_arns=[None], writer_role_arn=None,
                                      serving_access_points=2, compile_cache_access_points=1)
    points = [*captured["serving_access_point_arns"], *captured["compile_cache_access_point_arns"]]
    assert len(set(points)) == 3
    for arn in points:
        assert re.fullmatch(model.shape_for("AccessPointArn").metadata["pattern"], arn), arn
    assert re.fullmatch(model.shape_for("FileSystemId").metadata["pattern"], captured["file_system_arn"])
    assert model.shape_for("Policy").metadata["max"] == storage.FILE_SYSTEM_POLICY_MAX_CHARS
    assert captured["reader_role_arns"] == ["arn:aws:iam::000000000000:role/" + "r" * 64]
    assert policy_size.partition("us-gov-west-1") == "aws-us-gov" and policy_size.partition("cn-north-1") == "aws-cn"
