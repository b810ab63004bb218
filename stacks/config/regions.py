"""The stack values that hold only in one AWS region, and why: what a clone into another region must set or keep.

A clone inherits every value of its base (`extends`). Most values mean the same in any region; the ones below
name an AWS resource or zone of the base's region, so in a clone whose `aws:region` differs they point at a
resource the clone's region does not have, or at one across regions. `clone` refuses such a clone until each is
set (`--set`) or kept on purpose (`--keep`, for a value that also holds in the new region), see
`region_problems`.

What is not here, and why, is listed too (`NOT_REGION_BOUND`): IAM is a global service, so a role's ARN holds in
every region (`arn:aws:iam::<account>:role/...` has no region field, IAM user guide "IAM identifiers"); node
labels belong to the cluster, not the region; an EKS AMI release version is published for every region and
resolved to the region's own AMI by the node group. The stack file names no EFS or FSx file system: the program
creates them, in the stack's region, as it does the bucket when `weightsStorage.s3.bucketName` is unset.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from stacks.config.overrides import lookup, parse_path
from stacks.config.problems import MISSING, Problem, closest

# A model's key in the table: stands for `models[<name>]` of each of the clone's models.
EACH_MODEL = "models[<name>]"
# A private ECR registry's host names its region (ECR user guide, "Amazon ECR private registry": the registry URL
# is https://<aws_account_id>.dkr.ecr.<region>.amazonaws.com).
ECR_HOST = re.compile(r"^\d{12}\.dkr\.ecr(-fips)?\.(?P<region>[a-z]{2}(-[a-z]+)+-\d)\.amazonaws\.com(\.cn)?/")


def _set(value: Any) -> bool:
    return value is not MISSING and value not in (None, "", [], {})


def _zones(value: Any) -> list[str]:
    """The availability zones of a list of zones or of subnets (`{id, availabilityZone}`)."""
    items = value if isinstance(value, list) else []
    return [str(i.get("availabilityZone") if isinstance(i, dict) else i) for i in items]


def _zones_elsewhere(value: Any, region: str) -> bool:
    # A zone's name is its region's and a letter (EC2 user guide, "Availability Zones": us-east-1a).
    return any(not re.fullmatch(rf"{re.escape(region)}[a-z]", zone) for zone in _zones(value))


def _ecr_elsewhere(value: Any, region: str) -> bool:
    found = ECR_HOST.match(str(value))
    return found is not None and found["region"] != region


@dataclass(frozen=True)
class RegionBound:
    """One key whose value holds only in its region."""

    key: str  # as --set and --keep name it; models[<name>] stands for each model
    reason: str  # why the value holds only in its region
    # Whether the base's value is bound to a region other than the clone's `region`: by default any value set.
    elsewhere: Callable[[Any, str], bool] = lambda value, region: _set(value)
    # Whether the program reads the key, from the clone's resolved values: by default always.
    read: Callable[[dict[str, Any]], bool] = lambda values: True
    # A value that spells its region (a zone) never holds in another: no --keep, and the other way out.
    instead_of_keep: str | None = None


def _looks_up_its_cluster(values: dict[str, Any]) -> bool:
    cluster = values.get("cluster")
    return not (isinstance(cluster, dict) and cluster.get("mode") == "create")


REGION_BOUND: tuple[RegionBound, ...] = (
    # Looked up with aws.eks.get_cluster_output (llm_serving/platform/kubernetes.py lookup_cluster).
    RegionBound("cluster.name", "an existing cluster is looked up by name in aws:region, and an EKS cluster's "
                "name is unique only within an account and region",
                read=_looks_up_its_cluster),
    RegionBound("cluster.create.zones", "availability zones are their region's own (us-east-1a)",
                elsewhere=_zones_elsewhere, instead_of_keep="--create-cluster <zones of {region}>"),
    RegionBound("gpuNodeGroup.subnets", "a subnet lies in one availability zone of one VPC, and zones are their "
                "region's own (us-east-1a)", elsewhere=_zones_elsewhere,
                instead_of_keep="--create-cluster <zones of {region}> (the clone creates its subnets)"),
    RegionBound("gpuNodeGroup.capacityReservationId", "a capacity reservation (or Capacity Block) is for one "
                "availability zone of one region"),
    RegionBound("gpuNodeGroup.existing.securityGroupId", "a security group belongs to one VPC, and a VPC to "
                "one region"),
    RegionBound("weightsStorage.efs.stagingNodeSecurityGroupIds", "a security group belongs to one VPC, and a "
                "VPC to one region"),
    RegionBound("weightsStorage.s3.bucketName", "an existing bucket lives in one region: pods elsewhere would "
                "stream every cold start across regions, at inter-region transfer prices"),
    RegionBound("weightsStorage.s3.bucketRegion", "it names the bucket's region, which the preview refuses "
                "unless it is aws:region"),
    RegionBound("edge.tls.acmCertificateArn", "an ACM certificate is regional (its ARN names the region) and a "
                "load balancer takes only a certificate of its own region"),
    RegionBound("edge.loadBalancerSubnetIds", "a subnet lies in one availability zone of one VPC, of one region"),
    RegionBound(f"{EACH_MODEL}.image.repository", "a private ECR registry is regional (<account>.dkr.ecr."
                "<region>.amazonaws.com): nodes elsewhere would pull every image across regions",
                elsewhere=_ecr_elsewhere),
)

# Values a region change leaves valid, with the reason: listed so that the table above is the whole answer.
NOT_REGION_BOUND: tuple[tuple[str, str], ...] = (
    ("weightsStorage.efs.stagingNodeRoleArn, gpuNodeGroup.existing.nodeRoleArn, edge.albControllerRoleArn, "
     "cluster.create.adminRoleArns", "IAM roles are global: their ARNs have no region"),
    ("weightsStorage.efs.stagingNodeSelector, gpuNodeGroup.existing.nodeSelector, gpuNodeGroup.existing."
     "tolerations", "node labels and taints belong to the cluster's nodes: they follow cluster.name"),
    ("gpuNodeGroup.amiReleaseVersion", "EKS publishes each release in every region, and the node group resolves it "
     "to its own region's AMI"),
    ("gpuNodeGroup.instanceType", "a name, not a resource; whether the region offers the type is the preflight's "
     "question"),
)


def keys_of(values: dict[str, Any]) -> dict[str, RegionBound]:
    """Every region-bound key of these values, models[<name>] spelled out for each model."""
    names = [m["name"] for m in values.get("models") or [] if isinstance(m, dict) and isinstance(m.get("name"), str)]
    found: dict[str, RegionBound] = {}
    for entry in REGION_BOUND:
        if entry.key.startswith(EACH_MODEL):
            found.update({entry.key.replace(EACH_MODEL, f"models[{name}]"): entry for name in names})
        else:
            found[entry.key] = entry
    return found


def _quoted(text: str) -> str:
    return f"'{text}'" if re.search(r"[\[\]<>{} ]", text) else text


@dataclass(frozen=True)
class RegionCheck:
    """What a clone into another region kept on purpose, and what it would inherit without saying so."""

    problems: list[Problem]
    kept: list[str]  # region-bound keys whose base value the clone keeps (--keep)


def region_problems(base: str, base_region: object, region: str, values: dict[str, Any], own: dict[str, Any],
                    keep: Collection[str] = ()) -> RegionCheck:
    """One problem per region-bound value the clone in `region` inherits from `base` (of `base_region`) without
    `--set` or `--keep`. `values` are the clone's resolved values, `own` its own (what its file sets)."""
    problems, kept = [], []
    where = base_region if isinstance(base_region, str) else "the region of its provider (aws:region unset)"
    for key, entry in keys_of(values).items():
        path = parse_path(key, "--keep")
        value = lookup(values, path)
        if lookup(own, path) is not MISSING or not entry.read(values) or not entry.elsewhere(value, region):
            continue
        if key in keep and entry.instead_of_keep is None:
            kept.append(key)
            continue
        set_it = f"--set {_quoted(f'{key}=<its value in {region}>')}"
        if entry.instead_of_keep is None:
            ways = f"{set_it}, or --keep {_quoted(key)} when {base}'s value holds in {region} too"
        else:
            ways = f"{set_it}, or {entry.instead_of_keep.format(region=region)}; not --keep: its zones are " \
                   f"{base}'s region's"
        problems.append(Problem(key, f"{base}'s value holds in {where}, not in this clone's aws:region {region}: "
                                f"{entry.reason}", value, ways))
    return RegionCheck(problems, kept)


def keep_problems(keep: Collection[str], values: dict[str, Any], own: dict[str, Any]) -> list[Problem]:
    """`--keep` names a region-bound key, and one the clone does not also set."""
    known = keys_of(values)
    problems = []
    for key in keep:
        if key not in known:
            close = closest(key, sorted(known))
            problems.append(Problem("--keep", "not a region-bound key" + (f'; did you mean "{close}"?' if close
                                                                         else ""), key,
                                    close or f"one of {', '.join(sorted(known))}"))
        elif lookup(own, parse_path(key, "--keep")) is not MISSING:
            problems.append(Problem("--keep", "the clone also sets this key with --set", key, "--set or --keep, "
                                    "not both"))
    return problems
