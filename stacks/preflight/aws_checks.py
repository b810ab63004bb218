"""Checks of the AWS account: the cluster, its add-ons, the add-on configuration the program sends,
vCPU quotas, instance offerings and capacity reservations (read-only calls through boto3 clients)."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import jsonschema
from botocore.exceptions import ClientError

from stacks.config import CapacityType
from stacks.preflight.context import ClusterUnknown, Context
from stacks.preflight.intent import POD_IDENTITY_AGENT, VPC_CNI, AddonInstall, instance_family_letter
from stacks.preflight.result import Finding, failed, passed, unknown

OPERATIONS = "docs/operations.md#before-the-first-up"


def _code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


def _cluster(ctx: Context) -> dict[str, Any]:
    if ctx.cluster is None:
        raise ClusterUnknown()
    return ctx.cluster


def cluster_exists(ctx: Context) -> list[Finding]:
    i = ctx.intent
    try:
        ctx.cluster = ctx.eks.describe_cluster(name=i.cluster_name)["cluster"]
    except ClientError as error:
        if _code(error) != "ResourceNotFoundException":
            raise
        return [failed("cluster.exists", f"no EKS cluster named {i.cluster_name} in {i.region}",
                       "set cluster.name, or aws:region in the stack file, to the cluster's")]
    return [passed("cluster.exists", f"{i.cluster_name} in {i.region}")]


def cluster_active(ctx: Context) -> list[Finding]:
    status = _cluster(ctx).get("status", "")
    if status != "ACTIVE":
        return [failed("cluster.active", f"status {status}: EKS refuses node groups and add-ons until ACTIVE",
                       "wait for the cluster's update to finish (aws eks describe-cluster), then run again")]
    return [passed("cluster.active", "ACTIVE")]


def cluster_version(ctx: Context) -> list[Finding]:
    running = _cluster(ctx).get("version", "")
    wanted = ctx.intent.kubernetes_version
    if running != wanted:
        return [failed("cluster.version", f"cluster runs Kubernetes {running}, the stack says {wanted}: the "
                       "program stops before creating anything",
                       f"set cluster.kubernetesVersion: \"{running}\" (or upgrade the cluster first)")]
    return [passed("cluster.version", f"Kubernetes {running}, as cluster.kubernetesVersion says")]


def cluster_subnets(ctx: Context) -> list[Finding]:
    cluster = _cluster(ctx)
    vpc = cluster.get("resourcesVpcConfig", {}).get("vpcId", "")
    wanted = dict(ctx.intent.subnets)
    try:
        found = ctx.ec2.describe_subnets(SubnetIds=list(wanted))["Subnets"]
    except ClientError as error:
        if _code(error) != "InvalidSubnetID.NotFound":
            raise
        return [failed("cluster.subnets", f"a subnet does not exist in {ctx.intent.region}: "
                       f"{error.response['Error'].get('Message', '')}", "fix gpuNodeGroup.subnets[].id")]
    problems = []
    for subnet in found:
        sid = subnet["SubnetId"]
        if subnet.get("VpcId") != vpc:
            problems.append(f"{sid} is in {subnet.get('VpcId')}, the cluster in {vpc}")
        if subnet.get("AvailabilityZone") != wanted.get(sid):
            problems.append(f"{sid} is in zone {subnet.get('AvailabilityZone')}, the stack says {wanted.get(sid)}")
    if problems:
        return [failed("cluster.subnets", "; ".join(problems),
                       "fix gpuNodeGroup.subnets (id and availabilityZone) to the cluster VPC's private subnets")]
    return [passed("cluster.subnets", f"{len(found)} subnet(s) in the cluster's VPC {vpc}, zones as configured")]


def _addon(ctx: Context, name: str) -> dict[str, Any] | None:
    try:
        return ctx.eks.describe_addon(clusterName=ctx.intent.cluster_name, addonName=name)["addon"]
    except ClientError as error:
        if _code(error) == "ResourceNotFoundException":
            return None
        raise


def pod_identity_agent(ctx: Context) -> list[Finding]:
    users = ctx.intent.pod_identity_users
    if not users:
        return []
    addon = _addon(ctx, POD_IDENTITY_AGENT)
    needs = f"{' and '.join(users)} use EKS Pod Identity"
    create = (f"aws eks create-addon --cluster-name {ctx.intent.cluster_name} --addon-name {POD_IDENTITY_AGENT} "
              f"(the program does not create it; {OPERATIONS})")
    if addon is None:
        return [failed("addons.pod-identity-agent", f"{needs}, and the {POD_IDENTITY_AGENT} add-on is not "
                       "installed: their pods would get no AWS credentials", create)]
    if addon.get("status") not in ("ACTIVE", "UPDATING"):
        return [failed("addons.pod-identity-agent", f"{POD_IDENTITY_AGENT} is {addon.get('status')}",
                       f"aws eks describe-addon --cluster-name {ctx.intent.cluster_name} --addon-name "
                       f"{POD_IDENTITY_AGENT}: fix the issues it lists")]
    return [passed("addons.pod-identity-agent", f"{POD_IDENTITY_AGENT} {addon.get('addonVersion')} "
                   f"{addon.get('status')} ({needs})")]


def vpc_cni_network_policy(ctx: Context) -> list[Finding]:
    addon = _addon(ctx, VPC_CNI)
    check = "addons.vpc-cni-network-policy"
    if addon is None:
        return [unknown(check, "vpc-cni is not an EKS add-on here (self-managed, or another CNI): whether "
                        "NetworkPolicies are enforced cannot be read from the EKS API",
                        "confirm the CNI enforces NetworkPolicies; the stack's isolation relies on them")]
    raw = addon.get("configurationValues") or "{}"
    try:
        values = json.loads(raw)
    except json.JSONDecodeError:
        values = {}
    # The add-on's schema types it as a string "true"/"false" (EKS user guide, cni-network-policy).
    if str(values.get("enableNetworkPolicy", "false")).lower() != "true":
        return [failed(check, "vpc-cni does not enforce NetworkPolicies (configurationValues has no "
                       "enableNetworkPolicy \"true\"): the stack's policies would be accepted and ignored",
                       f"aws eks update-addon --cluster-name {ctx.intent.cluster_name} --addon-name vpc-cni "
                       "--configuration-values '{\"enableNetworkPolicy\":\"true\"}'")]
    return [passed(check, f"vpc-cni {addon.get('addonVersion')} enforces NetworkPolicies")]


def _ours(addon: dict[str, Any], tags: dict[str, str]) -> bool:
    return all(addon.get("tags", {}).get(k) == v for k, v in tags.items())


def addon_conflicts(ctx: Context) -> list[Finding]:
    found = []
    for install in ctx.intent.addons:
        addon = _addon(ctx, install.name)
        if addon is None:
            found.append(passed("addons.conflicts", f"{install.name}: not installed; the up creates it"))
        elif _ours(addon, ctx.intent.tags):
            found.append(passed("addons.conflicts", f"{install.name}: created by this stack (its tags)"))
        else:
            found.append(failed("addons.conflicts", f"{install.name} is already installed, not by this stack: "
                                "creating it again fails (ResourceInUseException) after the node group",
                                f"set {install.switch} to keep the cluster's"))
    return found


def _target_version(ctx: Context, install: AddonInstall) -> tuple[str, str]:
    """The version the program's add-on will run: its pin (a created cluster's add-ons), the installed
    one on an existing stack (no version is pinned, so an update keeps it), else EKS's default for the
    cluster's Kubernetes version."""
    if install.version is not None:
        return install.version, f"pinned for Kubernetes {ctx.intent.kubernetes_version}"
    addon = _addon(ctx, install.name)
    if addon is not None and _ours(addon, ctx.intent.tags):
        return addon["addonVersion"], "installed"
    version = _cluster(ctx).get("version", ctx.intent.kubernetes_version)
    answer = ctx.eks.describe_addon_versions(addonName=install.name, kubernetesVersion=version)
    versions = [v for a in answer.get("addons", []) for v in a.get("addonVersions", [])]
    for candidate in versions:
        if any(c.get("clusterVersion") == version and c.get("defaultVersion") for c in candidate.get(
                "compatibilities", [])):
            return candidate["addonVersion"], f"EKS's default for {version}"
    if versions:
        return versions[0]["addonVersion"], f"the newest for {version} (none marked default)"
    raise LookupError(f"EKS lists no {install.name} version for Kubernetes {version}")


