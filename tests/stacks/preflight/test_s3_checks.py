"""The S3 backend's preflight checks through botocore's Stubber: the existing bucket (there, readable, in the
stack's region), the S3 gateway endpoint on every GPU subnet's route table, and the Pod Identity agent the
S3 roles need."""

from __future__ import annotations

import dataclasses

import pytest

from stacks import environment
from stacks.config.files import PROJECT_DIR
from stacks.preflight import intent
from stacks.preflight.result import Outcome
from tests.stacks.preflight.support import CLUSTER, Aws, addon, context
from tests.stacks.preflight.test_aws_checks import run

EXAMPLE = PROJECT_DIR / "examples" / "Pulumi.prod-s3.yaml"
VPC = CLUSTER["resourcesVpcConfig"]["vpcId"]
SUBNETS = ("subnet-0bb00000000000001", "subnet-0bb00000000000002", "subnet-0bb00000000000003")
ENDPOINT_FILTERS = [{"Name": "vpc-id", "Values": [VPC]},
                    {"Name": "service-name", "Values": ["com.amazonaws.us-east-1.s3"]}]


@pytest.fixture
def aws():
    clients = Aws()
    yield clients
    clients.done()


def s3_intent(**changes):
    _, config = environment.load_stack_file(EXAMPLE)
    return dataclasses.replace(intent("prod-s3", "us-east-1", config), **changes)


def test_the_intent_of_the_s3_example():
    found = s3_intent()
    assert (found.s3_weights, found.s3_bucket, round(found.s3_cold_start_gb)) == (True, None, 141)
    assert found.s3_prefix_list_egress  # weightsStorage.s3.vpcEndpoint: true
    assert found.pod_identity_users[-1] == "the S3 weights roles (staging Jobs, serving pods)"


def test_no_bucket_check_when_the_program_creates_the_bucket(aws):
    assert run("s3.bucket", context(aws, s3_intent())) == []


def test_an_existing_bucket_in_the_stacks_region_passes(aws):
    aws.respond("s3", "get_bucket_location", {"LocationConstraint": "us-east-1"}, {"Bucket": "team-weights"})
    aws.respond("s3", "head_bucket", {}, {"Bucket": "team-weights"})
    (finding,) = run("s3.bucket", context(aws, s3_intent(s3_bucket="team-weights")))
    assert (finding.outcome, finding.reason) == (Outcome.PASS, "team-weights exists, is readable and is in us-east-1, "
                                                 "the stack's region")
    # us-east-1 buckets answer no location constraint at all.
    aws.respond("s3", "get_bucket_location", {}, {"Bucket": "team-weights"})
    aws.respond("s3", "head_bucket", {}, {"Bucket": "team-weights"})
    assert run("s3.bucket", context(aws, s3_intent(s3_bucket="team-weights")))[0].outcome is Outcome.PASS


def test_a_bucket_this_identity_cannot_list_fails_before_the_preview_does(aws):
    aws.respond("s3", "get_bucket_location", {}, {"Bucket": "team-weights"})
    aws.error("s3", "head_bucket", "403", 403, {"Bucket": "team-weights"})
    (finding,) = run("s3.bucket", context(aws, s3_intent(s3_bucket="team-weights")))
    assert (finding.outcome, finding.reason, finding.fix) == (
        Outcome.FAIL, "weightsStorage.s3.bucketName team-weights: this identity cannot list it (HeadBucket answered "
        "403), which the preview's look-up of the bucket needs", "expected s3:ListBucket on the bucket for the "
        "deploying role")


def test_a_bucket_in_another_region_fails_naming_both_regions(aws):
    aws.respond("s3", "get_bucket_location", {"LocationConstraint": "EU"}, {"Bucket": "team-weights"})
    (finding,) = run("s3.bucket", context(aws, s3_intent(s3_bucket="team-weights")))
    assert (finding.outcome, finding.reason, finding.fix) == (
        Outcome.FAIL, "weightsStorage.s3.bucketName team-weights: the bucket is in eu-west-1, the cluster in "
        "us-east-1: every cold start would stream across regions", "expected a bucket in us-east-1")


def test_a_missing_or_unreadable_bucket_fails(aws):
    for code, status in (("NoSuchBucket", 404), ("AccessDenied", 403)):
        aws.error("s3", "get_bucket_location", code, status, {"Bucket": "team-weights"})
        (finding,) = run("s3.bucket", context(aws, s3_intent(s3_bucket="team-weights")))
        assert (finding.outcome, finding.reason, finding.fix) == (
            Outcome.FAIL, "weightsStorage.s3.bucketName team-weights: no such bucket, or the deploying role cannot "
            "read it", "expected an existing bucket in this account and region, or unset to create one")


