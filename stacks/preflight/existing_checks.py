"""Checks of the parts a stack takes as the cluster's own: existing GPU nodes advertise the GPUs a pod asks for,
an existing device plugin reaches the nodes the stack creates, the existing Gateway accepts the routes over
HTTPS and its proxies are the ones the vLLM pods admit, and the existing autoscaler serves what the scaling
objects need."""

from __future__ import annotations

from typing import Any

from kubernetes.client.exceptions import ApiException

from llm_serving import edge as edge_package
from llm_serving.gpu import GPU_TAINT_KEY
from stacks.config import AutoscalingMode
from stacks.preflight import kube_checks
from stacks.preflight.context import Context
from stacks.preflight.result import Finding, failed, passed, unknown

# The extended resource NVIDIA's device plugin advertises (NVIDIA/k8s-device-plugin README).
GPU_RESOURCE = "nvidia.com/gpu"
# The device plugin's image, whether its chart or the GPU Operator runs it (nvcr.io/nvidia/k8s-device-plugin).
DEVICE_PLUGIN_IMAGE = "k8s-device-plugin"
# KEDA's ScaledObject (keda.sh/v1alpha1) and the custom metrics API prometheus-adapter serves.
KEDA_CRD = "scaledobjects.keda.sh"
CUSTOM_METRICS_API = "v1beta1.custom.metrics.k8s.io"
# The label the API server sets on every namespace (Kubernetes 1.22+, NamespaceDefaultLabelName).
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


def gpu_nodes(ctx: Context) -> list[Finding]:
    """Existing GPU nodes (gpuNodeGroup.mode existing): the selector finds nodes and they advertise GPUs."""
    selector = ctx.intent.gpu_node_selector
    if selector is None:
        return []
    check = "k8s.gpu-nodes"
    text = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
    nodes = ctx.kube().nodes(text).items
    need = ctx.intent.gpus_per_pod
    if not nodes:
        # Karpenter and Auto Mode launch nodes for pending pods, so none now is not yet a failure.
        return [unknown(check, f"no node carries {text} now: the models' pods stay Pending until the cluster's "
                        f"provisioner launches one with {need} allocatable {GPU_RESOURCE}",
                        "check that a Karpenter NodePool (or Auto Mode node pool) labels its nodes so and allows the "
                        "instance type, or fix gpuNodeGroup.existing.nodeSelector")]
    counts = {n.metadata.name: int((n.status.allocatable or {}).get(GPU_RESOURCE, "0")) for n in nodes}
    enough = sorted(name for name, count in counts.items() if count >= need)
    if not enough:
        seen = ", ".join(f"{name}: {count}" for name, count in sorted(counts.items()))
        return [failed(check, f"{len(nodes)} node(s) carry {text} but none advertises {need} allocatable "
                       f"{GPU_RESOURCE} ({seen}): no device plugin runs there, or the nodes are too small",
                       "install the NVIDIA device plugin there (or set addons.nvidiaDevicePlugin.mode: install), or "
                       "select nodes of a larger type")]
    return [passed(check, f"{len(enough)} of {len(nodes)} node(s) with {text} advertise {need}+ {GPU_RESOURCE}")]


def _tolerates_gpu_taint(pod_spec: Any) -> bool:
    for toleration in pod_spec.tolerations or []:
        if toleration.operator == "Exists" and toleration.key in (None, "", GPU_TAINT_KEY):
            return True
        if toleration.key == GPU_TAINT_KEY:
            return True
    return False


def device_plugin(ctx: Context) -> list[Finding]:
    """addons.nvidiaDevicePlugin.mode existing on nodes the stack creates: a device plugin DaemonSet runs and
    tolerates the group's GPU taint (else the new nodes never advertise a GPU)."""
    if not ctx.intent.device_plugin_existing or ctx.intent.gpu_node_selector is not None:
        return []  # existing nodes: k8s.gpu-nodes reads what they advertise
    check = "k8s.device-plugin"
    found = [d for d in ctx.kube().daemon_sets().items
             if any(DEVICE_PLUGIN_IMAGE in (c.image or "") for c in d.spec.template.spec.containers)]
    if not found:
        return [failed(check, "addons.nvidiaDevicePlugin.mode is existing but no DaemonSet runs the NVIDIA device "
                       "plugin: the stack's GPU nodes would never advertise nvidia.com/gpu",
                       "install the device plugin or the GPU Operator, or set addons.nvidiaDevicePlugin.mode: install")]
    tolerant = [d for d in found if _tolerates_gpu_taint(d.spec.template.spec)]
    names = ", ".join(f"{d.metadata.namespace}/{d.metadata.name}" for d in found)
    if not tolerant:
        return [failed(check, f"the device plugin ({names}) does not tolerate the {GPU_TAINT_KEY} taint the "
                       "stack's GPU nodes carry, so it never runs there",
                       f"add a toleration for {GPU_TAINT_KEY} to it, or set addons.nvidiaDevicePlugin.mode: install")]
    return [passed(check, f"device plugin {names} tolerates {GPU_TAINT_KEY}")]


