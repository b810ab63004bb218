"""Cluster Autoscaler as rendered: chart values, least-privilege IAM, Pod Identity, and node auto repair."""

from __future__ import annotations

import json

from llm_serving.gpu import GpuNodeGroup
from llm_serving.stack import parts, planning
from tests.support.components import committed_args, run, site, waits_for
from tests.support.reference import helm_value_errors

RELEASE = "kubernetes:helm.sh/v3:Release"


def inputs(result, type_, name):
    return result.resource(type_, name)["inputs"]


def test_prod_chart_values_are_exactly_as_designed(rendered):
    release = inputs(rendered["prod"], RELEASE, "cluster-autoscaler-release")
    assert (release["chart"], release["version"], release["namespace"]) == (
        "cluster-autoscaler", "9.53.0", "kube-system")
    assert release["values"] == {
        "cloudProvider": "aws",
        "awsRegion": "us-east-1",
        # Only groups carrying our tag with this cluster's name (and EKS's two standard tags).
        "autoDiscovery": {"clusterName": "llm-prod", "tags": [
            "k8s.io/cluster-autoscaler/enabled", "k8s.io/cluster-autoscaler/llm-prod",
            "llm-serving/node-autoscaling=llm-prod"]},
        # The cluster's minor: Cluster Autoscaler 1.34 for Kubernetes 1.34.
        "image": {"tag": "v1.34.5"},
        "fullnameOverride": "cluster-autoscaler",
        "rbac": {"serviceAccount": {"create": True, "name": "cluster-autoscaler"}},
        "extraArgs": {"expander": "priority,least-waste", "max-node-provision-time": "15m",
                      "balance-similar-node-groups": True},
        "expanderPriorities": {"50": ["^eks-gpu-p5-48xlarge-.*"], "1": [".*"]},
        "priorityClassName": "system-cluster-critical",
        "podDisruptionBudget": {"maxUnavailable": 1},
        "resources": {"requests": {"cpu": "100m", "memory": "600Mi"}, "limits": {"memory": "600Mi"}},
        "securityContext": {"runAsNonRoot": True, "runAsUser": 65534, "runAsGroup": 65534,
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "containerSecurityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                     "capabilities": {"drop": ["ALL"]}},
    }
    assert helm_value_errors("cluster-autoscaler", "9.53.0", release["values"]) == []
    # Credentials come through the Pod Identity association, which must exist before the first pod.
    assert "aws:eks/podIdentityAssociation:PodIdentityAssociation::cluster-autoscaler-pod-identity" in (
        waits_for(rendered["prod"], f"{RELEASE}::cluster-autoscaler-release"))


def test_iam_is_least_privilege_and_bound_to_the_service_account(rendered):
    prod = rendered["prod"]
    role = inputs(prod, "aws:iam/role:Role", "cluster-autoscaler-role")
    assert json.loads(role["assumeRolePolicy"]) == {"Version": "2012-10-17", "Statement": [{
        "Effect": "Allow", "Principal": {"Service": "pods.eks.amazonaws.com"},
        "Action": ["sts:AssumeRole", "sts:TagSession"],
        # Only this service account of this cluster: the session tags EKS Pod Identity sets.
        "Condition": {"StringEquals": {
            "aws:RequestTag/eks-cluster-arn": "arn:aws:eks:us-east-1:123456789012:cluster/llm-prod",
            "aws:RequestTag/kubernetes-namespace": "kube-system",
            "aws:RequestTag/kubernetes-service-account": "cluster-autoscaler"}}}]}
    policy = json.loads(inputs(prod, "aws:iam/rolePolicy:RolePolicy", "cluster-autoscaler-policy")["policy"])
    statements = {s["Sid"]: s for s in policy["Statement"]}
    assert statements["ReadNodeGroups"]["Resource"] == "arn:aws:eks:us-east-1:123456789012:nodegroup/llm-prod/*"
    assert statements["ResizeOwnGroups"] == {
        "Sid": "ResizeOwnGroups", "Effect": "Allow",
        "Action": ["autoscaling:SetDesiredCapacity", "autoscaling:TerminateInstanceInAutoScalingGroup"],
        "Resource": "*",
        "Condition": {"StringEquals": {"aws:ResourceTag/llm-serving/node-autoscaling": "llm-prod"}},
    }
    # Describe calls take no resource; nothing else is granted.
    assert statements["Discover"]["Resource"] == "*"
    assert all(a.split(":")[1].startswith(("Describe", "Get")) for a in statements["Discover"]["Action"])
    assert set(statements) == {"Discover", "ReadNodeGroups", "ResizeOwnGroups"}
    association = inputs(prod, "aws:eks/podIdentityAssociation:PodIdentityAssociation",
                         "cluster-autoscaler-pod-identity")
    assert association == {
        "clusterName": "llm-prod", "namespace": "kube-system", "serviceAccount": "cluster-autoscaler",
        "roleArn": "arn:aws:iam::123456789012:role/cluster-autoscaler-role",
        "tags": {"app.kubernetes.io/part-of": "llm-serving", "llm-serving/environment": "prod"},
    }


def test_node_monitoring_agent_runs_on_every_node_for_auto_repair(rendered):
    # One per cluster, named apart from the node group: a new generation must not add a second one.
    addon = inputs(rendered["prod"], "aws:eks/addon:Addon", "node-monitoring-agent")
    assert addon["addonName"] == "eks-node-monitoring-agent"
    assert json.loads(addon["configurationValues"]) == {"dcgmAgent": {"tolerations": [
        {"effect": "NoSchedule", "key": "nvidia.com/gpu", "operator": "Exists"}]}}
    wiring = rendered["prod"].wiring["aws:eks/addon:Addon::node-monitoring-agent"]
    assert "aws:eks/nodeGroup:NodeGroup::gpu-p5-48xlarge-node-group" in wiring["dependsOn"]




def test_autoscaler_starts_only_with_its_permissions_and_its_admission_guard_in_place(rendered):
    release = f"{RELEASE}::cluster-autoscaler-release"
    guard = ("kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicyBinding::"
             "cluster-autoscaler-admission-binding")
    # The release depends on the guard and on the association, which comes after the guard and the role's policy.
    association = "aws:eks/podIdentityAssociation:PodIdentityAssociation::cluster-autoscaler-pod-identity"
    assert {guard, association} <= set(rendered["prod"].wiring[release]["dependsOn"])
    policy = "aws:iam/rolePolicy:RolePolicy::cluster-autoscaler-policy"
    assert {guard, policy} <= waits_for(rendered["prod"], association)


def node_group(args) -> object:
    """The stack's GPU node group alone, under the mocks (the component tier)."""
    return run(lambda: GpuNodeGroup(parts.node_group_name(args), parts.node_group(args, site(args))))


def test_without_an_autoscaler_nothing_is_installed_and_desired_nodes_apply():
    args = committed_args("prod", nodeAutoscaling={"mode": "none"},
                          gpuNodeGroup={"scaling": {"minNodes": 3, "maxNodes": 3, "desiredNodes": 3}})
    assert parts.cluster_autoscaler(args, site(args)) is None
    result = node_group(args)
    wiring = result.wiring["aws:eks/nodeGroup:NodeGroup::gpu-p5-48xlarge-node-group"]
    # Nobody else owns the size: a change of desiredNodes must reach the group.
    assert wiring["ignoreChanges"] == []
    assert result.resource("aws:eks/nodeGroup:NodeGroup", "gpu-p5-48xlarge-node-group")["inputs"][
        "scalingConfig"]["desiredSize"] == 3


def test_an_existing_autoscaler_gets_the_tags_it_reads_and_nothing_else():
    args = committed_args("prod", nodeAutoscaling={"mode": "existing", "existing": "cluster-autoscaler"})
    assert parts.cluster_autoscaler(args, site(args)) is None
    result = node_group(args)
    tags = {r["inputs"]["tag"]["key"] for r in result.by_type()["aws:autoscaling/tag:Tag"]}
    assert "k8s.io/cluster-autoscaler/node-template/resources/nvidia.com/gpu" in tags
    # The group's size is the autoscaler's after creation, as with the stack's own.
    assert result.wiring["aws:eks/nodeGroup:NodeGroup::gpu-p5-48xlarge-node-group"]["ignoreChanges"] == [
        "scalingConfig.desiredSize"]


def test_node_group_and_autoscaler_follow_the_clusters_version():
    generations = {}
    for minor in ("1.33", "1.34"):
        args = committed_args("prod", cluster={"kubernetesVersion": minor}, gpuNodeGroup={"amiReleaseVersion": None})
        group = node_group(args).resource("aws:eks/nodeGroup:NodeGroup", "gpu-p5-48xlarge-node-group")["inputs"]
        assert group["version"] == minor
        assert "releaseVersion" not in group
        # Cluster Autoscaler's image is the release for the cluster's minor.
        assert parts.cluster_autoscaler(args, site(args)).image_tag.startswith(f"v{minor}.")
        generations[minor] = group["labels"]["llm-serving/node-generation"]
    # Another version is another node generation: a new group, and the pods follow it.
    assert generations["1.33"] != generations["1.34"]


def test_dev_without_an_autoscaler_replaces_its_single_replica_in_place():
    args = committed_args("dev", nodeAutoscaling={"mode": "none"})
    # One 1-GPU node and no autoscaler: no room for a surge pod, so dev accepts a cold start's outage.
    assert planning.rollout_strategies(args)["llama-8b"].manifest() == {"type": "Recreate"}