def addon_configuration(ctx: Context) -> list[Finding]:
    found = []
    for install in ctx.intent.addons:
        if install.configuration is None:
            continue
        check = "addons.configuration"
        try:
            version, why = _target_version(ctx, install)
        except LookupError as error:
            found.append(failed(check, str(error), "set cluster.kubernetesVersion to a version the add-on supports"))
            continue
        answer = ctx.eks.describe_addon_configuration(addonName=install.name, addonVersion=version)
        schema = json.loads(answer.get("configurationSchema") or "{}")
        validator = jsonschema.validators.validator_for(schema)(schema)
        errors = sorted(validator.iter_errors(install.configuration), key=lambda e: list(e.absolute_path))
        if errors:
            shown = "; ".join(f"{'/'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}" for e in errors[:3])
            found.append(failed(check, f"{install.name} {version} ({why}) rejects the configurationValues the "
                                f"program sends: {shown}", "a program defect: fix the add-on's configuration "
                                "builder (llm_serving/), or skip the add-on with " + install.switch))
        else:
            found.append(passed(check, f"{install.name} {version} ({why}) accepts the configurationValues"))
    return found


# EC2's vCPU quotas per family group and purchase option (Service Quotas, service code ec2): "Running
# On-Demand P instances", "Running On-Demand G and VT instances", "All P Spot Instance Requests",
# "All G and VT Spot Instance Requests".
VCPU_QUOTAS = {
    (CapacityType.ON_DEMAND, "p"): "L-417A185B",
    (CapacityType.ON_DEMAND, "g"): "L-DB2E81BA",
    (CapacityType.SPOT, "p"): "L-7212CCBC",
    (CapacityType.SPOT, "g"): "L-3819A6DF",
}