def test_a_bucket_lookup_that_errors_otherwise_could_not_check(aws):
    aws.error("s3", "get_bucket_location", "InternalError", 500, {"Bucket": "team-weights"})
    (finding,) = run("s3.bucket", context(aws, s3_intent(s3_bucket="team-weights")))
    assert finding.outcome is Outcome.COULD_NOT_CHECK
    assert finding.reason.startswith("GetBucketLocation failed: InternalError")


def _route_tables():
    """Subnets 1 and 2 associated with their own tables; subnet 3 falls back to the main table."""
    return {"RouteTables": [
        {"RouteTableId": "rtb-main", "VpcId": VPC, "Associations": [{"Main": True, "RouteTableId": "rtb-main"}]},
        {"RouteTableId": "rtb-a", "VpcId": VPC, "Associations": [{"SubnetId": SUBNETS[0], "RouteTableId": "rtb-a"}]},
        {"RouteTableId": "rtb-b", "VpcId": VPC, "Associations": [{"SubnetId": SUBNETS[1], "RouteTableId": "rtb-b"}]},
    ]}


def _endpoint(*tables: str, state: str = "available") -> dict:
    return {"VpcEndpointId": "vpce-0s3", "VpcEndpointType": "Gateway", "VpcId": VPC, "State": state,
            "ServiceName": "com.amazonaws.us-east-1.s3", "RouteTableIds": list(tables)}


def _stub_network(clients: Aws, endpoints: list[dict]) -> None:
    clients.respond("ec2", "describe_vpc_endpoints", {"VpcEndpoints": endpoints}, {"Filters": ENDPOINT_FILTERS})
    clients.respond("ec2", "describe_route_tables", _route_tables(), {"Filters": [{"Name": "vpc-id", "Values": [VPC]}]})


def test_an_endpoint_on_every_gpu_subnets_table_passes(aws):
    _stub_network(aws, [_endpoint("rtb-a", "rtb-b", "rtb-main")])
    (finding,) = run("s3.gateway-endpoint", context(aws, s3_intent(), cluster=CLUSTER))
    assert (finding.outcome, finding.reason) == (
        Outcome.PASS, f"1 S3 gateway endpoint(s) in {VPC} route every GPU subnet (rtb-a, rtb-b, rtb-main); the pods "
        "that stream from the bucket reach S3 only at its prefix list")


def test_an_endpoint_the_stack_does_not_fence_to_says_how_to_narrow_the_pods_egress(aws):
    _stub_network(aws, [_endpoint("rtb-a", "rtb-b", "rtb-main")])
    (finding,) = run("s3.gateway-endpoint", context(aws, s3_intent(s3_prefix_list_egress=False), cluster=CLUSTER))
    assert finding.outcome is Outcome.PASS
    assert finding.reason.endswith("; weightsStorage.s3.vpcEndpoint: true would fence the pods that stream from the "
                                   "bucket to S3's prefix list (they may reach any address on 443)")


def test_a_subnet_whose_table_the_endpoint_misses_fails_with_the_nat_cost(aws):
    _stub_network(aws, [_endpoint("rtb-a", "rtb-b")])
    _stub_network(aws, [_endpoint("rtb-a", "rtb-b")])
    (finding,) = run("s3.gateway-endpoint", context(aws, s3_intent(), cluster=CLUSTER))
    assert (finding.outcome, finding.reason, finding.fix) == (
        Outcome.FAIL, f"no S3 gateway endpoint of {VPC} is on the GPU subnets' route tables ({SUBNETS[2]} uses "
        "rtb-main; endpoints found: vpce-0s3): every cold start's 141 GB would go through the NAT gateway, at "
        "$0.045 per GB processed ($6.35 a cold start) and its 5 Gbps scaling to 100 Gbps shared by the zone; "
        "weightsStorage.s3.vpcEndpoint: true says it is there",
        "aws ec2 modify-vpc-endpoint --vpc-endpoint-id vpce-0s3 --add-route-table-ids rtb-main (a gateway endpoint "
        "is free; expected one on every GPU subnet's route table)")
    (finding,) = run("s3.gateway-endpoint", context(aws, s3_intent(s3_prefix_list_egress=False), cluster=CLUSTER))
    assert finding.outcome is Outcome.FAIL and finding.reason.endswith("shared by the zone")


def _interface(private_dns: bool = True, inbound_only: bool | None = None, endpoint_id: str = "vpce-0if") -> dict:
    """An S3 interface endpoint as DescribeVpcEndpoints answers (PrivateDnsEnabled, DnsOptions)."""
    dns = {} if inbound_only is None else {"PrivateDnsOnlyForInboundResolverEndpoint": inbound_only}
    return {"VpcEndpointId": endpoint_id, "VpcEndpointType": "Interface", "VpcId": VPC, "State": "available",
            "ServiceName": "com.amazonaws.us-east-1.s3", "PrivateDnsEnabled": private_dns,
            "DnsOptions": {"DnsRecordIpType": "ipv4", **dns}, "SubnetIds": list(SUBNETS)}


