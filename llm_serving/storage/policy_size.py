"""The weights file system's policy as EFS receives it, and its length before anything exists (pure).

EFS takes a file-system policy of at most 20,000 characters (EFS API reference, PutFileSystemPolicy: "EFS file
system policies have a 20,000 character limit"; botocore's efs model, Policy: max 20000). The policy names every
model's access point, twice for its serving access point and five times for its compile cache's
(objects.file_system_policy), so it grows with the models: the preview refuses a stack whose policy would pass the
limit (llm_serving/stack/rules/platform.py), where `pulumi up` would otherwise fail at PutFileSystemPolicy after
creating every access point.

At preview the ARNs are not known yet: the length is that of the same policy with ARNs of the lengths AWS gives
them. EFS IDs are `fs-` or `fsap-` and 17 hex digits (EFS user guide, create-access-point.html:
`fs-abcdef0123456789a`, `fsap-abcd1234ef5678901`; the API's pattern allows 8 to 40, botocore's efs model
AccessPointId); an account ID is 12 digits (AWS Account Management reference, manage-acct-identifiers.html); a
role the stack creates (its ARN an output) is counted at IAM's longest role name, 64 characters (IAM user guide,
reference_iam-quotas.html), and without a path, as the program creates it.
"""

from __future__ import annotations

import json
from typing import Any

from .objects import file_system_policy

FILE_SYSTEM_POLICY_MAX_CHARS = 20_000
EFS_ID_HEX_DIGITS = 17
ACCOUNT_ID = "0" * 12
ROLE_NAME_MAX_CHARS = 64


def file_system_policy_json(policy: dict[str, Any]) -> str:
    """The policy as sent to EFS: compact, since every character counts against the limit."""
    return json.dumps(policy, separators=(",", ":"))


def partition(region: str) -> str:
    """The ARN partition of a region (AWS General Reference, aws-arns-and-namespaces.html: aws, aws-cn for the
    China regions, aws-us-gov for GovCloud)."""
    if region.startswith("cn-"):
        return "aws-cn"
    if region.startswith("us-gov-"):
        return "aws-us-gov"
    return "aws"


def file_system_policy_length(region: str, *, reader_role_arns: list[str | None], writer_role_arn: str | None,
                              serving_access_points: int, compile_cache_access_points: int) -> int:
    """The length of the file-system policy EFS would receive for this many access points in `region`. A role
    given as None is one the stack creates, counted at the longest ARN it can have."""
    arn_partition = partition(region)

    def efs_arn(kind: str, prefix: str, number: int) -> str:
        resource = f"{kind}/{prefix}-{number:0{EFS_ID_HEX_DIGITS}x}"
        return f"arn:{arn_partition}:elasticfilesystem:{region}:{ACCOUNT_ID}:{resource}"

    def role(arn: str | None, filler: str) -> str:
        return arn if arn is not None else f"arn:{arn_partition}:iam::{ACCOUNT_ID}:role/{filler * ROLE_NAME_MAX_CHARS}"

    points = [efs_arn("access-point", "fsap", n) for n in range(serving_access_points + compile_cache_access_points)]
    policy = file_system_policy(
        efs_arn("file-system", "fs", 0),
        reader_role_arns=[role(arn, "r") for arn in reader_role_arns], writer_role_arn=role(writer_role_arn, "w"),
        serving_access_point_arns=points[:serving_access_points],
        compile_cache_access_point_arns=points[serving_access_points:])
    return len(file_system_policy_json(policy))
