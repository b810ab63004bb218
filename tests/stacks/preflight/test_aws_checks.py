"""Every AWS check's pass, fail and could-not-check, through botocore's Stubber (requests and
responses validated against the EKS, EC2 and Service Quotas models)."""

from __future__ import annotations

import dataclasses
import json
from datetime import timedelta

import pytest

from llm_serving import gpu
from stacks.config import CapacityType
from stacks.preflight import catalog
from stacks.preflight.context import guarded
from stacks.preflight.result import Outcome
from tests.stacks.preflight.support import CLUSTER, NOW, OURS, Aws, addon, context, schema, stack_intent


@pytest.fixture
def aws():
    clients = Aws()
    yield clients
    clients.done()


def run(check_id: str, ctx):
    (check,) = [c for c in catalog.CHECKS if c.id == check_id]
    return guarded(check.id, check.aws, lambda: check.run(ctx))


def outcomes(findings):
    return [(f.check, f.outcome) for f in findings]


def test_cluster_found_is_kept_for_later_checks(aws):
    aws.respond("eks", "describe_cluster", {"cluster": CLUSTER}, {"name": "llm-prod"})
    ctx = context(aws)
    assert outcomes(run("cluster.exists", ctx)) == [("cluster.exists", Outcome.PASS)]
    assert ctx.cluster["endpoint"] == CLUSTER["endpoint"]


def test_missing_cluster_fails_naming_the_name_and_region(aws):
    aws.error("eks", "describe_cluster", "ResourceNotFoundException", 404, {"name": "llm-prod"})
    (finding,) = run("cluster.exists", context(aws))
    assert finding.outcome is Outcome.FAIL
    assert finding.reason == "no EKS cluster named llm-prod in us-east-1"
    assert "cluster.name" in finding.fix


def test_describe_cluster_denied_could_not_check_with_the_permission(aws):
    aws.error("eks", "describe_cluster", "AccessDeniedException", 403)
    (finding,) = run("cluster.exists", context(aws))
    assert finding.outcome is Outcome.COULD_NOT_CHECK
    assert finding.reason == "DescribeCluster refused: AccessDeniedException"
    assert finding.fix.startswith("allow eks:DescribeCluster for this identity")


def test_cluster_checks_need_the_cluster_first(aws):
    for check in ("cluster.active", "cluster.version", "cluster.subnets"):
        (finding,) = run(check, context(aws))
        assert finding.outcome is Outcome.COULD_NOT_CHECK, check
        assert finding.fix == "fix cluster.exists first"


def test_cluster_status_and_version(aws):
    assert outcomes(run("cluster.active", context(aws, cluster=CLUSTER))) == [("cluster.active", Outcome.PASS)]
    updating = {**CLUSTER, "status": "UPDATING"}
    (finding,) = run("cluster.active", context(aws, cluster=updating))
    assert finding.outcome is Outcome.FAIL and finding.reason.startswith("status UPDATING")
    assert outcomes(run("cluster.version", context(aws, cluster=CLUSTER))) == [("cluster.version", Outcome.PASS)]
    (finding,) = run("cluster.version", context(aws, cluster={**CLUSTER, "version": "1.33"}))
    assert finding.outcome is Outcome.FAIL
    assert finding.fix == 'set cluster.kubernetesVersion: "1.33" (or upgrade the cluster first)'


PROD_SUBNETS = [("subnet-0bb00000000000001", "us-east-1a"), ("subnet-0bb00000000000002", "us-east-1b"),
                ("subnet-0bb00000000000003", "us-east-1c")]


def subnets(vpc="vpc-0abc0000000000001", zones=("us-east-1a", "us-east-1b", "us-east-1c")):
    return {"Subnets": [{"SubnetId": sid, "VpcId": vpc, "AvailabilityZone": zone}
                        for (sid, _), zone in zip(PROD_SUBNETS, zones, strict=True)]}


