"""Adopt piece by piece: ServingStack on a cluster that already runs GPU nodes (Karpenter), the NVIDIA device plugin
and a DCGM exporter, an Envoy Gateway, KEDA and Prometheus creates none of those, and each part can be taken back
by name. The component tier: one ServingStack under the mocks per case."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from llm_serving import ServingStack
from tests.support.components import EXISTING_EVERYTHING, find, run, stack_args

# What a cluster's owner runs that the stack would otherwise install or create.
PLATFORM_TYPES = (
    "llmserving:gpu:GpuNodeGroup", "llmserving:gpu:ClusterAutoscaler", "llmserving:gpu:NvidiaDevicePlugin",
    "llmserving:gpu:DcgmExporter", "llmserving:observability:PrometheusStack", "kubernetes:helm.sh/v3:Release",
    "kubernetes:helm.sh/v4:Chart", "aws:eks/nodeGroup:NodeGroup", "aws:eks/addon:Addon",
)
GATEWAY_KINDS = ("Gateway", "GatewayClass", "EnvoyProxy", "ClientTrafficPolicy")


def with_changes(**sections: dict[str, Any]) -> dict[str, Any]:
    values = copy.deepcopy(EXISTING_EVERYTHING)
    for key, changes in sections.items():
        values[key] = {**values[key], **changes}
    return values


@pytest.fixture(scope="module")
def adopted():
    return run(lambda: ServingStack("llm", stack_args(EXISTING_EVERYTHING)))


def test_a_cluster_that_runs_everything_gets_only_the_model(adopted):
    assert [r["type"] for r in adopted.resources if r["type"] in PLATFORM_TYPES] == []
    assert [m["kind"] for m in adopted.manifests if m["kind"] in GATEWAY_KINDS] == []
    assert {m["kind"] for m in adopted.manifests if m["kind"] == "Namespace"} == {"Namespace"}
    assert [m["metadata"]["name"] for m in adopted.manifests if m["kind"] == "Namespace"] == ["llm-serving"]
    assert {m["kind"] for m in adopted.manifests} >= {"Deployment", "Service", "HTTPRoute", "ScaledObject",
                                                      "PrometheusRule", "PodMonitor"}


def test_the_routes_attach_to_the_existing_gateways_https_listener_and_are_authenticated_one_by_one(adopted):
    (route,) = [m for m in adopted.manifests if m["kind"] == "HTTPRoute"]
    # Always the named listener: without a section the route would bind a plain-HTTP listener too.
    assert route["spec"]["parentRefs"] == [
        {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "shared", "namespace": "gateways",
         "sectionName": EXISTING_EVERYTHING["edge"]["gateway"]["listener"]}]
    (policy,) = [m for m in adopted.manifests if m["kind"] == "SecurityPolicy"]
    # Never the shared Gateway itself: other teams' routes are not ours to authenticate.
    assert policy["metadata"]["namespace"] == route["metadata"]["namespace"]
    assert policy["spec"]["targetRefs"] == [
        {"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": "llama-8b"}]
    keys = policy["spec"]["apiKeyAuth"]["credentialRefs"][0]["name"]
    assert [(m["metadata"]["namespace"]) for m in adopted.manifests
            if m["kind"] == "Secret" and m["metadata"]["name"] == keys] == [policy["metadata"]["namespace"]]
    # The vLLM pods admit the existing Gateway's proxies (Envoy Gateway's owning-gateway labels).
    (fence,) = [m for m in adopted.manifests
                if m["kind"] == "NetworkPolicy" and m["metadata"]["name"] == "vllm-serving"]
    proxies = fence["spec"]["ingress"][0]["from"][0]["podSelector"]["matchLabels"]
    assert (proxies["gateway.envoyproxy.io/owning-gateway-name"],
            proxies["gateway.envoyproxy.io/owning-gateway-namespace"]) == ("shared", "gateways")


def test_existing_nodes_are_found_by_instance_type_and_tolerated_by_the_gpu_taint(adopted):
    (deployment,) = [m for m in adopted.manifests if m["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"node.kubernetes.io/instance-type": "p5.4xlarge"}
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    # Karpenter (and Auto Mode) leave a node that runs a replica alone: a move is a full cold start.
    assert deployment["spec"]["template"]["metadata"]["annotations"]["karpenter.sh/do-not-disrupt"] == "true"


def test_on_efs_existing_nodes_serve_only_from_the_zones_with_mount_targets():
    efs = with_changes(
        gpuNodeGroup={"subnets": [{"id": "subnet-0aa00000000000001", "availabilityZone": "us-east-1a"}],
                      "existing": {"maxNodes": 2, "nodeRoleArn": "arn:aws:iam::123456789012:role/karpenter-gpu",
                                   "securityGroupId": "sg-0123456789abcdef1"}})
    efs["weightsStorage"] = {"backend": "efs"}
    efs["models"] = [{k: v for k, v in model.items() if k != "storage"} for model in efs["models"]]
    result = run(lambda: ServingStack("llm", stack_args(efs)))
    (deployment,) = [m for m in result.manifests if m["kind"] == "Deployment"]
    terms = deployment["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In",
                                            "values": ["us-east-1a"]}]}]
    # The staging Job the same zones: what it writes is what the replicas read.
    (job,) = [m for m in result.manifests if m["kind"] == "Job" and "affinity" in m["spec"]["template"]["spec"]]
    assert job["spec"]["template"]["spec"]["affinity"]["nodeAffinity"] == \
        deployment["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]


def test_the_scaled_object_waits_only_for_its_workload_when_keda_is_the_clusters(adopted):
    (scaled,) = find(adopted, "kubernetes:keda.sh/v1alpha1:ScaledObject")
    assert scaled["options"]["dependsOn"] == ["kubernetes:apps/v1:Deployment::llama-8b-deployment"]


def test_each_part_is_installed_again_when_asked_for_by_name():
    values = with_changes(addons={"nvidiaDevicePlugin": {"mode": "install"}, "dcgmExporter": {"mode": "install"}},
                          autoscaling={"controller": "install"})
    installed = run(lambda: ServingStack("llm", stack_args(values)))
    charts = {r["inputs"]["chart"]: r for r in installed.resources if r["type"] == "kubernetes:helm.sh/v3:Release"}
    assert set(charts) == {"nvidia-device-plugin", "dcgm-exporter", "keda"}
    # On existing nodes the add-ons land where the models do, not on a created group's labels.
    selector = {"node.kubernetes.io/instance-type": "p5.4xlarge"}
    assert charts["nvidia-device-plugin"]["inputs"]["values"]["nodeSelector"] == selector
    assert charts["nvidia-device-plugin"]["inputs"]["values"]["nfd"]["worker"]["nodeSelector"] == selector
    assert charts["dcgm-exporter"]["inputs"]["values"]["nodeSelector"] == selector


def test_existing_nodes_take_their_own_labels_and_taints():
    taint = {"key": "gpu", "operator": "Equal", "value": "h100", "effect": "NoSchedule"}
    nodes = {"existing": {"maxNodes": 2, "nodeSelector": {"karpenter.sh/nodepool": "gpu"}, "tolerations": [taint]}}
    result = run(lambda: ServingStack("llm", stack_args(with_changes(gpuNodeGroup=nodes))))
    (deployment,) = [m for m in result.manifests if m["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"karpenter.sh/nodepool": "gpu"}
    assert pod["tolerations"] == [taint]