def _condition(obj: dict[str, Any], kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True"
               for c in obj.get("status", {}).get("conditions", []))


def _host_matches(listener_host: str | None, host: str) -> bool:
    """Gateway API hostname matching: unset matches all; `*.example.com` matches any name below it."""
    if not listener_host:
        return True
    if listener_host.startswith("*."):
        return host.endswith(listener_host[1:])
    return listener_host == host


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A Kubernetes label selector (matchLabels, matchExpressions) over a label set."""
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression["key"], expression["operator"], expression.get("values") or []
        present = key in labels
        if not {"In": present and labels[key] in values, "NotIn": not present or labels[key] not in values,
                "Exists": present, "DoesNotExist": not present}.get(operator, False):
            return False
    return True


def _admits(listener: dict[str, Any], gateway_namespace: str, namespace: str, labels: dict[str, str]) -> str | None:
    """Why the listener refuses an HTTPRoute from `namespace`, or None when it admits it (Gateway API
    AllowedRoutes: `from` defaults to Same, `kinds` to the protocol's route kinds, HTTPRoute only on HTTP and
    HTTPS listeners)."""
    protocol = listener.get("protocol", "")
    if protocol not in ("HTTP", "HTTPS"):
        return f"is a {protocol or 'protocol-less'} listener, which takes no HTTPRoute"
    allowed = listener.get("allowedRoutes") or {}
    kinds = [k.get("kind") for k in allowed.get("kinds") or []]
    if kinds and "HTTPRoute" not in kinds:
        return f"admits only {', '.join(kinds)}"
    namespaces = allowed.get("namespaces") or {}
    source = namespaces.get("from", "Same")
    if source == "All":
        return None
    if source == "Same":
        return None if namespace == gateway_namespace else "admits routes from its own namespace only"
    if source == "Selector" and _selects(namespaces.get("selector") or {}, {**labels, NAMESPACE_NAME_LABEL:
                                                                             namespace}):
        return None
    return f"admits routes from namespaces selected by {namespaces.get('selector')}, not {namespace}"


def existing_gateway(ctx: Context) -> list[Finding]:
    """edge.gateway: the Gateway exists, belongs to Envoy Gateway (whose policies the stack attaches), is
    programmed, and a listener for each route's host admits HTTPRoutes from the serving namespace."""
    target = ctx.intent.existing_gateway
    if target is None:
        return []
    check = "k8s.gateway"
    where = f"{target.namespace}/{target.name}"
    kube = ctx.kube()
    try:
        gateway = kube.gateway(target.namespace, target.name)
    except ApiException as error:
        if error.status != 404:
            raise
        return [failed(check, f"no Gateway {where} (or the Gateway API CRDs are missing)",
                       "create it, or fix edge.gateway.name and edge.gateway.namespace")]
    spec = gateway.get("spec", {})
    class_name = spec.get("gatewayClassName", "")
    try:
        controller = kube.gateway_class(class_name).get("spec", {}).get("controllerName")
    except ApiException as error:
        if error.status != 404:
            raise
        controller = None
    if controller != edge_package.ENVOY_GATEWAY_CONTROLLER:
        return [failed(check, f"Gateway {where} is of class {class_name}, controlled by {controller or 'nothing'}: "
                       "the stack's SecurityPolicy and BackendTrafficPolicy are Envoy Gateway's and nothing else "
                       "reads them (requests would pass unauthenticated)",
                       f"attach to a Gateway of an Envoy Gateway class ({edge_package.ENVOY_GATEWAY_CONTROLLER})")]
    named = [item for item in spec.get("listeners", []) if item.get("name") == target.listener]
    if not named:
        return [failed(check, f"Gateway {where} has no listener {target.listener}", "fix edge.gateway.listener")]
    (listener,) = named
    if listener.get("protocol") != "HTTPS":
        return [failed(check, f"listener {target.listener} of {where} is {listener.get('protocol')}, not HTTPS: "
                       "clients' API keys and prompts would cross in cleartext",
                       "name the Gateway's HTTPS listener in edge.gateway.listener")]
    problems = []
    labels = ctx.intent.serving_namespace_labels or {}
    for host in ctx.intent.route_hosts:
        if not _host_matches(listener.get("hostname"), host):
            problems.append(f"listener {target.listener} serves {listener.get('hostname')}, not {host}")
    why = _admits(listener, target.namespace, ctx.intent.serving_namespace, labels)
    if why:
        problems.append(f"listener {target.listener} {why}")
    if problems:
        return [failed(check, "; ".join(problems) + f": the routes in {ctx.intent.serving_namespace} are never "
                       "accepted", f"let the listener admit HTTPRoutes from {ctx.intent.serving_namespace} "
                       "(allowedRoutes.namespaces) for the hosts, or fix edge.host and edge.gateway.listener")]
    if not _condition(gateway, "Programmed"):
        return [failed(check, f"Gateway {where} is not Programmed",
                       f"kubectl describe gateway -n {target.namespace} {target.name}: fix what its conditions say")]
    found = _gateway_policies(kube, target.namespace, target.name)
    if found and not target.replaces_policies:
        return [failed(check, f"{', '.join(found)} target Gateway {where}: for the model routes the stack's own "
                       "SecurityPolicy and BackendTrafficPolicy apply instead (a route's policy of a kind replaces "
                       "the Gateway's, envoyproxy/gateway discussion #9071), so their auth, limits or retries do not "
                       "apply to them", "check that the model routes need none of them, then set "
                       "edge.gateway.replacesGatewayPolicies: true")]
    proxies = kube.pods(ctx.intent.edge_namespace, ",".join(f"{k}={v}" for k, v in
                                                            sorted(target.proxy_selector.items()))).items
    if not proxies:
        return [failed(check, f"no pod in {ctx.intent.edge_namespace} carries the labels of {where}'s proxies "
                       f"({', '.join(f'{k}={v}' for k, v in sorted(target.proxy_selector.items()))}), which the vLLM "
                       "pods' NetworkPolicy admits: every request would be refused (a class with mergeGateways, or "
                       "proxies deployed in the Gateway's own namespace)",
                       "set edge.namespace to where the Gateway's proxies run, or give the Gateway proxies of its own")]
    edge = ctx.intent.edge_namespace
    return [passed(check, f"Gateway {where} (Envoy Gateway) programmed; HTTPS listener {target.listener} admits the "
                   f"routes of {ctx.intent.serving_namespace}; {len(proxies)} proxy pod(s) in {edge}"
                   + (f"; replaces {', '.join(found)} for the model routes" if found else ""))]


