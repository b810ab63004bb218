"""Checks inside the cluster, through the kubeconfig the program itself builds: the endpoint answers
and knows the caller, the CRDs and objects the stack assumes exist, and nothing it creates collides
with an object or an install someone else owns."""

from __future__ import annotations

from typing import Any

from kubernetes.client.exceptions import ApiException

from llm_serving import edge as edge_package
from llm_serving.gpu import GPU_TAINT_KEY
from stacks.config import AutoscalingMode
from stacks.preflight.context import Context
from stacks.preflight.result import Finding, failed, passed, unknown

ACCESS = ("docs/operations.md#before-the-first-up: an EKS access entry for this identity "
          "(aws eks create-access-entry, then associate-access-policy AmazonEKSClusterAdminPolicy)")
# Prometheus Operator kinds the stack creates (PodMonitor and ServiceMonitor for scraping,
# PrometheusRule for alerts; llm_serving/observability and llm_serving/gpu).
PROMETHEUS_CRDS = ("podmonitors.monitoring.coreos.com", "servicemonitors.monitoring.coreos.com",
                   "prometheusrules.monitoring.coreos.com")
# The load balancer controller's own CRDs: present wherever the controller was installed by its chart.
ALB_CONTROLLER_CRDS = ("targetgroupbindings.elbv2.k8s.aws", "ingressclassparams.elbv2.k8s.aws")
# Pulumi's Kubernetes provider applies server-side as "pulumi-kubernetes-<random suffix>"
# (pulumi/pulumi-kubernetes#2271): a manager with this prefix is this program.
PULUMI_MANAGER = "pulumi-kubernetes"
HELM_CHART_LABEL = "helm.sh/chart"
HELM_RELEASE = "meta.helm.sh/release-name"
HELM_RELEASE_NAMESPACE = "meta.helm.sh/release-namespace"
# The extended resource NVIDIA's device plugin advertises (NVIDIA/k8s-device-plugin README).
GPU_RESOURCE = "nvidia.com/gpu"
# The device plugin's image, whether its chart or the GPU Operator runs it (nvcr.io/nvidia/k8s-device-plugin).
DEVICE_PLUGIN_IMAGE = "k8s-device-plugin"
# KEDA's ScaledObject (keda.sh/v1alpha1) and the custom metrics API prometheus-adapter serves.
KEDA_CRD = "scaledobjects.keda.sh"
CUSTOM_METRICS_API = "v1beta1.custom.metrics.k8s.io"
# The label the API server sets on every namespace (Kubernetes 1.22+, NamespaceDefaultLabelName).
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


def endpoint(ctx: Context) -> list[Finding]:
    kube = ctx.kube()
    try:
        version = kube.version().git_version
        kube.list_namespaces()
    except ApiException as error:
        if error.status == 401:
            return [failed("cluster.endpoint", "the API server answers but does not know this identity: no EKS "
                           "access entry or aws-auth mapping (or `aws eks get-token` failed)", ACCESS)]
        if error.status == 403:
            return [unknown("cluster.endpoint", "the API server knows this identity but it may not list "
                            "namespaces: whether it can create the stack's objects is unknown",
                            "run preflight as the identity that runs pulumi up; " + ACCESS)]
        raise
    return [passed("cluster.endpoint", f"API server {version} reachable; this identity is authorised")]


def _crds(ctx: Context, check: str, names: tuple[str, ...], why: str, fix: str, version: str = "v1") -> list[Finding]:
    kube = ctx.kube()
    missing = []
    for name in names:
        try:
            crd = kube.crd(name)
        except ApiException as error:
            if error.status != 404:
                raise
            missing.append(name)
            continue
        served = [v.name for v in crd.spec.versions if v.served]
        if version not in served and not name.endswith("elbv2.k8s.aws"):
            missing.append(f"{name} (serves {', '.join(served)}, not {version})")
    if missing:
        return [failed(check, f"missing: {', '.join(missing)} ({why})", fix)]
    return [passed(check, f"{', '.join(names)} present")]