INTERFACE_FIX = ("aws ec2 modify-vpc-endpoint --vpc-endpoint-id vpce-0if --dns-options "
                 "PrivateDnsOnlyForInboundResolverEndpoint=true (private DNS only for inbound endpoints: the VPC's own "
                 "requests then take the gateway endpoint, on-premises ones still the interface endpoint)")


def test_an_interface_endpoint_that_answers_the_vpcs_lookups_fails_where_the_pods_are_fenced(aws):
    # S3's names resolve to the interface endpoint's addresses in the VPC, outside the prefix list the pods may reach.
    _stub_network(aws, [_endpoint("rtb-a", "rtb-b", "rtb-main"), _interface()])
    (finding,) = run("s3.gateway-endpoint", context(aws, s3_intent(), cluster=CLUSTER))
    assert (finding.outcome, finding.reason, finding.fix) == (
        Outcome.FAIL, "S3 interface endpoint(s) vpce-0if enable private DNS for every resolver: inside the VPC, S3's "
        "names resolve to the endpoint's addresses in its subnets, and S3's prefix list does not hold those "
        "addresses, so the NetworkPolicies that fence the serving pods, workers and compile-cache producers to it "
        "(weightsStorage.s3.vpcEndpoint) would refuse every S3 request they make", INTERFACE_FIX)
    # Unfenced, the pods still reach S3, through the interface endpoint instead of the gateway endpoint.
    _stub_network(aws, [_endpoint("rtb-a", "rtb-b", "rtb-main"), _interface(inbound_only=False)])
    (finding,) = run("s3.gateway-endpoint", context(aws, s3_intent(s3_prefix_list_egress=False), cluster=CLUSTER))
    assert finding.outcome is Outcome.FAIL
    assert finding.reason.endswith("their S3 traffic goes through the interface endpoint, billed per GB processed "
                                   "(AWS PrivateLink pricing), not the gateway endpoint")


def test_an_interface_endpoint_private_to_on_premises_or_without_private_dns_passes(aws):
    for interface in (_interface(inbound_only=True), _interface(private_dns=False)):
        _stub_network(aws, [_endpoint("rtb-a", "rtb-b", "rtb-main"), interface])
        (finding,) = run("s3.gateway-endpoint", context(aws, s3_intent(), cluster=CLUSTER))
        assert finding.outcome is Outcome.PASS, finding.reason


def test_a_missing_route_and_a_resolving_interface_endpoint_are_both_reported(aws):
    _stub_network(aws, [_endpoint("rtb-a", "rtb-b"), _interface()])
    gateway, interface = run("s3.gateway-endpoint", context(aws, s3_intent(), cluster=CLUSTER))
    assert (gateway.outcome, interface.outcome) == (Outcome.FAIL, Outcome.FAIL)
    assert gateway.fix.startswith("aws ec2 modify-vpc-endpoint --vpc-endpoint-id vpce-0s3 --add-route-table-ids")
    assert interface.fix == INTERFACE_FIX


def test_no_endpoint_at_all_fails_with_the_create_command(aws):
    _stub_network(aws, [_endpoint("rtb-a", "rtb-b", "rtb-main", state="Pending")])
    (finding,) = run("s3.gateway-endpoint", context(aws, s3_intent(), cluster=CLUSTER))
    assert finding.outcome is Outcome.FAIL
    assert finding.fix.startswith("aws ec2 modify-vpc-endpoint --vpc-endpoint-id vpce-0s3 --add-route-table-ids "
                                  "rtb-a rtb-b rtb-main")
    _stub_network(aws, [])
    (finding,) = run("s3.gateway-endpoint", context(aws, s3_intent(), cluster=CLUSTER))
    assert "endpoints found: none" in finding.reason
    assert finding.fix.startswith(f"aws ec2 create-vpc-endpoint --vpc-id {VPC} --vpc-endpoint-type Gateway "
                                  "--service-name com.amazonaws.us-east-1.s3 --route-table-ids rtb-a rtb-b rtb-main")


def test_the_endpoint_check_waits_for_the_cluster_and_skips_other_backends_and_created_vpcs(aws):
    (finding,) = run("s3.gateway-endpoint", context(aws, s3_intent()))
    assert (finding.outcome, finding.fix) == (Outcome.COULD_NOT_CHECK, "fix cluster.exists first")
    assert run("s3.gateway-endpoint", context(aws, s3_intent(s3_weights=False), cluster=CLUSTER)) == []
    (finding,) = run("s3.gateway-endpoint", context(aws, s3_intent(creates_cluster=True)))
    assert (finding.outcome, finding.reason) == (
        Outcome.PASS, "the program creates the VPC with an S3 gateway endpoint on its private route tables")


