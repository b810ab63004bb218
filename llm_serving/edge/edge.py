"""Edge: publishes each model's OpenAI API through Envoy Gateway, an AWS ALB or ingress-nginx.

Installs the controller's chart when asked and declares the streaming-safe objects that
`edge_objects` builds (the NetworkPolicies around the pods are the ServingStack's, created first).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, assert_never

import pulumi
import pulumi_kubernetes as k8s
import pulumi_tls as tls

from llm_serving.platform import (
    RESTRICTED,
    chart_images,
    crd_chart,
    crd_manifests,
    helm_release,
    manifest_resource,
    namespace,
    versions,
)

from . import alerts, by_model, objects
from .args import EdgeMode
from .load_balancer_controller import LoadBalancerController, LoadBalancerControllerArgs
from .objects import EdgeSettings, Route

# `restricted`, checked against gateway-helm v1.9.0 rendered by `helm template` with our values
# (the controller and its certgen hook Job: non-root UID 65532, seccomp RuntimeDefault, drop ALL)
# and against the Envoy proxy Deployment the controller creates at run time in this namespace
# (envoyproxy/gateway v1.9.0 internal/infrastructure/kubernetes/resource DefaultSecurityContext for
# the envoy and shutdown-manager containers; our EnvoyProxy overrides no security context, only, once the
# stack has its digest, the proxy container's image).
EDGE_POD_SECURITY = RESTRICTED
# `restricted`: ai-gateway-helm v1.1.0 rendered with our values runs its controller as UID 65532 with
# seccomp RuntimeDefault and drops ALL capabilities (checked with `helm template`).
AI_GATEWAY_POD_SECURITY = RESTRICTED
# Dev's self-signed certificate: a year, renewed by any `pulumi up` in its last 30 days.
SELF_SIGNED_VALIDITY_HOURS = 365 * 24
SELF_SIGNED_EARLY_RENEWAL_HOURS = 30 * 24


@dataclass(frozen=True)
class EdgeMonitoring:
    """Where the edge's PodMonitor and alerts go: the labels Prometheus selects them by, and the runbooks."""

    monitor_labels: dict[str, str]
    runbook_base_url: str


@dataclass(frozen=True)
class EdgeSpec:
    mode: EdgeMode
    install_controller: bool
    settings: EdgeSettings
    routes: tuple[Route, ...]
    envoy_gateway_chart_version: str
    alb_controller_chart_version: str
    alb_controller_values: dict  # clusterName, region, vpcId, service account role
    # alb mode: the subnets the ALB is placed in, and their CIDRs (the ALB reaches the pods directly).
    load_balancer_subnet_ids: tuple[str, ...] = ()
    load_balancer_cidrs: tuple[pulumi.Input[str], ...] = ()
    # The key the gateway accepts (gateway mode, API-key auth): the clients' key, or vLLM's own.
    client_api_key: pulumi.Input[str] | None = None
    # Where the gateway authenticates clients itself: vLLM's own key, injected on every routed request.
    upstream_api_key: pulumi.Input[str] | None = None
    # Envoy AI Gateway as Envoy Gateway's extension, so routes can name InferencePools (gateway mode
    # with an installed controller only; the stack refuses it otherwise).
    inference_extension: bool = False
    ai_gateway_chart_version: str = ""
    ai_gateway_crds_chart_version: str = ""
    inference_pool_crds_file: str = ""  # the InferencePool CRD manifest (a file of platform/crds/)
    # byModel routing: the AI Gateway webhook's certificate from cert-manager (which the cluster runs) instead of
    # the chart's self-signed one (objects.ai_gateway_chart_values).
    ai_gateway_webhook_cert_manager: bool = False
    # Dev: the host a self-signed certificate is made for, stored as settings.tls_secret_name; None: the
    # certificate comes from cert-manager or an existing Secret.
    self_signed_host: str | None = None
    # prod: the CRDs this edge applies are protected as well as retained (`crd_options`).
    protect_crds: bool = False
    # The AWS Load Balancer Controller with its Pod Identity role, installed before anything of the edge
    # (a created cluster, or `cluster.loadBalancerController: install`); None: the cluster runs one, or
    # alb mode installs its own release from `alb_controller_values`.
    load_balancer_controller: LoadBalancerControllerArgs | None = None
    # Gateway mode: scrape the proxies and alert on what clients see (None: no Prometheus rules here).
    monitoring: EdgeMonitoring | None = None
    # A stack's chartImageDigests (`repository:tag` -> `sha256:...`): the images of the charts this edge installs,
    # and the Envoy proxy's (objects.envoy_proxy_image), with a digest there are pulled by it.
    image_digests: dict[str, str] = field(default_factory=dict)


