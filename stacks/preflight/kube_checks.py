"""Checks inside the cluster, through the kubeconfig the program itself builds: the endpoint answers
and knows the caller, the CRDs and objects the stack assumes exist, and nothing it creates collides
with an object or an install someone else owns."""

from __future__ import annotations

from kubernetes.client.exceptions import ApiException

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


def crds(ctx: Context, check: str, names: tuple[str, ...], why: str, fix: str, version: str = "v1") -> list[Finding]:
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
    return crds(ctx, "k8s.prometheus-operator", PROMETHEUS_CRDS,
                 "observability.prometheus.mode is existing, so the stack's monitors and rules need them",
                 "install the Prometheus Operator, or set observability.prometheus.mode: install")


def alb_controller(ctx: Context) -> list[Finding]:
    if not ctx.intent.alb_controller_existing:
        return []
    return crds(ctx, "k8s.alb-controller", ALB_CONTROLLER_CRDS,
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
    # (chart, its namespace or None for an EKS add-on, switch, rivals)
    wanted: list[tuple[str, str | None, str, tuple[str, ...]]] = [
        (c.chart, c.namespace, c.switch, c.rivals) for c in ctx.intent.charts]
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