def test_a_refused_endpoint_lookup_could_not_check_naming_the_permission(aws):
    aws.error("ec2", "describe_vpc_endpoints", "UnauthorizedOperation", 403, {"Filters": ENDPOINT_FILTERS})
    (finding,) = run("s3.gateway-endpoint", context(aws, s3_intent(), cluster=CLUSTER))
    assert finding.outcome is Outcome.COULD_NOT_CHECK
    assert finding.fix.startswith("allow ec2:DescribeVpcEndpoints, ec2:DescribeRouteTables for this identity")


def test_the_s3_roles_need_the_pod_identity_agent(aws):
    params = {"clusterName": "llm-prod", "addonName": "eks-pod-identity-agent"}
    aws.error("eks", "describe_addon", "ResourceNotFoundException", 404, params)
    (finding,) = run("addons.pod-identity-agent", context(aws, s3_intent()))
    assert finding.outcome is Outcome.FAIL
    assert finding.reason == (
        "cluster-autoscaler and the S3 weights roles (staging Jobs, serving pods) use EKS Pod Identity, and the "
        "eks-pod-identity-agent add-on is not installed: their pods would get no AWS credentials")
    aws.respond("eks", "describe_addon", addon("eks-pod-identity-agent"), params)
    assert run("addons.pod-identity-agent", context(aws, s3_intent()))[0].outcome is Outcome.PASS


PREFIX_LIST_FILTERS = [{"Name": "prefix-list-name", "Values": ["com.amazonaws.us-east-1.s3"]}]


def _prefix_lists(*lists: dict) -> dict:
    return {"PrefixLists": list(lists)}


S3_LIST = {"PrefixListId": "pl-63a5400a", "PrefixListName": "com.amazonaws.us-east-1.s3",
           "Cidrs": ["54.231.0.0/16", "3.5.0.0/19", "52.216.0.0/15"]}


def test_the_prefix_list_the_pods_are_fenced_to_passes_with_its_cidrs(aws):
    aws.respond("ec2", "describe_prefix_lists", _prefix_lists(S3_LIST), {"Filters": PREFIX_LIST_FILTERS})
    (finding,) = run("s3.prefix-list", context(aws, s3_intent()))
    assert (finding.outcome, finding.reason) == (
        Outcome.PASS, "pl-63a5400a com.amazonaws.us-east-1.s3 holds 3 CIDR blocks (3.5.0.0/19, 52.216.0.0/15, "
        "54.231.0.0/16): the only addresses the serving pods, workers and compile-cache producers may reach on 443")


def test_no_prefix_list_or_an_empty_one_fails_before_the_preview_does(aws):
    aws.respond("ec2", "describe_prefix_lists", _prefix_lists(), {"Filters": PREFIX_LIST_FILTERS})
    (finding,) = run("s3.prefix-list", context(aws, s3_intent()))
    assert (finding.outcome, finding.reason, finding.fix) == (
        Outcome.FAIL, "DescribePrefixLists answers 0 prefix lists named com.amazonaws.us-east-1.s3: the preview's "
        "look-up of S3's CIDRs for the NetworkPolicies would fail", "expected the one AWS-managed list of the "
        "region; where it has none, weightsStorage.s3.vpcEndpoint: false")
    aws.respond("ec2", "describe_prefix_lists", _prefix_lists({**S3_LIST, "Cidrs": []}),
                {"Filters": PREFIX_LIST_FILTERS})
    (finding,) = run("s3.prefix-list", context(aws, s3_intent()))
    assert finding.outcome is Outcome.FAIL
    assert finding.reason == ("pl-63a5400a com.amazonaws.us-east-1.s3: the S3 prefix list has no CIDR block: an "
                              "egress rule to none would admit every address")


def test_the_prefix_list_check_runs_only_where_the_pods_are_fenced_to_it(aws):
    assert run("s3.prefix-list", context(aws, s3_intent(s3_prefix_list_egress=False))) == []
    # A created VPC: the list is read before the VPC exists, so no cluster is needed.
    aws.respond("ec2", "describe_prefix_lists", _prefix_lists(S3_LIST), {"Filters": PREFIX_LIST_FILTERS})
    assert run("s3.prefix-list", context(aws, s3_intent(creates_cluster=True)))[0].outcome is Outcome.PASS


def test_a_refused_prefix_list_lookup_could_not_check_naming_the_permission(aws):
    aws.error("ec2", "describe_prefix_lists", "UnauthorizedOperation", 403, {"Filters": PREFIX_LIST_FILTERS})
    (finding,) = run("s3.prefix-list", context(aws, s3_intent()))
    assert finding.outcome is Outcome.COULD_NOT_CHECK
    assert finding.fix.startswith("allow ec2:DescribePrefixLists for this identity")
