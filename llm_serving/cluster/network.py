"""The created cluster's address plan (pure, no Pulumi import): which CIDR each subnet gets, which
zones get a NAT gateway, and the tags the AWS Load Balancer Controller reads.

The VPC is cut in four equal quarters: the first three are the private subnets (one per zone, for
nodes and pods: the VPC CNI gives every pod a VPC address and keeps warm addresses per node, so the
node subnets take almost all of the space), the fourth holds the small public subnets (load
balancers and NAT gateways only) at a sixteenth of the VPC each.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

MAX_ZONES = 3
# Smallest VPC the plan accepts: a /20 leaves 1024 addresses per private subnet (a /22); fewer and a
# few GPU nodes with their warm ENI addresses exhaust a zone (EKS user guide, "VPC and subnet
# requirements": pods take VPC addresses). AWS allows /16 to /28 for a VPC.
LARGEST_PREFIX = 20
SMALLEST_PREFIX = 16
# Docker's default bridge; EKS warns against a VPC in this range (EKS user guide, network-reqs).
DOCKER_BRIDGE = ipaddress.IPv4Network("172.17.0.0/16")
# Private ranges a VPC and the service CIDR may use (RFC 1918; the service CIDR must lie in one).
PRIVATE_RANGES = tuple(ipaddress.IPv4Network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"))

# Subnet discovery tags of the AWS Load Balancer Controller (its docs, "Subnet auto-discovery"):
# internet-facing load balancers go to subnets tagged role/elb, internal ones to role/internal-elb.
PUBLIC_ELB_TAG = "kubernetes.io/role/elb"
INTERNAL_ELB_TAG = "kubernetes.io/role/internal-elb"


def cluster_tag(cluster_name: str) -> str:
    """`kubernetes.io/cluster/<name>`: when set, the controller uses a subnet only for that cluster."""
    return f"kubernetes.io/cluster/{cluster_name}"


@dataclass(frozen=True)
class SubnetPlan:
    zone: str
    cidr: str
    public: bool

    def tags(self, cluster_name: str) -> dict[str, str]:
        return {cluster_tag(cluster_name): "shared", PUBLIC_ELB_TAG if self.public else INTERNAL_ELB_TAG: "1"}


@dataclass(frozen=True)
class NetworkPlan:
    vpc_cidr: str
    private: tuple[SubnetPlan, ...]
    public: tuple[SubnetPlan, ...]
    nat_zones: tuple[str, ...]  # zones with a NAT gateway; each private subnet routes to its own or the first

    def nat_zone_for(self, zone: str) -> str:
        return zone if zone in self.nat_zones else self.nat_zones[0]


def cidr_problems(vpc_cidr: str, service_cidr: str) -> list[tuple[str, str]]:
    """What is wrong with the VPC and service CIDRs: (key, reason) pairs, empty when nothing is."""
    try:
        vpc = ipaddress.IPv4Network(vpc_cidr)
    except ValueError:
        return [("vpcCidr", "not a network address (host bits set, or not IPv4)")]
    try:
        service = ipaddress.IPv4Network(service_cidr)
    except ValueError:
        return [("serviceCidr", "not a network address (host bits set, or not IPv4)")]
    problems = []
    if not SMALLEST_PREFIX <= vpc.prefixlen <= LARGEST_PREFIX:
        problems.append(("vpcCidr", f"too small or too large: each private subnet gets a quarter of it, so a "
                         f"/{SMALLEST_PREFIX} to /{LARGEST_PREFIX}"))
    if not any(vpc.subnet_of(r) for r in PRIVATE_RANGES):
        problems.append(("vpcCidr", "not inside a private range"))
    elif vpc.overlaps(DOCKER_BRIDGE):
        problems.append(("vpcCidr", "overlaps Docker's bridge 172.17.0.0/16"))
    # EKS: the service CIDR is a /12 to /24 inside a private range and must not overlap the VPC.
    if not 12 <= service.prefixlen <= 24 or not any(service.subnet_of(r) for r in PRIVATE_RANGES):
        problems.append(("serviceCidr", "must be a /12 to /24 inside a private range"))
    elif vpc.overlaps(service):
        problems.append(("serviceCidr", f"overlaps the VPC's {vpc_cidr}"))
    return problems


def plan_network(vpc_cidr: str, zones: list[str] | tuple[str, ...], nat_per_zone: bool) -> NetworkPlan:
    """Subnets for up to three zones; call `cidr_problems` first (a bad CIDR raises ValueError here)."""
    if not 2 <= len(zones) <= MAX_ZONES:
        raise ValueError(f"2 to {MAX_ZONES} zones, got {len(zones)}")
    vpc = ipaddress.IPv4Network(vpc_cidr)
    quarters = list(vpc.subnets(prefixlen_diff=2))
    publics = list(quarters[3].subnets(prefixlen_diff=2))
    private = tuple(SubnetPlan(z, str(quarters[i]), False) for i, z in enumerate(zones))
    public = tuple(SubnetPlan(z, str(publics[i]), True) for i, z in enumerate(zones))
    return NetworkPlan(str(vpc), private, public, tuple(zones) if nat_per_zone else (zones[0],))