def test_subnets_in_the_cluster_vpc_and_zones_pass(aws):
    aws.respond("ec2", "describe_subnets", subnets(), {"SubnetIds": [s for s, _ in PROD_SUBNETS]})
    assert outcomes(run("cluster.subnets", context(aws, cluster=CLUSTER))) == [("cluster.subnets", Outcome.PASS)]


def test_subnet_in_another_vpc_or_zone_fails(aws):
    aws.respond("ec2", "describe_subnets", subnets(zones=("us-east-1a", "us-east-1b", "us-east-1d")))
    (finding,) = run("cluster.subnets", context(aws, cluster=CLUSTER))
    assert finding.outcome is Outcome.FAIL
    assert finding.reason == "subnet-0bb00000000000003 is in zone us-east-1d, the stack says us-east-1c"
    aws.respond("ec2", "describe_subnets", subnets(vpc="vpc-0fff0000000000009"))
    (finding,) = run("cluster.subnets", context(aws, cluster=CLUSTER))
    assert finding.reason.startswith("subnet-0bb00000000000001 is in vpc-0fff0000000000009, the cluster in vpc-0abc")


def test_unknown_subnet_fails_and_denied_could_not_check(aws):
    aws.error("ec2", "describe_subnets", "InvalidSubnetID.NotFound")
    (finding,) = run("cluster.subnets", context(aws, cluster=CLUSTER))
    assert finding.outcome is Outcome.FAIL and finding.fix == "fix gpuNodeGroup.subnets[].id"
    aws.error("ec2", "describe_subnets", "UnauthorizedOperation", 403)
    (finding,) = run("cluster.subnets", context(aws, cluster=CLUSTER))
    assert finding.outcome is Outcome.COULD_NOT_CHECK and "ec2:DescribeSubnets" in finding.fix


def test_pod_identity_agent_present_passes_and_missing_fails(aws):
    params = {"clusterName": "llm-prod", "addonName": "eks-pod-identity-agent"}
    aws.respond("eks", "describe_addon", addon("eks-pod-identity-agent"), params)
    (finding,) = run("addons.pod-identity-agent", context(aws))
    assert finding.outcome is Outcome.PASS
    assert "the aws-efs-csi-driver add-on and cluster-autoscaler use EKS Pod Identity" in finding.reason
    aws.error("eks", "describe_addon", "ResourceNotFoundException", 404, params)
    (finding,) = run("addons.pod-identity-agent", context(aws))
    assert finding.outcome is Outcome.FAIL
    assert finding.fix.startswith("aws eks create-addon --cluster-name llm-prod --addon-name eks-pod-identity-agent")
    aws.error("eks", "describe_addon", "ServerException", 500, params)
    (finding,) = run("addons.pod-identity-agent", context(aws))
    assert finding.outcome is Outcome.COULD_NOT_CHECK


def test_pod_identity_agent_not_asked_for_when_nothing_uses_pod_identity(aws):
    assert run("addons.pod-identity-agent", context(aws, stack_intent(pod_identity_users=()))) == []


def test_vpc_cni_network_policy(aws):
    params = {"clusterName": "llm-prod", "addonName": "vpc-cni"}
    aws.respond("eks", "describe_addon", addon("vpc-cni", configuration={"enableNetworkPolicy": "true"}), params)
    assert outcomes(run("addons.vpc-cni-network-policy", context(aws))) == [
        ("addons.vpc-cni-network-policy", Outcome.PASS)]
    aws.respond("eks", "describe_addon", addon("vpc-cni", configuration={"env": {"ENABLE_PREFIX_DELEGATION": "true"}}),
                params)
    (finding,) = run("addons.vpc-cni-network-policy", context(aws))
    assert finding.outcome is Outcome.FAIL
    assert "--configuration-values '{\"enableNetworkPolicy\":\"true\"}'" in finding.fix
    aws.error("eks", "describe_addon", "ResourceNotFoundException", 404, params)
    (finding,) = run("addons.vpc-cni-network-policy", context(aws))
    assert finding.outcome is Outcome.COULD_NOT_CHECK
    assert finding.reason.startswith("vpc-cni is not an EKS add-on here")


