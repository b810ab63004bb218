"""The offline render's answers: deterministic placeholders for every data source the program reads
and for the outputs providers would compute (ids, ARNs, the created cluster's endpoint), for a stack
that looks its cluster up and for one that creates it.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pulumi

ACCOUNT_ID = "123456789012"
REGION = "us-east-1"  # a stack file without aws:region (the provider's own default is none: the CLI asks)
# Zone ids are `<region code>-az<n>` (use1-az1, euw1-az2, apse1-az1): the area, the initials of its compass
# word, the number (AWS, "Availability Zone IDs for your AWS resources").
_COMPASS = {"northeast": "ne", "northwest": "nw", "southeast": "se", "southwest": "sw", "central": "c"}


# S3's AWS-managed prefix list (com.amazonaws.<region>.s3) as DescribePrefixLists answers it, in its own order:
# us-east-1's ten ranges as a public chart records them for NetworkPolicies (uc-cdis/gen3-helm,
# helm/gen3-network-policies/README.md, `s3CidrRanges`), under the list id security-group examples name
# (pl-63a5400a). The real list changes when S3 gains ranges; the render only needs a realistic shape.
S3_PREFIX_LISTS = {
    "us-east-1": ("18.34.0.0/19", "16.15.192.0/18", "54.231.0.0/16", "52.216.0.0/15", "18.34.232.0/21",
                  "16.15.176.0/20", "16.182.0.0/16", "3.5.0.0/19", "44.192.134.240/28", "44.192.140.64/28"),
}
S3_PREFIX_LIST_IDS = {"us-east-1": "pl-63a5400a"}
# Any other region: the three documentation ranges (RFC 5737), so a render never passes for the region's list.
PLACEHOLDER_S3_PREFIX_LIST = ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24")


def zone_id_prefix(region: str) -> str:
    area, _, rest = region.partition("-")
    direction, _, number = rest.rpartition("-")
    if area == "us" and direction.startswith("gov-"):  # GovCloud: usgw1, usge1
        return f"usg{direction.removeprefix('gov-')[:1]}{number}"
    return f"{area}{_COMPASS.get(direction, direction[:1])}{number}"


def _placeholder_cluster(name: str, version: str, region: str = REGION) -> dict[str, Any]:
    return {
        "name": name,
        "id": name,
        "arn": f"arn:aws:eks:{region}:{ACCOUNT_ID}:cluster/{name}",
        "endpoint": f"https://{name}.gr7.{region}.eks.amazonaws.com",
        "version": version,
        "certificateAuthorities": [{"data": "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCnBsYWNlaG9sZGVyCg=="}],
        "vpcConfig": {
            "clusterSecurityGroupId": "sg-0123456789abcdef0",
            "vpcId": "vpc-0123456789abcdef0",
            "subnetIds": [],
            "securityGroupIds": [],
            "publicAccessCidrs": [],
            "endpointPrivateAccess": True,
            "endpointPublicAccess": False,
        },
    }


class RenderMocks(pulumi.runtime.Mocks):
    """Deterministic answers for data sources and for the outputs providers would compute.

    `cluster_version` is the placeholder cluster's Kubernetes minor (render --cluster-version); `region` the stack's
