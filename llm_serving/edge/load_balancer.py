"""The AWS Load Balancer Controller's IAM policy and chart values (pure, no Pulumi import).

The policy is the one the controller publishes for v3.5.0, the app version of the pinned chart
(kubernetes-sigs/aws-load-balancer-controller@v3.5.0:docs/install/iam_policy.json, blob 761d0e733c41),
read and encoded here statement by statement with the partition made a parameter; its create and
delete rights are scoped by the `elbv2.k8s.aws/cluster` tag the controller puts on what it creates.
"""

from __future__ import annotations

from typing import Any

NAMESPACE = "kube-system"
SERVICE_ACCOUNT = "aws-load-balancer-controller"
POLICY_SOURCE = "kubernetes-sigs/aws-load-balancer-controller@v3.5.0:docs/install/iam_policy.json"
CLUSTER_TAG = "elbv2.k8s.aws/cluster"
# The finalizers the controller holds on what it reconciles until the load balancer is deleted
# (v3.5.0 controllers/service/service_controller.go, pkg/ingress/finalizer.go).
SERVICE_FINALIZER = "service.k8s.aws/resources"

_DESCRIBE = (
    "ec2:DescribeAccountAttributes", "ec2:DescribeAddresses", "ec2:DescribeAvailabilityZones",
    "ec2:DescribeInternetGateways", "ec2:DescribeVpcs", "ec2:DescribeVpcPeeringConnections",
    "ec2:DescribeSubnets", "ec2:DescribeSecurityGroups", "ec2:DescribeInstances",
    "ec2:DescribeNetworkInterfaces", "ec2:DescribeTags", "ec2:GetCoipPoolUsage", "ec2:DescribeCoipPools",
    "ec2:GetSecurityGroupsForVpc", "ec2:DescribeIpamPools", "ec2:DescribeRouteTables",
    *(f"elasticloadbalancing:{action}" for action in (
        "DescribeLoadBalancers", "DescribeLoadBalancerAttributes", "DescribeListeners",
        "DescribeListenerCertificates", "DescribeSSLPolicies", "DescribeRules", "DescribeTargetGroups",
        "DescribeTargetGroupAttributes", "DescribeTargetHealth", "DescribeTags", "DescribeTrustStores",
        "DescribeListenerAttributes", "DescribeCapacityReservation")),
)
# Certificates, Cognito, WAF and Shield: what an ALB's annotations may name.
_INTEGRATIONS = (
    "cognito-idp:DescribeUserPoolClient", "acm:ListCertificates", "acm:DescribeCertificate",
    "iam:ListServerCertificates", "iam:GetServerCertificate", "waf-regional:GetWebACL",
    "waf-regional:GetWebACLForResource", "waf-regional:AssociateWebACL", "waf-regional:DisassociateWebACL",
    "wafv2:GetWebACL", "wafv2:GetWebACLForResource", "wafv2:AssociateWebACL", "wafv2:DisassociateWebACL",
    "shield:GetSubscriptionState", "shield:DescribeProtection", "shield:CreateProtection",
    "shield:DeleteProtection",
)
_MODIFY_TAGGED = tuple(f"elasticloadbalancing:{action}" for action in (
    "ModifyLoadBalancerAttributes", "SetIpAddressType", "SetSecurityGroups", "SetSubnets", "DeleteLoadBalancer",
    "ModifyTargetGroup", "ModifyTargetGroupAttributes", "DeleteTargetGroup", "ModifyListenerAttributes",
    "ModifyCapacityReservation", "ModifyIpPools",
))
_MODIFY_ANY = tuple(f"elasticloadbalancing:{action}" for action in (
    "SetWebAcl", "ModifyListener", "AddListenerCertificates", "RemoveListenerCertificates", "ModifyRule",
    "SetRulePriorities",
))

# Condition keys: a request that tags the new resource with the cluster tag, a resource that carries it.
_REQUEST_TAGGED = {f"aws:RequestTag/{CLUSTER_TAG}": "false"}
_RESOURCE_TAGGED = {f"aws:ResourceTag/{CLUSTER_TAG}": "false"}
_RETAG_OWN = {"Null": {f"aws:RequestTag/{CLUSTER_TAG}": "true", f"aws:ResourceTag/{CLUSTER_TAG}": "false"}}


def _allow(actions: tuple[str, ...] | list[str], resource: str | list[str] = "*",
           condition: dict[str, Any] | None = None) -> dict[str, Any]:
    statement: dict[str, Any] = {"Effect": "Allow", "Action": list(actions), "Resource": resource}
    if condition is not None:
        statement["Condition"] = condition
    return statement