class Edge(pulumi.ComponentResource):
    """The load balancer, routes and policies in front of the vLLM Services, and the alerts on what clients see.

    Routes that name an InferencePool are not created here: the gateway fails closed, so such a route may only go
    up once its endpoint picker answers, and the routing component creates it after the picker
    (`pool_route_manifests`, with what it must wait for in `controller`).

    The weighted HTTPRoute of a model that runs two revisions is created by neither: it goes up once the new
    revision's deploy gate passed (`gated_route_manifests`, by model; the stack creates it with `route`, or the
    routing component for a pooled model), while its header rules' route goes up as any other."""

    def __init__(self, name: str, args: EdgeSpec, opts: pulumi.ResourceOptions | None = None,
                 crds_from: list[pulumi.Resource] | None = None):
        super().__init__("llmserving:edge:Edge", name, None, opts)
        routes = list(args.routes)
        # What every object of the edge waits for: the load balancer controller first, then the edge's own.
        self.controller: list[pulumi.Resource] = []
        # What the endpoint pickers need before they start (the pool CRD, the gateway and its extension).
        self.inference_prerequisites: list[pulumi.Resource] = []
        # Everything the edge created, for what must wait for the edge but not for a gated route (a revision's gate).
        self.objects: list[pulumi.Resource] = []
        balancer: list[pulumi.Resource] = []
        if args.load_balancer_controller is not None:
            balancer.append(LoadBalancerController(
                f"{name}-load-balancer-controller", args.load_balancer_controller, pulumi.ResourceOptions(parent=self)
            ).release)
            self.controller.extend(balancer)
        match args.mode:
            case EdgeMode.GATEWAY:
                manifests = self._gateway(name, args, routes, balancer)
            case EdgeMode.ALB:
                manifests = self._alb(name, args, routes)
            case EdgeMode.INGRESS_NGINX:
                # ingress-nginx was retired in March 2026: no releases or security fixes since.
                pulumi.log.warn(
                    "edge.mode ingress-nginx: ingress-nginx is retired (no security fixes since March 2026); "
                    "move to mode gateway",
                    resource=self,
                )
                manifests = objects.nginx_ingress(args.settings, routes)
            case _:
                assert_never(args.mode)
        # Custom resources wait for the chart that brings their CRDs (and the namespace they live in).
        pooled = {r.model_name for r in routes if r.inference_pool}
        self.pooled = frozenset(pooled)
        gated = {r.model_name for r in routes if r.revisions}
        self.gated_route_manifests = {o["metadata"]["name"]: o for o in manifests
                                      if o["kind"] == "HTTPRoute" and o["metadata"]["name"] in gated}
        manifests = [o for o in manifests if not (o["kind"] == "HTTPRoute" and o["metadata"]["name"] in gated)]
        if args.settings.by_model:
            # One AIGatewayRoute over every pool, created here, before the Gateway, not after the pickers as a pool's
            # HTTPRoute is: AI Gateway's webhook injects its body router into an Envoy pod only when an
            # AIGatewayRoute references the pod's Gateway at the pod's creation (envoyproxy/ai-gateway v1.1.0
            # internal/controller/gateway_mutator.go mutatePod), so a route created last would leave the first
            # Envoy pods without it, failing every request until the controller rolls them. The price: a new model's
            # rule is live before its picker answers, so requests naming it fail closed (500) for that while.
            self.pool_route_manifests = []
            route_after = pulumi.ResourceOptions(parent=self, depends_on=list(self.controller))
            before_gateway = by_model.models_route_objects(args.settings, routes)
            if not args.settings.existing_gateway:
                # Our Gateway names it, and the webhook reads it when it injects the sidecar into each Envoy pod.
                before_gateway.append(by_model.sidecar_config(args.settings))
            self.controller.extend(
                manifest_resource(f"{name}-{obj['kind'].lower()}-{obj['metadata']['name']}", obj, route_after)
                for obj in before_gateway)
        else:
            self.pool_route_manifests = [o for o in manifests if _route_of(o) in pooled]
        self._name = name
        after = pulumi.ResourceOptions(parent=self, depends_on=self.controller)
        for obj in manifests:
            if _route_of(obj) not in pooled:
                metadata = obj["metadata"]
                self.objects.append(manifest_resource(f"{name}-{obj['kind'].lower()}-{metadata['name']}", obj, after))
        self.objects.extend(self.controller)
        if args.mode is EdgeMode.GATEWAY and args.monitoring is not None and not args.settings.existing_gateway:
            # An existing Gateway's proxies are its owner's to scrape and alert on.
            self._monitoring(name, args.settings, args.monitoring, crds_from or [])
        self.register_outputs({})

    def route(self, obj: dict[str, Any], after: list[pulumi.Resource]) -> pulumi.Resource:
        """A gated route (`gated_route_manifests`) of a model routed through its Services: the edge's child, as its
        other routes are, once its objects and `after` (the gate) are done."""
        return manifest_resource(f"{self._name}-{obj['kind'].lower()}-{obj['metadata']['name']}", obj,
                                 pulumi.ResourceOptions(parent=self, depends_on=[*self.controller, *after]))

    def _gateway(self, name: str, args: EdgeSpec, routes: list[Route],
                 balancer: list[pulumi.Resource]) -> list[dict[str, Any]]:
        """Envoy Gateway (installed, or the cluster's), its Gateway and routes, and the credentials they read."""
        controller = self.controller
        if args.install_controller:
            # Only an installed controller's namespace is ours; an existing one is left alone. It
            # depends on the load balancer controller for destroy's sake: Pulumi deletes the
            # namespace first and waits until it is gone, and it is gone only once the Envoy
            # Service in it is, which the load balancer controller's finalizer holds until it has
            # deleted the NLB; only then is the controller uninstalled. The Gateway alone would
            # not do: it has no finalizer, and Envoy Gateway deletes the Service after it returns.
            # The load balancer controller's pod readiness gate (its docs, deploy/pod_readiness_gate.md, v3.5.0):
            # an Envoy pod is Ready only once the NLB's target group reports its IP target healthy, so a proxy
            # rollout (surge first, objects.envoy_proxy) never retires the old pod while the new one is still
            # an initial target: without it both proxies can be replaced within seconds and the target group
            # holds only initial or draining targets. The controller's webhook injects the gate at pod creation.
            ns = namespace(
                f"{name}-namespace", args.settings.namespace, parent=self, pod_security=EDGE_POD_SECURITY,
                labels={objects.POD_READINESS_GATE_LABEL: "enabled"}, depends_on=balancer,
            )
            controller.append(ns)
            # The CRDs first, from their own chart at the controller's version, so a bump
            # upgrades them; gateway-helm then skips its own (crds.enabled: false).
            crds = crd_chart(
                f"{name}-gateway-crds",
                chart="gateway-crds-helm",
                version=args.envoy_gateway_chart_version,
                values=objects.gateway_crds_chart_values(),
                parent=self,
                protect=args.protect_crds,
            )
            controller.append(crds)
            pool_prerequisites = self._inference_pool_prerequisites(name, args) if args.inference_extension else []
            envoy_gateway = helm_release(
                f"{name}-envoy-gateway",
                chart="gateway-helm",
                version=args.envoy_gateway_chart_version,
                release_namespace=ns.metadata.name,
                values=objects.envoy_gateway_chart_values(args.inference_extension),
                parent=self,
                depends_on=[crds, *pool_prerequisites],
                image_digests=args.image_digests,
            )
            controller.append(envoy_gateway)
            if args.self_signed_host is not None:
                controller.append(self._self_signed_certificate(name, args, ns))
            if args.inference_extension:
                ai_gateway = self._ai_gateway(name, args, envoy_gateway)
                controller.append(ai_gateway)
                self.inference_prerequisites = [crds, *pool_prerequisites, envoy_gateway, ai_gateway]
        if args.settings.api_key_secret:
            # Envoy Gateway's apiKeyAuth reads client id -> key pairs from this Secret, in the SecurityPolicy's
            # namespace: the edge's, or with an existing Gateway the routes' (objects._security_policy).
            keys_namespace = routes[0].namespace if args.settings.existing_gateway else args.settings.namespace
            assert args.client_api_key is not None  # the stack passes it with the Secret's name (stack/parts.py)
            self.objects.append(k8s.core.v1.Secret(
                f"{name}-client-keys",
                metadata={"name": args.settings.api_key_secret, "namespace": keys_namespace},
                type="Opaque",
                string_data={"llm-serving": pulumi.Output.secret(args.client_api_key)},
                opts=pulumi.ResourceOptions(parent=self, depends_on=controller),
            ))
        if objects.gateway_injects_upstream_key(args.settings):
            # What the HTTPRouteFilter injects, next to each route (a filter names a Secret in
            # its own namespace). Envoy Gateway watches it: a rotated key is sent at once.
            assert args.upstream_api_key is not None  # the stack passes it in this case (stack/parts.py)
            for namespace_name in sorted({route.namespace for route in routes}):
                self.objects.append(k8s.core.v1.Secret(
                    f"{name}-upstream-key-{namespace_name}",
                    metadata={"name": objects.UPSTREAM_CREDENTIAL_SECRET, "namespace": namespace_name},
                    type="Opaque",
                    string_data={"credential": pulumi.Output.concat(
                        "Bearer ", pulumi.Output.secret(args.upstream_api_key))},
                    opts=pulumi.ResourceOptions(parent=self, depends_on=controller),
                ))
        proxy_image = objects.envoy_proxy_image(args.install_controller, args.envoy_gateway_chart_version,
                                                args.image_digests)
        return objects.gateway_objects(dataclasses.replace(args.settings, proxy_image=proxy_image), routes)

    def _alb(self, name: str, args: EdgeSpec, routes: list[Route]) -> list[dict[str, Any]]:
        """The ALB controller when this mode installs its own, and one Ingress per route."""
        # An Ingress holds the controller's finalizer until its ALB is deleted: its delete waits for
        # that, and the controller (a dependency) is uninstalled after it.
        if args.install_controller and args.load_balancer_controller is None:
            self.controller.append(
                helm_release(
                    f"{name}-alb-controller",
                    chart="aws-load-balancer-controller",
                    version=args.alb_controller_chart_version,
                    release_namespace=args.settings.namespace,
                    values=args.alb_controller_values,
                    parent=self,
                    image_digests=args.image_digests,
                )
            )
        return objects.alb_ingress(args.settings, routes, args.load_balancer_subnet_ids)

    def _monitoring(self, name: str, settings: EdgeSettings, monitoring: EdgeMonitoring,
                    crds: list[pulumi.Resource]) -> None:
        """Gateway mode: scrape the Envoy proxies and alert on the errors users see there; `crds` bring the
        PodMonitor and PrometheusRule kinds (an installed Prometheus Operator), else they already exist."""
        after = pulumi.ResourceOptions(parent=self, depends_on=[*self.controller, *crds])
        labels = dict(monitoring.monitor_labels)
        manifest_resource(f"{name}-envoy-podmonitor",
                          alerts.envoy_pod_monitor(settings.gateway_name, settings.namespace, labels), after)
        manifest_resource(f"{name}-alerts", {
            "apiVersion": alerts.MONITORING_API, "kind": "PrometheusRule",
            "metadata": {"name": "edge-alerts", "namespace": settings.namespace,
                         "labels": {"app.kubernetes.io/part-of": "llm-serving", **labels}},
            "spec": {"groups": alerts.edge_alert_groups(settings.gateway_name, settings.namespace,
                                                        monitoring.runbook_base_url, by_model=settings.by_model)},
        }, after)

    def _inference_pool_prerequisites(self, name: str, args: EdgeSpec) -> list[pulumi.Resource]:
        """What Envoy Gateway needs before it starts with InferencePool as a backend resource: the CRD
        (its watch on a missing kind fails cache sync after 2 minutes and the controller stops) and
        the right to list pools (else the sync is forbidden and the release never turns ready)."""
        pool_crd = crd_manifests(f"{name}-inference-pool-crds", args.inference_pool_crds_file, parent=self,
                                 protect=args.protect_crds)
        reader = [
            manifest_resource(f"{name}-{obj['kind'].lower()}-pool-reader", obj, pulumi.ResourceOptions(parent=self))
            for obj in objects.inference_pool_reader(args.settings.namespace)
        ]
        return [pool_crd, *reader]

    def _self_signed_certificate(self, name: str, args: EdgeSpec, ns: pulumi.Resource) -> pulumi.Resource:
        """Dev's certificate, so the HTTPS listener is programmed on the first up: a P-256 key and a
        one-year self-signed certificate for the host, in the Secret the Gateway names. Both live in
        the stack's state as secrets; a host change makes a new certificate (its inputs change)."""
        assert args.self_signed_host is not None  # the caller's condition
        child = pulumi.ResourceOptions(parent=self)
        key = tls.PrivateKey(f"{name}-tls-key", algorithm="ECDSA", ecdsa_curve="P256", opts=child)
        certificate = tls.SelfSignedCert(
            f"{name}-tls-certificate",
            private_key_pem=key.private_key_pem,
            subject={"common_name": args.self_signed_host, "organization": "llm-serving (self-signed)"},
            dns_names=[args.self_signed_host],
            validity_period_hours=SELF_SIGNED_VALIDITY_HOURS,
            # Renewed by the next `pulumi up` in the certificate's last month.
            early_renewal_hours=SELF_SIGNED_EARLY_RENEWAL_HOURS,
            allowed_uses=["digital_signature", "key_encipherment", "server_auth"],
            opts=child,
        )
        return k8s.core.v1.Secret(
            f"{name}-tls-secret",
            metadata={"name": args.settings.tls_secret_name, "namespace": args.settings.namespace},
            type="kubernetes.io/tls",
            # (mypy solves `Output.secret` of an Output[str] to Output[Never], through pulumi's Input union.)
            string_data={"tls.crt": certificate.cert_pem,
                         "tls.key": pulumi.Output.secret(key.private_key_pem)},  # type: ignore[arg-type]
            opts=pulumi.ResourceOptions(parent=self, depends_on=[ns]),
        )

    def _ai_gateway(self, name: str, args: EdgeSpec, envoy_gateway: pulumi.Resource) -> pulumi.Resource:
        """Envoy AI Gateway after Envoy Gateway (its install order: envoyproxy/ai-gateway v1.1.0
        site/versioned_docs/version-1.1/getting-started/prerequisites.md, installation.md): the CRD
        chart, then the controller, whose extension server Envoy Gateway calls for every route translation."""
        ns = namespace(f"{name}-ai-gateway-namespace", objects.AI_GATEWAY_NAMESPACE, parent=self,
                       pod_security=AI_GATEWAY_POD_SECURITY)
        crds = helm_release(
            f"{name}-ai-gateway-crds",
            chart="ai-gateway-crds-helm",
            version=args.ai_gateway_crds_chart_version,
            release_namespace=ns.metadata.name,
            values={},
            parent=self,
            depends_on=[envoy_gateway],
            crds_only=True,
            protect=args.protect_crds,
        )
        # byModel: the release also runs the ext_proc sidecar its webhook injects, pinned like its controller.
        images = chart_images.runs(versions.AI_GATEWAY, args.ai_gateway_chart_version)
        if args.settings.by_model and images:
            images = (*images, versions.AI_GATEWAY_EXTPROC_IMAGE)
        return helm_release(
            f"{name}-ai-gateway",
            chart="ai-gateway-helm",
            version=args.ai_gateway_chart_version,
            release_namespace=ns.metadata.name,
            images=images,
            values=objects.ai_gateway_chart_values(
                args.settings.namespace, sidecar=args.settings.by_model,
                webhook_cert_manager=args.ai_gateway_webhook_cert_manager,
                pinned_chart=args.ai_gateway_chart_version == versions.AI_GATEWAY.version),
            parent=self,
            depends_on=[crds],
            image_digests=args.image_digests,
        )


def _route_of(obj: dict) -> str | None:
    """The model a gateway route object belongs to (its HTTPRoutes and its BackendTrafficPolicy)."""
    if obj["kind"] in ("HTTPRoute", "BackendTrafficPolicy"):
        return obj["metadata"]["name"].removesuffix(objects.revision_route_name(""))
    return None