def prometheus_crds(ctx: Context) -> list[Finding]:
    if not ctx.intent.prometheus_existing:
        return []
    return _crds(ctx, "k8s.prometheus-operator", PROMETHEUS_CRDS,
                 "observability.prometheus.mode is existing, so the stack's monitors and rules need them",
                 "install the Prometheus Operator, or set observability.prometheus.mode: install")


def alb_controller(ctx: Context) -> list[Finding]:
    if not ctx.intent.alb_controller_existing:
        return []
    return _crds(ctx, "k8s.alb-controller", ALB_CONTROLLER_CRDS,
                 "the edge's load balancer (gateway mode's NLB, or alb mode with controller existing) needs the "
                 "AWS Load Balancer Controller",
                 "install the controller, or set cluster.loadBalancerController: install (or, in alb mode, "
                 "edge.controller: install)")


def _ready(issuer: dict) -> bool:
    conditions = issuer.get("status", {}).get("conditions", [])
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def cert_manager_issuer(ctx: Context) -> list[Finding]:
    name = ctx.intent.cert_manager_issuer
    if name is None:
        return []
    check = "k8s.cert-manager-issuer"
    try:
        issuer = ctx.kube().cluster_issuer(name)
    except ApiException as error:
        if error.status != 404:
            raise
        return [failed(check, f"no cert-manager ClusterIssuer {name} (or cert-manager is not installed): the "
                       "edge's certificate is never issued and HTTPS fails",
                       "install cert-manager and create the issuer, or fix edge.tls.certManagerIssuer")]
    if not _ready(issuer):
        return [failed(check, f"ClusterIssuer {name} is not Ready",
                       f"kubectl describe clusterissuer {name}: fix what its conditions say")]
    return [passed(check, f"ClusterIssuer {name} Ready")]


def tls_secret(ctx: Context) -> list[Finding]:
    name = ctx.intent.tls_secret
    if name is None:
        return []
    namespace = ctx.intent.edge_namespace
    check = "k8s.tls-secret"
    try:
        secret = ctx.kube().secret(namespace, name)
    except ApiException as error:
        if error.status != 404:
            raise
        return [failed(check, f"no Secret {namespace}/{name}: the listener has no certificate",
                       f"kubectl create secret tls {name} -n {namespace} --cert=... --key=..., or fix "
                       "edge.tls.secretName")]
    if secret.type != "kubernetes.io/tls":
        return [failed(check, f"Secret {namespace}/{name} is of type {secret.type}, not kubernetes.io/tls",
                       "recreate it with kubectl create secret tls")]
    return [passed(check, f"Secret {namespace}/{name} (kubernetes.io/tls)")]


def _managers(obj) -> list[str]:
    return sorted({m.manager for m in (obj.metadata.managed_fields or []) if m.manager})


def service_collisions(ctx: Context) -> list[Finding]:
    namespace = ctx.intent.serving_namespace
    kube = ctx.kube()
    found = []
    for name in ctx.intent.model_services:
        try:
            service = kube.service(namespace, name)
        except ApiException as error:
            if error.status != 404:
                raise
            found.append(passed("k8s.collisions", f"Service {namespace}/{name}: free"))
            continue
        managers = _managers(service)
        if managers and all(m.startswith(PULUMI_MANAGER) for m in managers):
            found.append(passed("k8s.collisions", f"Service {namespace}/{name}: this program's"))
        else:
            found.append(failed("k8s.collisions", f"Service {namespace}/{name} exists, managed by "
                                f"{', '.join(managers) or 'an unknown client'}: the up would apply over it "
                                "(server-side apply) and take its traffic",
                                f"rename the model (models[{name}].name), or delete that Service"))
    return found


def _chart(labels: dict[str, str], chart: str) -> bool:
    """Helm's standard label is `<chart>-<version>`; `keda-add-ons-http-0.10.0` is not `keda`."""
    value = labels.get(HELM_CHART_LABEL, "")
    if not value.startswith(chart + "-"):
        return False
    return value[len(chart) + 1:].removeprefix("v")[:1].isdigit()