def iam_policy(partition: str) -> dict[str, Any]:
    """The controller's published policy, in `partition` (aws, aws-cn, aws-us-gov)."""
    if not partition:
        raise ValueError("the controller's policy needs the partition")
    arn = f"arn:{partition}"
    security_groups = f"{arn}:ec2:*:*:security-group/*"
    balancers = [f"{arn}:elasticloadbalancing:*:*:targetgroup/*/*",
                 f"{arn}:elasticloadbalancing:*:*:loadbalancer/net/*/*",
                 f"{arn}:elasticloadbalancing:*:*:loadbalancer/app/*/*"]
    listeners = [f"{arn}:elasticloadbalancing:*:*:{kind}/{lb}/*/*/*"
                 for kind in ("listener", "listener-rule") for lb in ("net", "app")]
    return {
        "Version": "2012-10-17",
        "Statement": [
            _allow(["iam:CreateServiceLinkedRole"], condition={
                "StringEquals": {"iam:AWSServiceName": "elasticloadbalancing.amazonaws.com"}}),
            _allow(_DESCRIBE),
            _allow(_INTEGRATIONS),
            _allow(["ec2:AuthorizeSecurityGroupIngress", "ec2:RevokeSecurityGroupIngress"]),
            _allow(["ec2:CreateSecurityGroup"]),
            _allow(["ec2:CreateTags"], security_groups, {
                "StringEquals": {"ec2:CreateAction": "CreateSecurityGroup"}, "Null": _REQUEST_TAGGED}),
            _allow(["ec2:CreateTags", "ec2:DeleteTags"], security_groups, _RETAG_OWN),
            _allow(["ec2:AuthorizeSecurityGroupIngress", "ec2:RevokeSecurityGroupIngress",
                    "ec2:DeleteSecurityGroup"], condition={"Null": _RESOURCE_TAGGED}),
            _allow(["elasticloadbalancing:CreateLoadBalancer", "elasticloadbalancing:CreateTargetGroup"],
                   condition={"Null": _REQUEST_TAGGED}),
            _allow(["elasticloadbalancing:CreateListener", "elasticloadbalancing:DeleteListener",
                    "elasticloadbalancing:CreateRule", "elasticloadbalancing:DeleteRule"]),
            _allow(["elasticloadbalancing:AddTags", "elasticloadbalancing:RemoveTags"], balancers, _RETAG_OWN),
            _allow(["elasticloadbalancing:AddTags", "elasticloadbalancing:RemoveTags"], listeners),
            _allow(_MODIFY_TAGGED, condition={"Null": _RESOURCE_TAGGED}),
            _allow(["elasticloadbalancing:AddTags"], balancers, {
                "StringEquals": {"elasticloadbalancing:CreateAction": ["CreateTargetGroup", "CreateLoadBalancer"]},
                "Null": _REQUEST_TAGGED}),
            _allow(["elasticloadbalancing:RegisterTargets", "elasticloadbalancing:DeregisterTargets"],
                   f"{arn}:elasticloadbalancing:*:*:targetgroup/*/*"),
            _allow(_MODIFY_ANY),
        ],
    }


def chart_values(*, cluster_name: str, region: str, vpc_id: str, node_selector: dict[str, str]) -> dict[str, Any]:
    """aws-load-balancer-controller 3.5.0 values (each key checked against the chart's values.yaml)."""
    if not (cluster_name and region and vpc_id):
        raise ValueError("the controller needs clusterName, region and vpcId")
    return {
        # All three given: the controller never asks the instance metadata service, which the nodes'
        # hop limit of 1 keeps from pods (its docs, deploy/installation: "--aws-vpc-id ... --aws-region").
        "clusterName": cluster_name,
        "region": region,
        "vpcId": vpc_id,
        # A fixed name: the Pod Identity association names this service account.
        "serviceAccount": {"create": True, "name": SERVICE_ACCOUNT},
        # Off: with the chart default (true, failurePolicy Fail, every namespace) the API server calls
        # the controller on every Service create, so any Service made while its pods are not Ready
        # fails (Helm releases' included). It only sets loadBalancerClass; our Envoy Service names the
        # controller by `aws-load-balancer-type: external`, which the in-tree controller ignores
        # (v3.5.0 docs/guide/service/nlb.md, "Configuration").
        "enableServiceMutatorWebhook": False,
        "nodeSelector": dict(node_selector),
        # Two replicas (the chart's default): one leads, the other answers the Ingress webhook, whose
        # failurePolicy is Fail; a node drain keeps one.
        "podDisruptionBudget": {"maxUnavailable": 1},
    }
