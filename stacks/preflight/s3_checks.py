"""Checks of what the S3 weights backend needs from the account: the existing bucket (there, readable, in
the stack's region), an S3 gateway endpoint on the GPU subnets' route tables and, where the pods are fenced to
it, S3's prefix list (read-only calls)."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from llm_serving import edge, storage
from llm_serving.stack.rules import platform
from stacks.preflight.context import ClusterUnknown, Context
from stacks.preflight.result import Finding, failed, passed

# What S3 traffic costs and carries through a NAT gateway instead of a gateway endpoint: $0.045 per GB
# processed (AWS VPC pricing page, aws.amazon.com/vpc/pricing/, its US East example; other regions differ),
# and "5 Gbps of bandwidth and automatically scales up to 100 Gbps" per gateway (VPC user guide,
# nat-gateway-basics.html), shared by every node routed through it. Gateway endpoints "come at no additional
# charge" (AWS Prescriptive Guidance, aws-startup-security-baseline/wkld-12.html).
NAT_USD_PER_GB_PROCESSED = 0.045
NAT_GBPS = "5 Gbps scaling to 100 Gbps"


def _code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


def s3_bucket(ctx: Context) -> list[Finding]:
    """An existing weightsStorage.s3.bucketName exists, this identity can read it, and it lives in the
    stack's region (GetBucketLocation; a missing bucket answers NoSuchBucket, another account's AccessDenied)."""
    i = ctx.intent
    name = i.s3_bucket
    if name is None:
        return []
    check = "s3.bucket"
    try:
        answer = ctx.s3.get_bucket_location(Bucket=name)
    except ClientError as error:
        if _code(error) not in ("NoSuchBucket", "AccessDenied", "AllAccessDisabled"):
            raise
        found = None
    else:
        # S3 answers no constraint for us-east-1 and "EU" for the oldest eu-west-1 buckets (GetBucketLocation).
        constraint = answer.get("LocationConstraint") or "us-east-1"
        found = "eu-west-1" if constraint == "EU" else constraint
    problems = platform.existing_bucket_problems(name, found, i.region)
    if problems:
        return [failed(check, f"weightsStorage.s3.bucketName {name}: {p.message}", f"expected {p.expected}")
                for p in problems]
    # The preview looks the bucket up with HeadBucket (pulumi-aws aws.s3.getBucket), which needs
    # s3:ListBucket, not s3:GetBucketLocation: an identity with only the second passes above and fails there.
    try:
        ctx.s3.head_bucket(Bucket=name)
    except ClientError as error:
        if _code(error) not in ("403", "AccessDenied", "404", "NoSuchBucket"):
            raise
        return [failed(check, f"weightsStorage.s3.bucketName {name}: this identity cannot list it (HeadBucket "
                       f"answered {_code(error)}), which the preview's look-up of the bucket needs",
                       "expected s3:ListBucket on the bucket for the deploying role")]
    return [passed(check, f"{name} exists, is readable and is in {found}, the stack's region")]


def _subnet_route_tables(tables: list[dict[str, Any]], subnets: list[str]) -> dict[str, str | None]:
    """Subnet -> the route table it uses: its explicit association, else the VPC's main table."""
    main = next((t["RouteTableId"] for t in tables for a in t.get("Associations", []) if a.get("Main")), None)
    explicit = {a["SubnetId"]: t["RouteTableId"] for t in tables for a in t.get("Associations", [])
                if a.get("SubnetId")}
    return {subnet: explicit.get(subnet, main) for subnet in subnets}


def _resolving_interfaces(endpoints: list[dict[str, Any]], fenced: bool) -> list[Finding]:
    """S3 interface endpoints whose private DNS answers the VPC's own resolver: S3's names then resolve, in the VPC,
    to the endpoint's addresses in its subnets (S3 user guide, privatelink-interface-endpoints.html, "Private DNS"),
    so the pods' S3 traffic goes there rather than through the gateway endpoint. Private DNS "only for inbound
    endpoints" routes the VPC's own traffic to the gateway endpoint and on-premises traffic to the interface
    endpoint (EC2 API reference, DnsOptionsSpecification, PrivateDnsOnlyForInboundResolverEndpoint)."""
    resolving = sorted(e["VpcEndpointId"] for e in endpoints
                       if e.get("VpcEndpointType") == "Interface" and e.get("State", "").lower() == "available"
                       and e.get("PrivateDnsEnabled")
                       and not e.get("DnsOptions", {}).get("PrivateDnsOnlyForInboundResolverEndpoint"))
    if not resolving:
        return []
    effect = ("S3's prefix list does not hold those addresses, so the NetworkPolicies that fence the serving pods, "
              "workers and compile-cache producers to it (weightsStorage.s3.vpcEndpoint) would refuse every S3 request "
              "they make" if fenced else
              "their S3 traffic goes through the interface endpoint, billed per GB processed (AWS PrivateLink "
              "pricing), not the gateway endpoint")
    fix = "; ".join(f"aws ec2 modify-vpc-endpoint --vpc-endpoint-id {e} --dns-options "
                    "PrivateDnsOnlyForInboundResolverEndpoint=true" for e in resolving)
    return [failed("s3.gateway-endpoint", f"S3 interface endpoint(s) {', '.join(resolving)} enable private DNS for "
                   "every resolver: inside the VPC, S3's names resolve to the endpoint's addresses in its subnets, and "
                   f"{effect}", f"{fix} (private DNS only for inbound endpoints: the VPC's own requests then take the "
                   "gateway endpoint, on-premises ones still the interface endpoint)")]