def chart_conflicts(ctx: Context) -> list[Finding]:
    """Releases of the charts the program installs (or of their rivals) that are not where the program
    would put its own: two controllers then fight over the same objects, webhooks and CRDs."""
    kube = ctx.kube()
    workloads = list(kube.helm_deployments().items) + list(kube.helm_daemon_sets().items)
    found = []
    wanted = [(c.chart, c.namespace, c.switch, c.rivals) for c in ctx.intent.charts]
    wanted += [(a.helm_twin, None, a.switch, ()) for a in ctx.intent.addons]
    for chart, namespace, switch, rivals in wanted:
        others = set()
        for workload in workloads:
            labels = workload.metadata.labels or {}
            annotations = workload.metadata.annotations or {}
            place = (annotations.get(HELM_RELEASE, "?"), annotations.get(HELM_RELEASE_NAMESPACE,
                                                                          workload.metadata.namespace))
            for candidate in (chart, *rivals):
                if _chart(labels, candidate) and (candidate != chart or place != (chart, namespace)):
                    others.add(f"{candidate} release {place[0]} in {place[1]}")
        subject = f"{chart} (as an EKS add-on)" if namespace is None else f"{chart} in {namespace}"
        if others:
            found.append(failed("k8s.install-conflicts", f"{subject}: the cluster already runs "
                                f"{'; '.join(sorted(others))}", switch))
        else:
            found.append(passed("k8s.install-conflicts", f"{subject}: no other install"))
    return found


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
    AllowedRoutes: `from` defaults to Same, `kinds` to the protocol's route kinds)."""
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
    listeners = spec.get("listeners", [])
    if target.listener is not None:
        listeners = [item for item in listeners if item.get("name") == target.listener]
        if not listeners:
            return [failed(check, f"Gateway {where} has no listener {target.listener}",
                           "fix edge.gateway.listener, or unset it to attach by hostname")]
    problems = []
    labels = ctx.intent.serving_namespace_labels or {}
    for host in ctx.intent.route_hosts:
        serving = [item for item in listeners if _host_matches(item.get("hostname"), host)]
        reasons = [f"{item.get('name')} {why}" for item in serving
                   if (why := _admits(item, target.namespace, ctx.intent.serving_namespace, labels))]
        if not serving:
            problems.append(f"no listener of {where} serves {host}")
        elif len(reasons) == len(serving):
            problems.append(f"{host}: listener {'; '.join(reasons)}")
    if problems:
        return [failed(check, "; ".join(problems) + f": the routes in {ctx.intent.serving_namespace} are never "
                       "accepted", f"let a listener for the host admit HTTPRoutes from {ctx.intent.serving_namespace} "
                       "(allowedRoutes.namespaces), or fix edge.host and edge.gateway.listener")]
    if not _condition(gateway, "Programmed"):
        return [failed(check, f"Gateway {where} is not Programmed",
                       f"kubectl describe gateway -n {target.namespace} {target.name}: fix what its conditions say")]
    return [passed(check, f"Gateway {where} (Envoy Gateway) programmed; its listeners admit the routes of "
                   f"{ctx.intent.serving_namespace}")]


def existing_autoscaler(ctx: Context) -> list[Finding]:
    """autoscaling.controller existing: KEDA's ScaledObject CRD, or the custom metrics API prometheus-adapter
    serves, is there (else every model's scaling object is refused or never acted on)."""
    mode = ctx.intent.existing_autoscaler
    if mode is None:
        return []
    check = "k8s.autoscaler"
    if mode is AutoscalingMode.KEDA:
        return _crds(ctx, check, (KEDA_CRD,), "autoscaling.controller is existing, so each model's ScaledObject "
                     "needs KEDA", "install KEDA, or set autoscaling.controller: install", version="v1alpha1")
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
    return [passed(check, f"APIService {CUSTOM_METRICS_API} Available")]