def test_addon_conflicts_tell_ours_by_tags(aws):
    aws.respond("eks", "describe_addon", addon("eks-node-monitoring-agent", tags=OURS),
                {"clusterName": "llm-prod", "addonName": "eks-node-monitoring-agent"})
    aws.respond("eks", "describe_addon", addon("aws-efs-csi-driver", tags={"team": "storage"}),
                {"clusterName": "llm-prod", "addonName": "aws-efs-csi-driver"})
    first, second = run("addons.conflicts", context(aws))
    assert first.outcome is Outcome.PASS
    assert first.reason == "eks-node-monitoring-agent: created by this stack (its tags)"
    assert second.outcome is Outcome.FAIL
    assert second.fix == "set weightsStorage.efs.installCsiDriver: false to keep the cluster's"


def test_addon_conflicts_absent_pass_and_denied_could_not_check(aws):
    aws.error("eks", "describe_addon", "ResourceNotFoundException", 404)
    aws.error("eks", "describe_addon", "ResourceNotFoundException", 404)
    assert [f.outcome for f in run("addons.conflicts", context(aws))] == [Outcome.PASS, Outcome.PASS]
    aws.error("eks", "describe_addon", "AccessDeniedException", 403)
    (finding,) = run("addons.conflicts", context(aws))
    assert finding.outcome is Outcome.COULD_NOT_CHECK and "eks:DescribeAddon" in finding.fix


def versions(name: str, default: str, other: str) -> dict:
    return {"addons": [{"addonName": name, "addonVersions": [
        {"addonVersion": other, "compatibilities": [{"clusterVersion": "1.34", "defaultVersion": False}]},
        {"addonVersion": default, "compatibilities": [{"clusterVersion": "1.34", "defaultVersion": True}]},
    ]}]}


def expect_configuration(aws, version="v1.7.0-eksbuild.1"):
    name = gpu.MONITORING_AGENT_ADDON
    aws.error("eks", "describe_addon", "ResourceNotFoundException", 404, {"clusterName": "llm-prod", "addonName": name})
    aws.respond("eks", "describe_addon_versions", versions(name, version, "v1.8.0-eksbuild.1"),
                {"addonName": name, "kubernetesVersion": "1.34"})
    aws.respond("eks", "describe_addon_configuration",
                {"addonName": name, "addonVersion": version, "configurationSchema": schema(name)},
                {"addonName": name, "addonVersion": version})


def test_configuration_values_are_validated_against_the_default_versions_schema(aws):
    """The program's own builder against the agent's published schema (chart 1.7.0): its top level
    allows global, nodeAgent, dcgmAgent and extraObjects, so whatever the builder sends decides."""
    expect_configuration(aws)
    (finding,) = run("addons.configuration", context(aws, cluster=CLUSTER))
    sent = gpu.monitoring_agent_configuration()
    allowed = set(json.loads(schema(gpu.MONITORING_AGENT_ADDON))["definitions"]["EKSNodeMonitoringAgent"]["properties"])
    unexpected = sorted(set(sent) - allowed)
    assert finding.outcome is (Outcome.FAIL if unexpected else Outcome.PASS)
    assert "eks-node-monitoring-agent v1.7.0-eksbuild.1 (EKS's default for 1.34)" in finding.reason
    for key in unexpected:  # today's builder sends `monitoringAgent`, which this schema has no room for
        assert f"'{key}' was unexpected" in finding.reason


def test_configuration_values_schema_rejection_names_the_key(aws):
    base = stack_intent()
    install = base.addons[0]
    good = {"nodeAgent": {"tolerations": [{"operator": "Exists"}]}}
    for values, outcome in ((good, Outcome.PASS), ({"monitoringAgent": {}}, Outcome.FAIL)):
        expect_configuration(aws)
        changed = dataclasses.replace(base, addons=(dataclasses.replace(install, configuration=values),))
        (finding,) = run("addons.configuration", context(aws, changed, cluster=CLUSTER))
        assert finding.outcome is outcome
    assert "Additional properties are not allowed ('monitoringAgent' was unexpected)" in finding.reason
    assert finding.fix.endswith("gpuNodeGroup.autoRepair.installMonitoringAgent: false")