def s3_gateway_endpoint(ctx: Context) -> list[Finding]:
    """On S3, the cluster's VPC has an S3 gateway endpoint on the route table of every GPU subnet, and no S3
    interface endpoint answers the VPC's own lookups of S3's names; without the first each cold start streams its
    checkpoint through the NAT gateway, with the second the pods' S3 traffic never takes the gateway endpoint."""
    i = ctx.intent
    if not i.s3_weights:
        return []
    check = "s3.gateway-endpoint"
    if i.creates_cluster:
        return [passed(check, "the program creates the VPC with an S3 gateway endpoint on its private route tables")]
    if ctx.cluster is None:
        raise ClusterUnknown()
    vpc = ctx.cluster.get("resourcesVpcConfig", {}).get("vpcId", "")
    service = f"com.amazonaws.{i.region}.s3"
    # Gateway and interface endpoints of S3 share the service name (S3 user guide, privatelink-interface-endpoints).
    found = ctx.ec2.describe_vpc_endpoints(Filters=[
        {"Name": "vpc-id", "Values": [vpc]}, {"Name": "service-name", "Values": [service]}])["VpcEndpoints"]
    interfaces = _resolving_interfaces(found, i.s3_prefix_list_egress)
    endpoints = [e for e in found if e.get("VpcEndpointType") == "Gateway"]
    routed = {t for e in endpoints if e.get("State", "").lower() == "available" for t in e.get("RouteTableIds", [])}
    tables = ctx.ec2.describe_route_tables(Filters=[{"Name": "vpc-id", "Values": [vpc]}])["RouteTables"]
    subnets = [subnet for subnet, _ in i.subnets if subnet is not None]  # (ids are set with an existing cluster)
    missing = {s: t for s, t in _subnet_route_tables(tables, subnets).items() if t not in routed}
    if not missing and interfaces:
        return interfaces
    if not missing:
        fence = ("the pods that stream from the bucket reach S3 only at its prefix list" if i.s3_prefix_list_egress
                 else "weightsStorage.s3.vpcEndpoint: true would fence the pods that stream from the bucket to S3's "
                 "prefix list (they may reach any address on 443)")
        return [passed(check, f"{len(endpoints)} S3 gateway endpoint(s) in {vpc} route every GPU subnet "
                       f"({', '.join(sorted({t for t in _subnet_route_tables(tables, subnets).values() if t}))}); "
                       f"{fence}")]
    found = ", ".join(f"{s} uses {t or 'no route table'}" for s, t in sorted(missing.items()))
    cost = i.s3_cold_start_gb * NAT_USD_PER_GB_PROCESSED
    ids = " ".join(sorted({t for t in missing.values() if t}))
    fix = (f"aws ec2 modify-vpc-endpoint --vpc-endpoint-id {endpoints[0]['VpcEndpointId']} --add-route-table-ids "
           f"{ids}" if endpoints else f"aws ec2 create-vpc-endpoint --vpc-id {vpc} --vpc-endpoint-type Gateway "
           f"--service-name {service} --route-table-ids {ids}")
    promised = "; weightsStorage.s3.vpcEndpoint: true says it is there" if i.s3_prefix_list_egress else ""
    return [failed(check, f"no S3 gateway endpoint of {vpc} is on the GPU subnets' route tables ({found}; "
                   f"endpoints found: {', '.join(e['VpcEndpointId'] for e in endpoints) or 'none'}): every cold "
                   f"start's {i.s3_cold_start_gb:,.0f} GB would go through the NAT gateway, at "
                   f"${NAT_USD_PER_GB_PROCESSED} per GB processed (${cost:,.2f} a cold start) and its "
                   f"{NAT_GBPS} shared by the zone{promised}", f"{fix} (a gateway endpoint is free; expected one on "
                   "every GPU subnet's route table)"), *interfaces]


def s3_prefix_list(ctx: Context) -> list[Finding]:
    """Where the pods that stream from the bucket are fenced to S3 (weightsStorage.s3.vpcEndpoint, or a created
    VPC), S3's AWS-managed prefix list answers DescribePrefixLists by its name with CIDRs the program accepts:
    the preview reads it the same way (terraform-provider-aws vpc_prefix_list_data_source.go, a filter on
    prefix-list-name) and fails on no list or more than one, and the policies refuse an empty or malformed one
    (llm_serving.edge.s3_cidrs)."""
    i = ctx.intent
    if not i.s3_prefix_list_egress:
        return []
    check = "s3.prefix-list"
    name = storage.s3_prefix_list_name(i.region)
    lists = ctx.ec2.describe_prefix_lists(Filters=[{"Name": "prefix-list-name", "Values": [name]}])["PrefixLists"]
    if len(lists) != 1:
        return [failed(check, f"DescribePrefixLists answers {len(lists)} prefix lists named {name}: the preview's "
                       "look-up of S3's CIDRs for the NetworkPolicies would fail", "expected the one AWS-managed "
                       "list of the region; where it has none, weightsStorage.s3.vpcEndpoint: false")]
    (found,) = lists
    try:
        cidrs = edge.s3_cidrs(found.get("Cidrs", []))
    except ValueError as error:
        return [failed(check, f"{found.get('PrefixListId')} {name}: {error}", "expected CIDR blocks; "
                       "weightsStorage.s3.vpcEndpoint: false keeps any address on 443 meanwhile")]
    return [passed(check, f"{found.get('PrefixListId')} {name} holds {len(cidrs)} CIDR blocks "
                   f"({', '.join(cidrs)}): the only addresses the serving pods, workers and compile-cache producers "
                   "may reach on 443")]