def vcpu_quota(ctx: Context) -> list[Finding]:
    i = ctx.intent
    if i.capacity_type is CapacityType.CAPACITY_BLOCK:
        return []  # the block is the capacity; capacity.reservation checks its size
    family = instance_family_letter(i.instance_type)
    code = VCPU_QUOTAS.get((i.capacity_type, family))
    if code is None:
        return [unknown("quota.vcpus", f"no vCPU quota known for {i.instance_type} ({i.capacity_type.value})",
                        "check the family's vCPU quota in Service Quotas by hand")]
    quota = ctx.quotas.get_service_quota(ServiceCode="ec2", QuotaCode=code)["Quota"]
    limit = int(quota.get("Value", 0))
    needed = i.peak_nodes * i.vcpus_per_node
    name = quota.get("QuotaName", code)
    detail = f"{i.peak_nodes} x {i.instance_type} = {needed} vCPUs at peak ({i.peak_reason})"
    if limit < needed:
        return [failed("quota.vcpus", f"{name} ({code}) is {limit} vCPUs in {i.region}; the stack needs {detail}",
                       f"aws service-quotas request-service-quota-increase --service-code ec2 --quota-code {code} "
                       f"--desired-value {needed} --region {i.region}, or lower gpuNodeGroup.scaling.maxNodes")]
    return [passed("quota.vcpus", f"{name} ({code}) {limit} vCPUs >= {detail}")]


def instance_offerings(ctx: Context) -> list[Finding]:
    i = ctx.intent
    zones = sorted({zone for _, zone in i.subnets})
    answer = ctx.ec2.describe_instance_type_offerings(
        LocationType="availability-zone",
        Filters=[{"Name": "instance-type", "Values": [i.instance_type]}, {"Name": "location", "Values": zones}],
    )
    offered = {o["Location"] for o in answer.get("InstanceTypeOfferings", [])}
    missing = [z for z in zones if z not in offered]
    if missing:
        return [failed("capacity.offerings", f"{i.instance_type} is not offered in {', '.join(missing)}: nodes "
                       "placed there never launch", "remove those zones' subnets from gpuNodeGroup.subnets, or pick "
                       "another gpuNodeGroup.instanceType")]
    return [passed("capacity.offerings", f"{i.instance_type} offered in {', '.join(zones)}")]


# EKS scales a capacity-block node group to 0 forty minutes before the block ends (EKS user guide,
# awsdocs amazon-eks-user-guide latest/ug/ml/capacity-blocks-mng.adoc): the block must outlive an operation by that.
BLOCK_SCALE_DOWN = timedelta(minutes=40)


def capacity_reservation(ctx: Context) -> list[Finding]:
    i = ctx.intent
    if i.capacity_reservation_id is None:
        return []
    check = "capacity.reservation"
    key = "gpuNodeGroup.capacityReservationId"
    try:
        (found,) = ctx.ec2.describe_capacity_reservations(
            CapacityReservationIds=[i.capacity_reservation_id])["CapacityReservations"]
    except ClientError as error:
        if _code(error) not in ("InvalidCapacityReservationId.NotFound", "InvalidCapacityReservationId.Malformed"):
            raise
        return [failed(check, f"{i.capacity_reservation_id} does not exist in {i.region}", f"fix {key}")]
    problems = []
    if found.get("InstanceType") != i.instance_type:
        problems.append(f"it reserves {found.get('InstanceType')}, the stack runs {i.instance_type}")
    zone = found.get("AvailabilityZone")
    if zone not in {z for _, z in i.subnets}:
        problems.append(f"it is in {zone}, no configured subnet is")
    state = found.get("State")
    block = i.capacity_type is CapacityType.CAPACITY_BLOCK
    if state in ("expired", "cancelled", "failed", "payment-failed", "unsupported"):
        problems.append(f"it is {state}")
    elif state != "active" and block and i.desired_nodes > 0:
        problems.append(f"it is {state}, and desiredNodes {i.desired_nodes} > 0 makes launches fail until it starts")
    total = int(found.get("TotalInstanceCount", 0))
    if total < i.bound_nodes:
        problems.append(f"it holds {total} instance(s), the group may grow to {i.bound_nodes}")
    end = found.get("EndDate")
    margin = timedelta(seconds=i.update_seconds) + (BLOCK_SCALE_DOWN if block else timedelta())
    if end is not None and end - margin < ctx.now:
        problems.append(f"it ends {end:%Y-%m-%d %H:%M} UTC, within the longest planned operation "
                        f"({i.update_seconds // 60} min){' plus the 40-min scale-down' if block else ''}")
    if problems:
        return [failed(check, f"{i.capacity_reservation_id}: " + "; ".join(problems),
                       f"fix {key} or the reservation (a new block, gpuNodeGroup.subnets in its zone)")]
    until = f", until {end:%Y-%m-%d %H:%M} UTC" if end is not None else ""
    return [passed(check, f"{i.capacity_reservation_id}: {total} x {i.instance_type} in {zone}, {state}{until}")]