def test_configuration_uses_the_installed_version_on_an_existing_stack(aws):
    name = gpu.MONITORING_AGENT_ADDON
    aws.respond("eks", "describe_addon", addon(name, tags=OURS, version="v1.6.0-eksbuild.2"))
    aws.respond("eks", "describe_addon_configuration",
                {"addonName": name, "addonVersion": "v1.6.0-eksbuild.2", "configurationSchema": schema(name)},
                {"addonName": name, "addonVersion": "v1.6.0-eksbuild.2"})
    (finding,) = run("addons.configuration", context(aws, cluster=CLUSTER))
    assert "v1.6.0-eksbuild.2 (installed)" in finding.reason


def test_configuration_denied_could_not_check(aws):
    aws.error("eks", "describe_addon", "ResourceNotFoundException", 404)
    aws.error("eks", "describe_addon_versions", "AccessDeniedException", 403)
    (finding,) = run("addons.configuration", context(aws, cluster=CLUSTER))
    assert finding.outcome is Outcome.COULD_NOT_CHECK
    assert finding.reason == "DescribeAddonVersions refused: AccessDeniedException"


def quota(value: float, code: str = "L-417A185B") -> dict:
    return {"Quota": {"ServiceCode": "ec2", "QuotaCode": code, "QuotaName": "Running On-Demand P instances",
                      "Value": value}}


def test_quota_covers_the_peak_with_the_node_update_group(aws):
    # prod: maxNodes 4 plus the 2-node group a node update creates, 192 vCPUs each.
    assert stack_intent().peak_nodes == 6
    aws.respond("quotas", "get_service_quota", quota(1152), {"ServiceCode": "ec2", "QuotaCode": "L-417A185B"})
    (finding,) = run("quota.vcpus", context(aws))
    assert finding.outcome is Outcome.PASS
    assert "6 x p5.48xlarge = 1152 vCPUs at peak" in finding.reason
    aws.respond("quotas", "get_service_quota", quota(768))
    (finding,) = run("quota.vcpus", context(aws))
    assert finding.outcome is Outcome.FAIL
    assert "--quota-code L-417A185B --desired-value 1152" in finding.fix


def test_spot_uses_the_spot_quota_and_denied_could_not_check(aws):
    spot = stack_intent(capacity_type=CapacityType.SPOT)
    aws.error("quotas", "get_service_quota", "AccessDeniedException", 403,
              {"ServiceCode": "ec2", "QuotaCode": "L-7212CCBC"})
    (finding,) = run("quota.vcpus", context(aws, spot))
    assert finding.outcome is Outcome.COULD_NOT_CHECK and "servicequotas:GetServiceQuota" in finding.fix
    assert run("quota.vcpus", context(aws, stack_intent(capacity_type=CapacityType.CAPACITY_BLOCK))) == []


def offerings(zones):
    return {"InstanceTypeOfferings": [{"InstanceType": "p5.48xlarge", "LocationType": "availability-zone",
                                       "Location": z} for z in zones]}


def test_instance_offered_in_every_zone(aws):
    params = {"LocationType": "availability-zone", "Filters": [
        {"Name": "instance-type", "Values": ["p5.48xlarge"]},
        {"Name": "location", "Values": ["us-east-1a", "us-east-1b", "us-east-1c"]}]}
    every = offerings(["us-east-1a", "us-east-1b", "us-east-1c"])
    aws.respond("ec2", "describe_instance_type_offerings", every, params)
    assert outcomes(run("capacity.offerings", context(aws))) == [("capacity.offerings", Outcome.PASS)]
    aws.respond("ec2", "describe_instance_type_offerings", offerings(["us-east-1a", "us-east-1c"]), params)
    (finding,) = run("capacity.offerings", context(aws))
    assert finding.outcome is Outcome.FAIL
    assert finding.reason.startswith("p5.48xlarge is not offered in us-east-1b")
    aws.error("ec2", "describe_instance_type_offerings", "RequestLimitExceeded", 503)
    (finding,) = run("capacity.offerings", context(aws))
    assert finding.outcome is Outcome.COULD_NOT_CHECK