# Envoy Gateway's policy kinds the stack attaches to its routes (gateway.envoyproxy.io/v1alpha1).
ROUTE_POLICY_KINDS = (("securitypolicies", "SecurityPolicy"), ("backendtrafficpolicies", "BackendTrafficPolicy"))


def _gateway_policies(kube: Any, namespace: str, gateway: str) -> list[str]:
    """The SecurityPolicies and BackendTrafficPolicies that target the Gateway (by reference)."""
    found = []
    for plural, kind in ROUTE_POLICY_KINDS:
        for policy in kube.envoy_policies(namespace, plural).get("items", []):
            spec = policy.get("spec", {})
            refs = [*spec.get("targetRefs", []), *([spec["targetRef"]] if spec.get("targetRef") else [])]
            if any(r.get("kind") == "Gateway" and r.get("name") == gateway for r in refs):
                found.append(f"{kind} {namespace}/{policy['metadata']['name']}")
    return found


def existing_autoscaler(ctx: Context) -> list[Finding]:
    """autoscaling.controller existing: KEDA's ScaledObject CRD, or the custom metrics API prometheus-adapter
    serves, is there (else every model's scaling object is refused or never acted on)."""
    mode = ctx.intent.existing_autoscaler
    if mode is None:
        return []
    check = "k8s.autoscaler"
    if mode is AutoscalingMode.KEDA:
        return kube_checks.crds(ctx, check, (KEDA_CRD,), "autoscaling.controller is existing, so each model's "
                                "ScaledObject needs KEDA", "install KEDA, or set autoscaling.controller: install",
                                version="v1alpha1")
    try:
        service = ctx.kube().api_service(CUSTOM_METRICS_API)
    except ApiException as error:
        if error.status != 404:
            raise
        return [failed(check, f"no APIService {CUSTOM_METRICS_API}: each model's HPA finds no metric",
                       "install prometheus-adapter, or set autoscaling.controller: install")]
    if not _condition(service, "Available"):
        return [failed(check, f"APIService {CUSTOM_METRICS_API} is not Available",
                       f"kubectl describe apiservice {CUSTOM_METRICS_API}: fix what its conditions say")]
    served = set(ctx.kube().custom_metrics())
    missing = [m for m in ctx.intent.adapter_metrics if f"pods/{m}" not in served]
    if missing:
        return [failed(check, f"the custom metrics API serves no {', '.join(missing)}: each model's HPA would "
                       "never scale", "add the adapter rules of llm_serving.scaling (prometheus_adapter_values) to "
                       "the cluster's prometheus-adapter, or set autoscaling.controller: install")]
    metrics = ", ".join(ctx.intent.adapter_metrics)
    return [passed(check, f"APIService {CUSTOM_METRICS_API} Available, serving {metrics}")]
