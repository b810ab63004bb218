"""Preflight for the parts a stack takes as the cluster's own: existing GPU nodes advertise the GPUs a pod asks
for, an existing device plugin reaches created nodes, the existing Gateway accepts the routes, and the existing
autoscaler is there. Each check's pass, fail and could-not-check, over the Kubernetes client's model objects."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from kubernetes import client as k8s

from stacks.config import AutoscalingMode
from stacks.preflight import catalog, intent
from stacks.preflight.context import guarded
from stacks.preflight.existing_checks import CUSTOM_METRICS_API, GPU_RESOURCE, KEDA_CRD
from stacks.preflight.result import Outcome
from tests.stacks.preflight.support import CLUSTER, Aws, FakeKube, context, crd, not_found, stack_intent
from tests.support.components import EXISTING_EVERYTHING, stack_args


@pytest.fixture
def aws():
    clients = Aws()
    yield clients
    clients.done()


@pytest.fixture(scope="module")
def adopted():
    """The intent of a stack that takes every platform part as existing."""
    return intent("adopted", "us-east-1", stack_args(EXISTING_EVERYTHING))


class Cluster(FakeKube):
    """FakeKube with nodes, every DaemonSet, Gateways, GatewayClasses and APIServices."""

    def __init__(self, *, nodes=(), daemon_sets=(), gateways=None, classes=None, api_services=None, proxies=(),
                 policies=None, metrics=(), **rest):
        super().__init__(daemon_sets=daemon_sets, **rest)
        self.node_list = list(nodes)
        self.gateways = gateways or {}
        self.classes = classes or {}
        self.api_services = api_services or {}
        self.proxies = list(proxies)  # (namespace, labels) of each pod
        self.policies = policies or {}  # (namespace, plural) -> items
        self.metrics = list(metrics)
        self.selectors: list[str] = []

    def nodes(self, label_selector: str) -> k8s.V1NodeList:
        self._guard("nodes")
        self.selectors.append(label_selector)
        wanted = dict(pair.split("=", 1) for pair in label_selector.split(","))
        return k8s.V1NodeList(items=[n for n in self.node_list
                                     if wanted.items() <= (n.metadata.labels or {}).items()])

    def daemon_sets(self) -> k8s.V1DaemonSetList:
        self._guard("daemon_sets")
        return k8s.V1DaemonSetList(items=self.helm_daemons)

    def _get(self, objects: dict, key: Any) -> dict:
        if key not in objects:
            raise not_found()
        return objects[key]

    def gateway(self, namespace: str, name: str) -> dict:
        self._guard("gateway")
        return self._get(self.gateways, (namespace, name))

    def gateway_class(self, name: str) -> dict:
        return self._get(self.classes, name)

    def api_service(self, name: str) -> dict:
        return self._get(self.api_services, name)

    def custom_metrics(self) -> list[str]:
        return self.metrics

    def envoy_policies(self, namespace: str, plural: str) -> dict:
        return {"items": self.policies.get((namespace, plural), [])}

    def pods(self, namespace: str, label_selector: str) -> k8s.V1PodList:
        wanted = dict(pair.split("=", 1) for pair in label_selector.split(","))
        return k8s.V1PodList(items=[k8s.V1Pod(metadata=k8s.V1ObjectMeta(namespace=ns, labels=labels))
                                    for ns, labels in self.proxies
                                    if ns == namespace and wanted.items() <= labels.items()])


def run(check_id: str, ctx):
    (check,) = [c for c in catalog.CHECKS if c.id == check_id]
    return guarded(check.id, check.aws, lambda: check.run(ctx))


def one(check_id: str, aws, kube, the_intent):
    (finding,) = run(check_id, context(aws, the_intent, kube=kube, cluster=CLUSTER))
    return finding


def node(name: str, labels: dict[str, str], gpus: int | None) -> k8s.V1Node:
    allocatable = {"cpu": "16", "memory": "250Gi"} | ({GPU_RESOURCE: str(gpus)} if gpus is not None else {})
    return k8s.V1Node(metadata=k8s.V1ObjectMeta(name=name, labels=labels),
                      status=k8s.V1NodeStatus(allocatable=allocatable))


def test_the_intent_of_an_adopting_stack_names_each_existing_part(adopted):
    assert adopted.gpu_node_selector == {"node.kubernetes.io/instance-type": "p5.4xlarge"}
    assert adopted.existing_gateway is not None and adopted.existing_gateway.name == "shared"
    assert adopted.existing_autoscaler is AutoscalingMode.KEDA
    assert adopted.route_hosts == ("llm.example.com",)
    # The installs it compares with the cluster's: none of the parts it takes as existing.
    assert {c.chart for c in adopted.charts} & {"nvidia-device-plugin", "dcgm-exporter", "keda", "gateway-helm",
                                                "cluster-autoscaler"} == set()
    # A created stack's intent names none of them.
    dev = stack_intent("dev")
    assert (dev.gpu_node_selector, dev.existing_gateway, dev.existing_autoscaler) == (None, None, None)
    assert {"nvidia-device-plugin", "dcgm-exporter", "keda"} <= {c.chart for c in dev.charts}


def test_existing_gpu_nodes_must_advertise_the_gpus_a_pod_asks_for(aws, adopted):
    labels = {"node.kubernetes.io/instance-type": "p5.4xlarge"}
    need = adopted.gpus_per_pod
    ready = Cluster(nodes=[node("a", labels, need), node("b", labels, 0), node("cpu", {"x": "y"}, None)])
    finding = one("k8s.gpu-nodes", aws, ready, adopted)
    assert finding.outcome is Outcome.PASS and finding.reason.startswith("1 of 2 node(s)")
    assert ready.selectors == ["node.kubernetes.io/instance-type=p5.4xlarge"]

    no_plugin = one("k8s.gpu-nodes", aws, Cluster(nodes=[node("a", labels, None)]), adopted)
    assert no_plugin.outcome is Outcome.FAIL and "no device plugin runs there" in no_plugin.reason

    bigger = dataclasses.replace(adopted, gpus_per_pod=need + 1)
    assert one("k8s.gpu-nodes", aws, Cluster(nodes=[node("a", labels, need)]), bigger).outcome is Outcome.FAIL

    # Karpenter launches nodes for pending pods: none now is not a failure, and not a pass either.
    assert one("k8s.gpu-nodes", aws, Cluster(), adopted).outcome is Outcome.COULD_NOT_CHECK
    assert one("k8s.gpu-nodes", aws, Cluster(refuse={"nodes"}), adopted).outcome is Outcome.COULD_NOT_CHECK
    assert run("k8s.gpu-nodes", context(aws, stack_intent("dev"), kube=Cluster(), cluster=CLUSTER)) == []


def plugin(namespace: str, image: str, tolerations: list[k8s.V1Toleration]) -> k8s.V1DaemonSet:
    spec = k8s.V1PodSpec(containers=[k8s.V1Container(name="plugin", image=image)], tolerations=tolerations)
    return k8s.V1DaemonSet(metadata=k8s.V1ObjectMeta(name="nvidia-device-plugin-daemonset", namespace=namespace),
                           spec=k8s.V1DaemonSetSpec(selector=k8s.V1LabelSelector(),
                                                    template=k8s.V1PodTemplateSpec(spec=spec)))


def test_an_existing_device_plugin_must_reach_the_nodes_the_stack_creates(aws):
    created = stack_intent("dev", device_plugin_existing=True)
    image = "nvcr.io/nvidia/k8s-device-plugin:v0.17.4"
    tolerant = plugin("gpu-operator", image, [k8s.V1Toleration(key="nvidia.com/gpu", operator="Exists",
                                                               effect="NoSchedule")])
    assert one("k8s.device-plugin", aws, Cluster(daemon_sets=[tolerant]), created).outcome is Outcome.PASS
    intolerant = plugin("gpu-operator", image, [k8s.V1Toleration(key="CriticalAddonsOnly", operator="Exists")])
    finding = one("k8s.device-plugin", aws, Cluster(daemon_sets=[intolerant]), created)
    assert finding.outcome is Outcome.FAIL and "does not tolerate the nvidia.com/gpu taint" in finding.reason
    other = plugin("kube-system", "public.ecr.aws/eks/aws-node:v1", [k8s.V1Toleration(operator="Exists")])
    assert one("k8s.device-plugin", aws, Cluster(daemon_sets=[other]), created).outcome is Outcome.FAIL
    # Installed by the stack, or on existing nodes (k8s.gpu-nodes reads them): nothing to check here.
    assert run("k8s.device-plugin", context(aws, stack_intent("dev"), kube=Cluster(), cluster=CLUSTER)) == []


ENVOY_CLASS = {"spec": {"controllerName": "gateway.envoyproxy.io/gatewayclass-controller"}}


def gateway(listeners: list[dict[str, Any]], programmed: str = "True", class_name: str = "envoy") -> dict:
    return {"spec": {"gatewayClassName": class_name, "listeners": listeners},
            "status": {"conditions": [{"type": "Programmed", "status": programmed}]}}


def listener(name: str, hostname: str | None, allowed: dict[str, Any] | None, protocol: str = "HTTPS") -> dict:
    found: dict[str, Any] = {"name": name, "protocol": protocol, "port": 443 if protocol == "HTTPS" else 80}
    if hostname:
        found["hostname"] = hostname
    if allowed is not None:
        found["allowedRoutes"] = allowed
    return found


EVERYONE = {"namespaces": {"from": "All"}}


def check_gateway(aws, adopted, the_gateway, classes=None, the_intent=None, **cluster):
    the_intent = the_intent or adopted
    proxies = cluster.pop("proxies", [(the_intent.edge_namespace, the_intent.existing_gateway.proxy_selector)])
    kube = Cluster(gateways={("gateways", "shared"): the_gateway}, classes=classes or {"envoy": ENVOY_CLASS},
                   proxies=proxies, **cluster)
    return one("k8s.gateway", aws, kube, the_intent)


def test_the_existing_gateways_listener_must_admit_routes_from_the_serving_namespace(aws, adopted):
    assert adopted.existing_gateway.listener == "https"
    assert check_gateway(aws, adopted, gateway([listener("https", "*.example.com", EVERYONE)])).outcome \
        is Outcome.PASS
    # Gateway API's default is `from: Same`: the Gateway's own namespace only.
    same = check_gateway(aws, adopted, gateway([listener("https", None, None)]))
    assert same.outcome is Outcome.FAIL and "its own namespace only" in same.reason
    # A selector over the labels the stack gives its namespace, or the name label the API server adds.
    ours = {"namespaces": {"from": "Selector", "selector": {"matchLabels": {"app.kubernetes.io/part-of":
                                                                            "llm-serving"}}}}
    assert check_gateway(aws, adopted, gateway([listener("https", None, ours)])).outcome is Outcome.PASS
    named = {"namespaces": {"from": "Selector", "selector": {"matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["team-a"]}]}}}
    assert check_gateway(aws, adopted, gateway([listener("https", None, named)])).outcome is Outcome.FAIL
    grpc_only = {"namespaces": {"from": "All"}, "kinds": [{"kind": "GRPCRoute"}]}
    assert "admits only GRPCRoute" in check_gateway(aws, adopted, gateway([listener("https", None, grpc_only)])).reason


def test_the_existing_gateways_listener_must_be_https_for_the_host(aws, adopted):
    other_host = check_gateway(aws, adopted, gateway([listener("https", "api.other.com", EVERYONE)]))
    assert other_host.outcome is Outcome.FAIL and "not llm.example.com" in other_host.reason
    missing = check_gateway(aws, adopted, gateway([listener("web", None, EVERYONE)]))
    assert missing.outcome is Outcome.FAIL and "no listener https" in missing.reason
    # The routes name their listener: an HTTP one would carry the keys in cleartext.
    plain = check_gateway(aws, adopted, gateway([listener("https", None, EVERYONE, protocol="HTTP")]))
    assert plain.outcome is Outcome.FAIL and "cleartext" in plain.reason
    tcp = check_gateway(aws, adopted, gateway([listener("https", None, EVERYONE, protocol="TLS")]))
    assert tcp.outcome is Outcome.FAIL


def test_the_existing_gateway_must_be_envoy_gateways_and_programmed(aws, adopted):
    everyone = [listener("https", None, EVERYONE)]
    istio = check_gateway(aws, adopted, gateway(everyone, class_name="istio"),
                          classes={"istio": {"spec": {"controllerName": "istio.io/gateway-controller"}}})
    assert istio.outcome is Outcome.FAIL and "istio.io/gateway-controller" in istio.reason
    assert check_gateway(aws, adopted, gateway(everyone, programmed="False")).reason \
        == "Gateway gateways/shared is not Programmed"
    absent = one("k8s.gateway", aws, Cluster(), adopted)
    assert absent.outcome is Outcome.FAIL and absent.fix.startswith("create it")
    assert one("k8s.gateway", aws, Cluster(refuse={"gateway"}), adopted).outcome is Outcome.COULD_NOT_CHECK


def test_gateway_level_policies_the_routes_replace_are_refused_until_acknowledged(aws, adopted):
    everyone = gateway([listener("https", None, EVERYONE)])
    allow_list = {"metadata": {"name": "office-only"}, "spec": {"targetRefs": [
        {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "shared"}]}}
    elsewhere = {"metadata": {"name": "other-gateway"}, "spec": {"targetRef": {"kind": "Gateway", "name": "other"}}}
    policies = {("gateways", "securitypolicies"): [allow_list, elsewhere]}
    refused = check_gateway(aws, adopted, everyone, policies=policies)
    assert refused.outcome is Outcome.FAIL
    assert refused.reason.startswith("SecurityPolicy gateways/office-only target Gateway gateways/shared")
    assert refused.fix.endswith("edge.gateway.replacesGatewayPolicies: true")
    acknowledged = dataclasses.replace(adopted, existing_gateway=dataclasses.replace(adopted.existing_gateway,
                                                                                     replaces_policies=True))
    passed = check_gateway(aws, adopted, everyone, the_intent=acknowledged, policies=policies)
    assert passed.outcome is Outcome.PASS and "replaces SecurityPolicy gateways/office-only" in passed.reason


def test_the_gateways_proxies_must_carry_the_labels_the_vllm_pods_admit(aws, adopted):
    everyone = gateway([listener("https", None, EVERYONE)])
    selector = adopted.existing_gateway.proxy_selector
    # mergeGateways: the proxies carry the class's label, not the Gateway's name.
    merged = {k: v for k, v in selector.items() if "owning-gateway" not in k}
    finding = check_gateway(aws, adopted, everyone, proxies=[(adopted.edge_namespace, merged)])
    assert finding.outcome is Outcome.FAIL and "mergeGateways" in finding.reason
    # Proxies in the Gateway's own namespace, not edge.namespace.
    assert check_gateway(aws, adopted, everyone, proxies=[("gateways", selector)]).outcome is Outcome.FAIL


def test_an_existing_gateway_needs_no_load_balancer_controller_of_the_stacks(adopted):
    assert adopted.alb_controller_existing is False


def test_an_existing_autoscaler_must_be_there(aws, adopted):
    assert one("k8s.autoscaler", aws, Cluster(crds=[crd(KEDA_CRD, versions=("v1alpha1",))]), adopted).outcome \
        is Outcome.PASS
    assert one("k8s.autoscaler", aws, Cluster(), adopted).outcome is Outcome.FAIL
    adapter = dataclasses.replace(adopted, existing_autoscaler=AutoscalingMode.PROMETHEUS_ADAPTER)
    available = {"status": {"conditions": [{"type": "Available", "status": "True"}]}}
    served = [f"pods/{metric}" for metric in adapter.adapter_metrics]
    assert one("k8s.autoscaler", aws, Cluster(api_services={CUSTOM_METRICS_API: available}, metrics=served),
               adapter).outcome is Outcome.PASS
    # An adapter without the stack's rules: the API answers, but the HPAs' metrics are not there.
    bare = one("k8s.autoscaler", aws, Cluster(api_services={CUSTOM_METRICS_API: available}, metrics=served[:1]),
               adapter)
    assert bare.outcome is Outcome.FAIL and adapter.adapter_metrics[1] in bare.reason
    assert one("k8s.autoscaler", aws, Cluster(), adapter).outcome is Outcome.FAIL
    assert run("k8s.autoscaler", context(aws, stack_intent("dev"), kube=Cluster(), cluster=CLUSTER)) == []
