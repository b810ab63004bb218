"""The AWS Load Balancer Controller a created cluster gets: its published IAM policy, its chart values
checked against the chart, its Pod Identity role, and the order on create and on destroy (the NLB and
its security groups deleted by the controller before the controller goes)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from llm_serving.edge import load_balancer
from llm_serving.platform import versions
from llm_serving.platform.args import validate
from llm_serving.stack import parts
from llm_serving.stack.site import Site, StagingNodes
from stacks import checks
from stacks.config import ServingStackArgs
from stacks.config.files import PROJECT_DIR
from tests.conftest import render_file
from tests.stacks.checks.test_cluster_checks import config as create_config
from tests.stacks.checks.test_edge_and_scaling_checks import ACM, ALB_SUBNETS
from tests.stacks.checks.test_gpu_node_group_checks import BASE as EXISTING
from tests.support import reference

SANDBOX = PROJECT_DIR / "examples" / "Pulumi.sandbox.yaml"
RELEASE = "kubernetes:helm.sh/v3:Release::edge-load-balancer-controller-release"
ASSOCIATION = "aws:eks/podIdentityAssociation:PodIdentityAssociation::edge-load-balancer-controller-pod-identity"
ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy::edge-load-balancer-controller-policy"
# sha256 of kubernetes-sigs/aws-load-balancer-controller@v3.5.0:docs/install/iam_policy.json, parsed
# and re-serialised with sorted keys and no whitespace (computed from the published file, not from
# our encoding): any drift of a statement, action, resource or condition changes it.
PUBLISHED_POLICY_SHA256 = "bb9e48240ace4258c78d152ce98175ee6a118f0715faad4ff5a3e394c9d66171"


def _canonical_sha256(document: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(document, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


@pytest.fixture(scope="module")
def sandbox():
    return render_file(SANDBOX)


def _inputs(result, urn: str) -> dict[str, Any]:
    type_, name = urn.rsplit("::", 1)
    return result.resource(type_, name)["inputs"]


def _graph(result) -> dict[str, set[str]]:
    return {f"{r['type']}::{r['name']}": set(r.get("options", {}).get("dependsOn", [])) for r in result.resources}


def _closure(graph: dict[str, set[str]], key: str) -> set[str]:
    """Everything `key` waits for on create, transitively."""
    seen: set[str] = set()
    todo = [key]
    while todo:
        for dep in graph.get(todo.pop(), ()):
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


def _deleted_before(graph: dict[str, set[str]], first: str, then: str) -> bool:
    """Whether destroy must delete `first` before `then`: `then` is among `first`'s transitive
    dependencies (Pulumi deletes dependents before what they depend on)."""
    return then in _closure(graph, first)


def test_policy_is_the_published_v3_5_0_policy():
    policy = load_balancer.iam_policy("aws")
    assert _canonical_sha256(policy) == PUBLISHED_POLICY_SHA256
    assert len(policy["Statement"]) == 16
    assert sum(len(s["Action"]) for s in policy["Statement"]) == 86
    # Deletes only what carries the cluster tag the controller sets on what it creates.
    (delete,) = [s for s in policy["Statement"] if "elasticloadbalancing:DeleteLoadBalancer" in s["Action"]]
    assert (delete["Resource"], delete["Condition"]) == ("*", {"Null": {"aws:ResourceTag/elbv2.k8s.aws/cluster":
                                                                         "false"}})


def test_policy_names_the_stacks_partition():
    china = json.dumps(load_balancer.iam_policy("aws-cn"))
    assert "arn:aws:" not in china
    assert china.count("arn:aws-cn:") == 13
    with pytest.raises(ValueError, match="needs the partition"):
        load_balancer.iam_policy("")


def test_chart_values_refuse_a_missing_vpc():
    with pytest.raises(ValueError, match="clusterName, region and vpcId"):
        load_balancer.chart_values(cluster_name="c", region="us-east-1", vpc_id="", node_selector={})


def test_created_cluster_installs_the_controller_on_its_cpu_nodes_without_the_service_webhook(sandbox):
    release = _inputs(sandbox, RELEASE)
    assert {k: release[k] for k in ("chart", "version", "namespace", "repositoryOpts", "skipAwait", "atomic")} == {
        "chart": "aws-load-balancer-controller", "version": "3.5.0", "namespace": "kube-system",
        "repositoryOpts": {"repo": "https://aws.github.io/eks-charts"}, "skipAwait": False, "atomic": True,
    }
    assert release["values"] == {
        "clusterName": "llm-sandbox",
        "region": "us-east-1",
        "vpcId": "cluster-vpc-id",
        "serviceAccount": {"create": True, "name": "aws-load-balancer-controller"},
        "enableServiceMutatorWebhook": False,
        "nodeSelector": {"llm-serving/node-role": "system"},
        "podDisruptionBudget": {"maxUnavailable": 1},
    }
    assert reference.helm_value_errors("aws-load-balancer-controller", "3.5.0", release["values"]) == []


def test_the_value_checker_catches_a_misspelled_controller_value():
    assert reference.helm_value_errors("aws-load-balancer-controller", "3.5.0", {"enableServiceMutatorWebhooks": False})


def test_controller_role_is_trusted_by_pod_identity_of_this_cluster_only_and_holds_the_published_policy(sandbox):
    role = _inputs(sandbox, "aws:iam/role:Role::edge-load-balancer-controller-role")
    assert json.loads(role["assumeRolePolicy"])["Statement"] == [{
        "Effect": "Allow", "Principal": {"Service": "pods.eks.amazonaws.com"},
        "Action": ["sts:AssumeRole", "sts:TagSession"],
        "Condition": {"StringEquals": {
            "aws:RequestTag/eks-cluster-arn": "arn:aws:eks:us-east-1:123456789012:cluster/llm-sandbox",
            "aws:RequestTag/kubernetes-namespace": "kube-system",
            "aws:RequestTag/kubernetes-service-account": "aws-load-balancer-controller"}},
    }]
    policy = _inputs(sandbox, ROLE_POLICY)
    assert _canonical_sha256(json.loads(policy["policy"])) == PUBLISHED_POLICY_SHA256
    association = _inputs(sandbox, ASSOCIATION)
    assert {k: association[k] for k in ("clusterName", "namespace", "serviceAccount", "roleArn")} == {
        "clusterName": "llm-sandbox", "namespace": "kube-system", "serviceAccount": "aws-load-balancer-controller",
        "roleArn": "arn:aws:iam::123456789012:role/edge-load-balancer-controller-role",
    }


def test_create_order_is_cpu_nodes_then_credentials_then_controller_then_the_edge(sandbox):
    graph = _graph(sandbox)
    # The release waits for the admission guard and the association, which comes after the guard and its policy.
    guard = ("kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicyBinding::"
             "edge-load-balancer-controller-admission-binding")
    assert {guard, ASSOCIATION, "aws:eks/nodeGroup:NodeGroup::cluster-system-nodes",
            "aws:eks/addon:Addon::cluster-coredns"} <= graph[RELEASE]
    assert {guard, ROLE_POLICY} <= _closure(graph, ASSOCIATION)
    namespace = "kubernetes:core/v1:Namespace::edge-namespace"
    assert RELEASE in graph[namespace]
    # The objects that make Envoy Gateway create the LoadBalancer Service wait for the controller.
    for urn in ("kubernetes:gateway.envoyproxy.io/v1alpha1:EnvoyProxy::edge-envoyproxy-llm-serving-proxy",
                "kubernetes:gateway.networking.k8s.io/v1:Gateway::edge-gateway-llm-serving"):
        assert {RELEASE, namespace} <= graph[urn]


def test_destroy_deletes_the_edge_namespace_before_the_controller_and_the_controller_before_its_credentials(sandbox):
    graph = _graph(sandbox)
    namespace = "kubernetes:core/v1:Namespace::edge-namespace"
    # The Envoy Service (and its NLB) lives in the edge namespace: its deletion waits for the controller's
    # finalizer, and the controller is uninstalled only after it.
    assert _deleted_before(graph, namespace, RELEASE)
    assert _deleted_before(graph, "kubernetes:helm.sh/v3:Release::edge-envoy-gateway", RELEASE)
    for credential in (ASSOCIATION, ROLE_POLICY, "aws:eks/nodeGroup:NodeGroup::cluster-system-nodes",
                       "aws:ec2/vpc:Vpc::cluster-vpc"):
        assert _deleted_before(graph, RELEASE, credential)
    assert not _deleted_before(graph, RELEASE, namespace)


def test_existing_clusters_keep_their_own_controller(rendered):
    for stack in ("dev", "prod", "staging"):
        associations = rendered[stack].by_type().get("aws:eks/podIdentityAssociation:PodIdentityAssociation", [])
        assert "aws-load-balancer-controller" not in {a["inputs"]["serviceAccount"] for a in associations}


def _existing(edge: dict[str, Any] | None = None, opt_in: bool = True) -> ServingStackArgs:
    cluster = {**EXISTING["cluster"], **({"loadBalancerController": "install"} if opt_in else {})}
    return validate(ServingStackArgs, {**EXISTING, "cluster": cluster, "edge": {**EXISTING["edge"], **(edge or {})}})


def test_an_existing_cluster_opts_in_with_no_node_selector():
    where = Site(vpc_id="vpc-0abc", cluster_security_group_id="sg-0123456789abcdef0", region="eu-west-1",
                 subnets=[], subnet_keys=(), staging=StagingNodes(None, (), {}))
    found = parts.load_balancer_controller(_existing(), where)
    assert found is not None
    assert (found.cluster_name, found.region, found.vpc_id, found.node_selector, found.chart_version) == (
        "llm-prod", "eu-west-1", "vpc-0abc", {}, versions.AWS_LOAD_BALANCER_CONTROLLER.version)
    assert parts.load_balancer_controller(_existing(opt_in=False), where) is None


def _lines(config: ServingStackArgs) -> list[str]:
    return [p.line() for p in checks.check(config)]


def test_a_created_cluster_refuses_an_existing_controller_and_alb_mode():
    assert _lines(create_config(cluster__loadBalancerController="existing")) == [
        "llm-serving:cluster.loadBalancerController: a cluster the stack creates runs no load balancer controller: "
        'the edge would get no load balancer (got "existing"; expected install, or unset)'
    ]
    alb = create_config(edge={"host": "llm.example.com", "mode": "alb", "tls": {"acmCertificateArn": ACM},
                              "loadBalancerSubnetIds": ALB_SUBNETS})
    assert _lines(alb) == [
        'llm-serving:edge.mode: alb is not supported with cluster.mode create (its subnets are named by id) '
        '(got "alb"; expected gateway)'
    ]


def _alb_opted_in(**edge: Any) -> ServingStackArgs:
    return _existing({"mode": "alb", "tls": {"acmCertificateArn": ACM}, "loadBalancerSubnetIds": ALB_SUBNETS, **edge})


def test_alb_mode_with_the_stacks_controller_needs_no_role_and_refuses_two_installs():
    assert _lines(_alb_opted_in()) == []
    assert _lines(_alb_opted_in(albControllerRoleArn="arn:aws:iam::123456789012:role/alb")) == [
        "llm-serving:edge.albControllerRoleArn: the program creates the controller's role when it installs the "
        'controller (cluster.loadBalancerController install) (got "arn:aws:iam::123456789012:role/alb"; '
        "expected unset)"
    ]
    assert _lines(_alb_opted_in(controller="existing")) == [
        "llm-serving:edge.controller: alb mode's controller is the one cluster.loadBalancerController installs "
        '(got "existing"; expected install, or cluster.loadBalancerController existing)'
    ]