`aws:region`, which every ARN, endpoint and zone the answers make is in.
    `clusters` (cluster.mode create) are the clusters the account already has, name -> (version,
    owner tag); None answers every look-up with the placeholder cluster (mode existing).
    """

    def __init__(self, cluster_version: str, clusters: dict[str, tuple[str, str | None]] | None = None,
                 region: str = REGION) -> None:
        self.cluster_version = cluster_version
        self.clusters = clusters
        self.region = region

    # A bare dict is a result too (pulumi/runtime/mocks.py reads either), which the base's hint leaves out.
    def call(  # type: ignore[override]
        self, args: pulumi.runtime.MockCallArgs
    ) -> tuple[dict[str, Any], list[Any]] | dict[str, Any]:
        token = args.token
        if token == "aws:eks/getCluster:getCluster":
            name = args.args["name"]
            if self.clusters is None:
                return _placeholder_cluster(name, self.cluster_version, self.region)
            version, owner = self.clusters[name]
            return {**_placeholder_cluster(name, version, self.region),
                    "tags": {"llm-serving/stack": owner} if owner else {}}
        if token == "aws:s3/getBucket:getBucket":
            bucket = args.args["bucket"]
            return {"id": bucket, "bucket": bucket, "region": self.region, "arn": f"arn:aws:s3:::{bucket}"}
        if token == "aws:eks/getClusters:getClusters":
            return {"id": self.region, "names": sorted(self.clusters or {})}
        if token == "aws:index/getAvailabilityZones:getAvailabilityZones":
            zones = [f"{self.region}{letter}" for letter in "abcdef"]
            ids = [f"{zone_id_prefix(self.region)}-az{i}" for i in range(1, 7)]
            return {"id": self.region, "names": zones, "zoneIds": ids, "groupNames": [self.region]}
        if token == "aws:iam/getSessionContext:getSessionContext":
            arn = args.args["arn"]
            return {"id": arn, "arn": arn, "issuerArn": arn, "issuerId": "render", "issuerName": "render",
                    "sessionName": ""}
        if token == "aws:index/getRegion:getRegion":
            return {"name": self.region, "region": self.region, "id": self.region,
                    "endpoint": f"ec2.{self.region}.amazonaws.com"}
        if token == "aws:ec2/getVpc:getVpc":
            vpc = args.args["id"]
            return {"id": vpc, "cidrBlock": "10.0.0.0/16", "arn": f"arn:aws:ec2:{self.region}:{ACCOUNT_ID}:vpc/{vpc}"}
        if token == "aws:eks/getAddon:getAddon":
            # The VPC CNI add-on with NetworkPolicy enforcement on, as the stacks require.
            return {"addonName": args.args["addonName"], "clusterName": args.args["clusterName"],
                    "id": f"{args.args['clusterName']}:{args.args['addonName']}",
                    "configurationValues": '{"enableNetworkPolicy": "true"}'}
        if token == "aws:ec2/getSubnet:getSubnet":
            # A distinct placeholder /20 per subnet id, inside the placeholder VPC's 10.0.0.0/16.
            subnet = args.args["id"]
            block = int(hashlib.sha256(subnet.encode()).hexdigest(), 16) % 16
            return {"id": subnet, "cidrBlock": f"10.0.{block * 16}.0/20",
                    "arn": f"arn:aws:ec2:{self.region}:{ACCOUNT_ID}:subnet/{subnet}"}
        if token == "aws:ec2/getPrefixList:getPrefixList":
            name = args.args["name"]
            if name != f"com.amazonaws.{self.region}.s3":
                raise NotImplementedError(f"the offline render knows no prefix list {name}")
            cidrs = S3_PREFIX_LISTS.get(self.region, PLACEHOLDER_S3_PREFIX_LIST)
            return {"id": S3_PREFIX_LIST_IDS.get(self.region, "pl-00000000"), "name": name, "cidrBlocks": list(cidrs),
                    "region": self.region}
        if token == "aws:index/getPartition:getPartition":
            return {"partition": "aws", "dnsSuffix": "amazonaws.com", "id": "aws"}
        if token == "aws:index/getCallerIdentity:getCallerIdentity":
            return {"accountId": ACCOUNT_ID, "arn": f"arn:aws:iam::{ACCOUNT_ID}:user/render", "userId": "render"}
        raise NotImplementedError(f"the offline render has no placeholder for data source {token}")

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        state = dict(args.inputs)
        name = args.name
        if args.typ == "aws:iam/role:Role":
            state.setdefault("arn", f"arn:aws:iam::{ACCOUNT_ID}:role/{name}")
            state.setdefault("name", name)
        elif args.typ == "aws:ec2/launchTemplate:LaunchTemplate":
            state.setdefault("latestVersion", 1)
        elif args.typ == "aws:ec2/placementGroup:PlacementGroup":
            state.setdefault("name", name)
        elif args.typ == "aws:eks/nodeGroup:NodeGroup":
            state.setdefault("resources", [{"autoscalingGroups": [{"name": f"eks-{name}-asg"}]}])
            state.setdefault("nodeGroupName", f"{args.inputs.get('nodeGroupNamePrefix', name)}placeholder")
        elif args.typ == "aws:efs/fileSystem:FileSystem":
            state.setdefault("arn", f"arn:aws:elasticfilesystem:{self.region}:{ACCOUNT_ID}:file-system/{name}-id")
        elif args.typ == "aws:s3/bucket:Bucket":
            state.setdefault("arn", f"arn:aws:s3:::{args.inputs.get('bucket', name)}")
        elif args.typ == "aws:efs/accessPoint:AccessPoint":
            state.setdefault("arn", f"arn:aws:elasticfilesystem:{self.region}:{ACCOUNT_ID}:access-point/{name}-id")
        elif args.typ == "aws:fsx/lustreFileSystem:LustreFileSystem":
            state.setdefault("dnsName", f"{name}.fsx.{self.region}.amazonaws.com")
            state.setdefault("mountName", "placeholder")
        elif args.typ == "aws:eks/cluster:Cluster":
            cluster = _placeholder_cluster(args.inputs["name"], args.inputs["version"], self.region)
            state.update(arn=cluster["arn"], endpoint=cluster["endpoint"],
                         certificateAuthority=cluster["certificateAuthorities"][0])
            state["vpcConfig"] = {**state.get("vpcConfig", {}), "clusterSecurityGroupId": "sg-0123456789abcdef0"}
        elif args.typ == "aws:kms/key:Key":
            state.setdefault("keyId", f"{name}-key-id")
            state.setdefault("arn", f"arn:aws:kms:{self.region}:{ACCOUNT_ID}:key/{name}-key-id")
        elif args.typ == "tls:index/privateKey:PrivateKey":
            state.setdefault("privateKeyPem", "(generated by the tls provider at up)")
        elif args.typ == "tls:index/selfSignedCert:SelfSignedCert":
            state.setdefault("certPem", "(generated by the tls provider at up)")
        elif args.typ == "kubernetes:helm.sh/v3:Release":
            state.setdefault("name", name)
        return f"{name}-id", state