def reservation(**changes):
    found = {"CapacityReservationId": "cr-0123456789abcdef0", "InstanceType": "p5.48xlarge",
             "AvailabilityZone": "us-east-1a", "State": "active", "TotalInstanceCount": 4,
             "AvailableInstanceCount": 4, "EndDate": NOW + timedelta(days=7), "ReservationType": "capacity-block"}
    return {"CapacityReservations": [{**found, **changes}]}


BLOCK = dict(capacity_type=CapacityType.CAPACITY_BLOCK, capacity_reservation_id="cr-0123456789abcdef0",
             subnets=(("subnet-0bb00000000000001", "us-east-1a"),))


def test_capacity_block_active_large_enough_and_long_enough_passes(aws):
    aws.respond("ec2", "describe_capacity_reservations", reservation(),
                {"CapacityReservationIds": ["cr-0123456789abcdef0"]})
    (finding,) = run("capacity.reservation", context(aws, stack_intent(**BLOCK)))
    assert finding.outcome is Outcome.PASS
    assert finding.reason == "cr-0123456789abcdef0: 4 x p5.48xlarge in us-east-1a, active, until 2026-12-08 10:00 UTC"


def test_capacity_block_ending_within_an_update_or_too_small_fails(aws):
    the_intent = stack_intent(**BLOCK)
    # prod's node-group update is planned at over an hour (the drain barrier included); 60 minutes is too short.
    assert the_intent.update_seconds > 60 * 60
    aws.respond("ec2", "describe_capacity_reservations",
                reservation(EndDate=NOW + timedelta(minutes=60), TotalInstanceCount=2, State="scheduled"))
    (finding,) = run("capacity.reservation", context(aws, the_intent))
    assert finding.outcome is Outcome.FAIL
    assert "it is scheduled, and desiredNodes 2 > 0 makes launches fail until it starts" in finding.reason
    assert "it holds 2 instance(s), the group may grow to 4" in finding.reason
    assert (f"it ends 2026-12-01 11:00 UTC, within the longest planned operation ({the_intent.update_seconds // 60} "
            "min) plus the 40-min" in finding.reason)


def test_capacity_reservation_missing_fails_and_denied_could_not_check(aws):
    aws.error("ec2", "describe_capacity_reservations", "InvalidCapacityReservationId.NotFound")
    (finding,) = run("capacity.reservation", context(aws, stack_intent(**BLOCK)))
    assert finding.outcome is Outcome.FAIL and finding.fix == "fix gpuNodeGroup.capacityReservationId"
    aws.error("ec2", "describe_capacity_reservations", "UnauthorizedOperation", 403)
    (finding,) = run("capacity.reservation", context(aws, stack_intent(**BLOCK)))
    assert finding.outcome is Outcome.COULD_NOT_CHECK
    assert run("capacity.reservation", context(aws)) == []  # prod reserves nothing


def test_a_timeout_is_could_not_check_never_a_pass(aws):
    from botocore.exceptions import ReadTimeoutError

    def slow(**_):
        raise ReadTimeoutError(endpoint_url="https://eks.us-east-1.amazonaws.com")

    ctx = context(aws)
    ctx.eks = type("Slow", (), {"describe_cluster": staticmethod(slow)})()
    (finding,) = run("cluster.exists", ctx)
    assert finding.outcome is Outcome.COULD_NOT_CHECK
    assert finding.reason.startswith("AWS call failed: Read timeout on endpoint URL")


def test_an_answer_of_an_unexpected_shape_is_could_not_check(aws):
    aws.respond("eks", "describe_cluster", {}, {"name": "llm-prod"})  # valid for the model, but no cluster
    (finding,) = run("cluster.exists", context(aws))
    assert finding.outcome is Outcome.COULD_NOT_CHECK
    assert finding.reason == "unexpected KeyError: 'cluster'"
