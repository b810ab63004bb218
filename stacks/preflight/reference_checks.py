"""The IAM roles and security groups the stack file names exist, as the program will hand them to AWS (an EFS
file-system policy, mount targets, access entries, a service account's role): a missing one fails the up at that
resource, after the node group and the file system are built."""

from __future__ import annotations

from botocore.exceptions import ClientError

from stacks.preflight.context import Context, could_not_check
from stacks.preflight.intent import Reference
from stacks.preflight.result import Finding, failed, passed, unknown

CHECK = "iam.references"
# The account id the AWS documentation writes its example ARNs with (IAM user guide, reference_identifiers.html,
# "IAM ARNs" examples): in a stack file, a placeholder left in place.
EXAMPLE_ACCOUNT = "123456789012"


def _code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


def _account(ctx: Context) -> str | None:
    """The account preflight reads: the caller's, else the cluster's (its ARN's fifth field)."""
    if ctx.account:
        return ctx.account
    arn = (ctx.cluster or {}).get("arn", "")
    fields = arn.split(":")
    return fields[4] if len(fields) > 4 and fields[4] else None


def _role(ctx: Context, ref: Reference) -> Finding:
    arn = ref.value
    account, name = arn.split(":")[4], arn.rsplit("/", 1)[1]  # (the key's pattern: arn:aws:iam::<12 digits>:role/...)
    ours = _account(ctx)
    if account == EXAMPLE_ACCOUNT and ours != EXAMPLE_ACCOUNT:
        return failed(CHECK, f"{ref.key} {arn}: {EXAMPLE_ACCOUNT} is the AWS documentation's example account, a "
                      "placeholder", f"set {ref.key} to the real role's ARN")
    if ours is not None and account != ours:
        if ref.node_role:
            return failed(CHECK, f"{ref.key} {arn} is a role of account {account}; the cluster's nodes run in {ours}, "
                          "and EC2 gives an instance a role of its own account only", f"set {ref.key} to the nodes' "
                          f"role in {ours} (aws eks describe-nodegroup ... --query nodegroup.nodeRole)")
        return unknown(CHECK, f"{ref.key} {arn} is a role of account {account}; preflight reads {ours}'s roles only",
                       f"check in {account} that the role exists and trusts what the program gives it to")
    try:
        role = ctx.iam.get_role(RoleName=name)["Role"]
    except ClientError as error:
        if _code(error) != "NoSuchEntity":
            raise
        return failed(CHECK, f"{ref.key}: no role {name} in account {ours or 'of this identity'} ({arn})",
                      f"create the role, or set {ref.key} to an existing role's ARN (aws iam list-roles --query "
                      "'Roles[].Arn')")
    if role.get("Arn") != arn:
        return failed(CHECK, f"{ref.key} {arn}: the role named {name} is {role.get('Arn')} (another path)",
                      f"set {ref.key} to {role.get('Arn')}")
    return passed(CHECK, f"{ref.key}: role {arn} exists")


def _group(ctx: Context, ref: Reference, vpc: str | None) -> Finding:
    group_id = ref.value
    region = ctx.intent.region
    where = f"the cluster's VPC {vpc}" if vpc else "the cluster's VPC"
    try:
        (group,) = ctx.ec2.describe_security_groups(GroupIds=[group_id])["SecurityGroups"]
    except ClientError as error:
        if _code(error) not in ("InvalidGroup.NotFound", "InvalidGroupId.NotFound", "InvalidGroupId.Malformed"):
            raise
        listing = f" (aws ec2 describe-security-groups --filters Name=vpc-id,Values={vpc})" if vpc else ""
        return failed(CHECK, f"{ref.key}: no security group {group_id} in {region}",
                      f"set {ref.key} to a group of {where}{listing}")
    found = group.get("VpcId")
    if vpc is not None and found != vpc:
        return failed(CHECK, f"{ref.key}: {group_id} is in {found}, the cluster in {vpc}: the cluster's nodes "
                      "cannot carry it (an instance's security groups are its VPC's), so what admits it never admits "
                      "them", f"set {ref.key} to a group of {where}")
    compared = "the cluster's VPC" if vpc is not None else "VPC not compared: the cluster was not found"
    return passed(CHECK, f"{ref.key}: security group {group_id} ({group.get('GroupName', '?')}) in {found} "
                  f"({compared})")


def references(ctx: Context) -> list[Finding]:
    """Each role ARN and security-group id the stack names (where the program reads it) exists; a group is in the
    cluster's VPC when the cluster is known."""
    i = ctx.intent
    vpc = (ctx.cluster or {}).get("resourcesVpcConfig", {}).get("vpcId") or None
    found = []
    # One line per reference, each guarded on its own: a refused GetRole must not hide a missing group.
    for ref in i.role_references:
        try:
            found.append(_role(ctx, ref))
        except Exception as error:  # noqa: BLE001 - an error is that reference's could-not-check line
            found.append(_named(could_not_check(CHECK, error, ("iam:GetRole",)), ref))
    for ref in i.security_group_references:
        try:
            found.append(_group(ctx, ref, vpc))
        except Exception as error:  # noqa: BLE001
            found.append(_named(could_not_check(CHECK, error, ("ec2:DescribeSecurityGroups",)), ref))
    return found


def _named(finding: Finding, ref: Reference) -> Finding:
    return unknown(finding.check, f"{ref.key} {ref.value}: {finding.reason}", finding.fix)
