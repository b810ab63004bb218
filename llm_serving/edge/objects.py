"""The streaming-safe edge as plain manifests: Envoy Gateway, ALB or ingress-nginx, plus NetworkPolicies.

Pure builders (no Pulumi import) that a table test can pin: every timeout, buffer and drain setting
that keeps a long token stream alive from the load balancer to vLLM, with the failure it prevents.

Length: three edge modes and the NetworkPolicies share one validation and naming core; split by
mode, each file would repeat it, and a reviewer compares the modes' settings side by side here.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, assert_never

from llm_serving.platform.chart_images import pinned_reference
from llm_serving.platform.versions import AI_GATEWAY_EXTPROC_IMAGE, ENVOY_GATEWAY, ENVOY_PROXY_IMAGE

from .args import EdgeAuth, EdgeMode, LoadBalancerScheme
from .awaits import WAIT_FOR_ANNOTATION, gateway_wait_for, policy_wait_for, route_wait_for

Manifest = dict[str, Any]

GATEWAY_API = "gateway.networking.k8s.io/v1"
ENVOY_API = "gateway.envoyproxy.io/v1alpha1"
# The namespace label that has the AWS Load Balancer Controller inject its target-health readiness gate into the
# pods behind an ip-target load balancer (kubernetes-sigs/aws-load-balancer-controller
# docs/deploy/pod_readiness_gate.md at v3.5.0).
POD_READINESS_GATE_LABEL = "elbv2.k8s.aws/pod-readiness-gate-inject"
GATEWAY_GROUP = "gateway.networking.k8s.io"
# The controller name gateway-helm 1.9.0 configures by default (values.yaml config.envoyGateway.gateway).
CONTROLLER_NAME = "gateway.envoyproxy.io/gatewayclass-controller"
NAMESPACE_LABEL = "kubernetes.io/metadata.name"  # set on every namespace by the API server

# AWS NLB: "The default idle timeout value for TCP flows is 350 seconds" (docs.aws.amazon.com/
# elasticloadbalancing/latest/network/update-idle-timeout.html). A silent stream longer than this is
# dropped by the NLB without a reset reaching Envoy, so stream idle timeouts must stay below it.
NLB_TCP_IDLE_SECONDS = 350
# Envoy closes idle client keep-alive connections before the NLB forgets the flow; otherwise the
# client's next request on that socket meets a reset instead of a clean close.
CLIENT_CONNECTION_IDLE_SECONDS = 300
# vLLM's uvicorn closes idle keep-alive connections after VLLM_HTTP_TIMEOUT_KEEP_ALIVE, default 5 s
# (vllm/envs.py). A POST sent on a connection uvicorn is closing fails ("upstream connect error ...
# connection termination"), and with retries off the client sees it: Envoy must close idle ones first.
UPSTREAM_CONNECTION_IDLE_SECONDS = 4
# ALB idle timeout range 1-4000 s (ELB API reference, LoadBalancerAttribute `idle_timeout.timeout_seconds`:
# https://docs.aws.amazon.com/elasticloadbalancing/latest/APIReference/API_LoadBalancerAttribute.html).
ALB_IDLE_RANGE = (1, 4000)
# Gateway API Duration (GEP-2257) allows at most 5 digits per unit.
_MAX_DURATION_SECONDS = 99_999
_HOST = re.compile(r"^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_PREFIX = re.compile(r"^/([A-Za-z0-9._~-]+(/[A-Za-z0-9._~-]+)*)?/?$")


@dataclass(frozen=True)
class Route:
    """One model published at host + path_prefix; the Service shares the model's name."""

    model_name: str  # e.g. "llama-70b"; also the backend Service name
    namespace: str  # serving namespace of the Service, e.g. "llm-serving"
    port: int  # Service port, 8000
    host: str  # e.g. "llm.example.com"
    path_prefix: str  # e.g. "/" or "/llama-70b"
    request_timeout_seconds: int  # whole-request timeout for long generations; 0 = disabled
    stream_idle_timeout_seconds: int  # max silence between bytes of a stream
    request_body_limit_bytes: int  # fits the model's max-model-len prompt
    drain_seconds: int  # how long open streams may finish when an endpoint is removed
    inference_pool: bool = False  # route to the model's InferencePool (gateway mode) instead of its Service
    # With a pool: (header, value) naming the model's InferenceObjective on every request it routes.
    objective_header: tuple[str, str] | None = None
    # With a pool: the Retry-After (seconds) every 429 the picker sends carries (None: the picker's bare 429).
    retry_after_seconds: int | None = None
    # byModel routing: names besides `model_name` that requests may ask for to reach this pool (LoRA adapters and
    # their aliases), each an Exact match on the model's rule (by_model.model_names).
    extra_model_names: tuple[str, ...] = ()
    # Two revisions of the model side by side (models[].revisions): the weighted rule and a header rule each.
    revisions: tuple[RouteRevision, ...] = ()


@dataclass(frozen=True)
class RouteRevision:
    """One revision of a routed model: its Service (and pool) name and its share of the model's requests."""

    name: str  # the revision's name, the value of REVISION_HEADER that reaches it, e.g. "canary"
    backend: str  # its Service's (and InferencePool's) name, e.g. "llama-70b-canary"
    weight: int  # percent of the model's requests


# The header that reaches one revision directly (llm_serving/stack/revisions.py, the same name).
REVISION_HEADER = "x-llm-serving-revision"


def revision_route_name(model_name: str) -> str:
    """The HTTPRoute holding a two-revision model's header rules, beside the model's own (weighted) HTTPRoute. The
    dot keeps it apart from every model's name, which is a DNS label; a custom resource's name may be any DNS
    subdomain (kubernetes apiextensions-apiserver pkg/registry/customresource/validator.go: NameIsDNSSubdomain)."""
    return f"{model_name}.revisions"


def route_names(route: Route) -> list[str]:
    """The HTTPRoutes a model's policies attach to: its own, and with two revisions the one of its header rules."""
    return [route.model_name, *([revision_route_name(route.model_name)] if route.revisions else [])]


@dataclass(frozen=True)
class EdgeSettings:
    """The shared edge. In gateway mode `namespace` must be the namespace Envoy Gateway is installed in:
    Envoy Gateway runs the Envoy pods in its own namespace, and the NetworkPolicies admit that namespace.
    """

    namespace: str  # edge namespace, e.g. "envoy-gateway-system"
    gateway_name: str  # e.g. "llm-serving"
    tls_secret_name: str | None  # existing Secret in the edge namespace (nginx: in the route's namespace)
    cert_manager_issuer: str | None  # ClusterIssuer name; cert-manager creates "<gateway>-tls"
    load_balancer_scheme: LoadBalancerScheme
    auth: EdgeAuth  # vllm-api-key: vLLM checks the key itself; gateway-api-key or jwt: the gateway checks clients
    # gateway mode: Secret in the edge namespace holding the keys the gateway accepts (auth vllm-api-key:
    # vLLM's own key, checked again by vLLM; gateway-api-key: the clients' keys)
    api_key_secret: str | None
    jwt_issuer: str | None
    jwt_jwks_uri: str | None
    jwt_audiences: tuple[str, ...]  # jwt: the `aud` values accepted (at least one)
    acm_certificate_arn: str | None  # alb mode
    alb_idle_timeout_seconds: int  # alb mode
    # Gateway mode with an existing Gateway (`gateway_name` in `gateway_namespace`): the stack creates only
    # its routes and their policies, and authenticates each route instead of the Gateway, which is shared.
    existing_gateway: bool = False
    gateway_namespace: str | None = None  # None: the stack's own Gateway, in `namespace`
    listener: str | None = None  # the existing Gateway's HTTPS listener the routes attach to (required with one)
    # The NLB's TCP idle timeout when the stack sets one (listener attribute); None: the NLB's default.
    nlb_idle_timeout_seconds: int | None = None
    # The Envoy proxy's image by digest (`envoy_proxy_image`); None: Envoy Gateway's built-in default, by tag.
    proxy_image: str | None = None
    # byModel routing (by_model.py): every model on one host, chosen by the body's `model`; the per-model
    # HTTPRoutes give way to one AIGatewayRoute.
    by_model: bool = False

    @property
    def nlb_idle_seconds(self) -> int:
        return self.nlb_idle_timeout_seconds or NLB_TCP_IDLE_SECONDS

    @property
    def owning_gateway_namespace(self) -> str:
        return self.gateway_namespace or self.namespace


# --------------------------------------------------------------------------------------------
# Shared helpers


# The AWS Load Balancer Controller's per-listener attributes annotation, `<protocol>-<port>` (kubernetes-sigs/
# aws-load-balancer-controller docs/guide/service/annotations.md, "Listener Attributes"); the NLB's TCP listener
# for the Gateway's HTTPS port takes `tcp.idle_timeout.seconds`, 60..6000 s (Elastic Load Balancing API reference,
# ListenerAttribute).
NLB_LISTENER_ATTRIBUTES = "service.beta.kubernetes.io/aws-load-balancer-listener-attributes.TCP-443"


def _nlb_listener_attributes(settings: EdgeSettings) -> dict[str, str]:
    if settings.nlb_idle_timeout_seconds is None:
        return {}
    return {NLB_LISTENER_ATTRIBUTES: f"tcp.idle_timeout.seconds={settings.nlb_idle_timeout_seconds}"}


def _duration(seconds: int) -> str:
    if not 0 <= seconds <= _MAX_DURATION_SECONDS:
        raise ValueError(f"duration {seconds}s is outside 0..{_MAX_DURATION_SECONDS}s")
    return f"{seconds}s"


def _size(size: int, units: tuple[tuple[str, int], ...]) -> str | int:
    for suffix, unit in units:
        if size % unit == 0:
            return f"{size // unit}{suffix}"
    return size


def _quantity(size: int) -> str | int:
    """Bytes as a Kubernetes quantity (64 MiB -> "64Mi")."""
    return _size(size, (("Gi", 1024**3), ("Mi", 1024**2), ("Ki", 1024)))


def _nginx_size(size: int) -> str:
    """Bytes in nginx size syntax (m = MiB, k = KiB)."""
    return str(_size(size, (("m", 1024**2), ("k", 1024))))


def v1_path(path_prefix: str) -> str:
    """The only path published per model: the OpenAI API under the prefix ("/" -> "/v1").

    vLLM's --api-key guards only paths starting with /v1; /health and /metrics stay open
    (vllm-project/vllm vllm/entrypoints/openai/server_utils.py `AuthenticationMiddleware` @ 029329a8,
    formerly the `authentication` middleware in api_server.py), so publishing anything else would
    expose them to the internet.
    """
    if not _PREFIX.match(path_prefix) or "//" in path_prefix:
        raise ValueError(f"path prefix {path_prefix!r} must be an absolute path like '/' or '/llama-70b'")
    return path_prefix.rstrip("/") + "/v1"


def _slug(host: str) -> str:
    return host.replace("*", "wildcard").replace(".", "-")


def _check(settings: EdgeSettings, routes: list[Route]) -> None:
    if not routes:
        raise ValueError("at least one route is required")
    seen: dict[tuple[str, str], str] = {}
    names: set[tuple[str, str]] = set()
    for route in routes:
        if not _HOST.match(route.host):
            raise ValueError(f"{route.model_name}: host {route.host!r} is not a lowercase DNS name")
        key = (route.host, v1_path(route.path_prefix))
        if key in seen and not settings.by_model:
            raise ValueError(f"{route.model_name} and {seen[key]} both claim https://{key[0]}{key[1]}")
        seen[key] = route.model_name
        if (route.namespace, route.model_name) in names:
            raise ValueError(f"model {route.model_name} is routed twice in {route.namespace}")
        names.add((route.namespace, route.model_name))
        if min(route.stream_idle_timeout_seconds, route.request_body_limit_bytes) <= 0 or route.drain_seconds < 0:
            raise ValueError(f"{route.model_name}: stream idle timeout and body limit must be positive, drain >= 0")
        _duration(route.request_timeout_seconds)


def _tls_secret(settings: EdgeSettings) -> str:
    if bool(settings.tls_secret_name) == bool(settings.cert_manager_issuer):
        raise ValueError("set exactly one of tls_secret_name or cert_manager_issuer")
    return settings.tls_secret_name or f"{settings.gateway_name}-tls"


def policy_awaited(settings: EdgeSettings) -> dict[str, str]:
    """An Envoy Gateway policy's annotations: `pulumi up` waits until it is accepted at our Gateway (awaits.py)."""
    return {WAIT_FOR_ANNOTATION: policy_wait_for(settings.gateway_name, settings.owning_gateway_namespace)}


def _meta(name: str, namespace: str | None = None, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    meta = {"name": name, "namespace": namespace, "annotations": annotations}
    return {key: value for key, value in meta.items() if value}


# --------------------------------------------------------------------------------------------
# Envoy Gateway (the default edge: NLB -> Envoy -> vLLM)

# Labels Envoy Gateway puts on every proxy pod it runs (envoyproxy/gateway v1.9.0
# internal/infrastructure/kubernetes/proxy/resource.go EnvoyAppLabel) and the owning Gateway's name and
# namespace (internal/gatewayapi/translator.go OwningGatewayName/NamespaceLabel, OwnerLabels without
# mergeGateways): the NetworkPolicies admit exactly this Gateway's proxies, not the whole namespace.
ENVOY_PROXY_LABELS = {
    "app.kubernetes.io/name": "envoy",
    "app.kubernetes.io/component": "proxy",
    "app.kubernetes.io/managed-by": "envoy-gateway",
}
OWNING_GATEWAY_NAME_LABEL = "gateway.envoyproxy.io/owning-gateway-name"
OWNING_GATEWAY_NAMESPACE_LABEL = "gateway.envoyproxy.io/owning-gateway-namespace"
# ingress-nginx's chart labels its controller pods with these (ingress-nginx chart _helpers.tpl
# selectorLabels plus the controller's component label).
NGINX_CONTROLLER_LABELS = {"app.kubernetes.io/name": "ingress-nginx", "app.kubernetes.io/component": "controller"}
# In the auth modes where the gateway authenticates clients, it still sends vLLM's own key upstream:
# an HTTPRouteFilter (gateway.envoyproxy.io/v1alpha1, api/v1alpha1/httproutefilter_types.go @v1.9.0)
# injects the `credential` key of this Secret in the route's namespace as the Authorization header.
UPSTREAM_CREDENTIAL_SECRET = "vllm-api-key-header"
UPSTREAM_CREDENTIAL_FILTER = "vllm-api-key"


# Envoy Gateway runs a listener below 1024 on its port + 10000 inside the proxy pod, unless the EnvoyProxy sets
# useListenerPortAsContainerPort (gateway.envoyproxy.io v1.9 API, KubernetesProvider; ours does not): 443 -> 10443.
HTTPS_LISTENER_PORT = 443
ENVOY_HTTPS_CONTAINER_PORT = HTTPS_LISTENER_PORT + 10000


# The Gateway (and GatewayClass) the stack creates when it has no existing one.
OWN_GATEWAY_NAME = "llm-serving"


def internal_service_name(gateway_name: str) -> str:
    """The ClusterIP Service in front of our Gateway's proxies (internal_edge_service)."""
    return f"{gateway_name}-internal"


def internal_edge_service(settings: EdgeSettings) -> Manifest:
    """A ClusterIP Service on the Gateway's proxy pods, port 443: the deploy gate reaches the edge through it in the
    same `up` that creates the load balancer, before any DNS record can point at that (TLS and the Host header
    still name the public host: the probe connects here as curl's --connect-to does). The Service Envoy Gateway
    creates for the NLB has a generated name, and renaming it would replace the NLB."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(internal_service_name(settings.gateway_name), settings.namespace),
        "spec": {
            "type": "ClusterIP",
            "selector": envoy_proxy_selector(settings.gateway_name, settings.namespace),
            "ports": [{"name": "https", "protocol": "TCP", "port": HTTPS_LISTENER_PORT,
                       "targetPort": ENVOY_HTTPS_CONTAINER_PORT}],
        },
    }


def envoy_proxy_selector(gateway_name: str, edge_namespace: str) -> dict[str, str]:
    """The labels of the proxy pods of one Gateway."""
    return {**ENVOY_PROXY_LABELS, OWNING_GATEWAY_NAME_LABEL: gateway_name,
            OWNING_GATEWAY_NAMESPACE_LABEL: edge_namespace}


def edge_pod_selector(mode: EdgeMode, settings: EdgeSettings) -> dict[str, str] | None:
    """The pods that forward client traffic to vLLM; None in alb mode, where the ALB itself connects
    to the pod IPs (target type ip) and only its subnets' CIDRs identify it."""
    match mode:
        case EdgeMode.GATEWAY:
            return envoy_proxy_selector(settings.gateway_name, settings.owning_gateway_namespace)
        case EdgeMode.INGRESS_NGINX:
            return dict(NGINX_CONTROLLER_LABELS)
        case EdgeMode.ALB:
            return None
        case _:
            assert_never(mode)


def gateway_injects_upstream_key(settings: EdgeSettings) -> bool:
    """Whether the gateway replaces the client's credential with vLLM's own key on the way in."""
    return settings.auth in (EdgeAuth.GATEWAY_API_KEY, EdgeAuth.JWT)


# Envoy AI Gateway's controller: its namespace, and the extension server's port on its Service.
AI_GATEWAY_NAMESPACE = "envoy-ai-gateway-system"
AI_GATEWAY_EXTENSION_PORT = 1063
POOL_GROUP = "inference.networking.k8s.io"
# The label Envoy AI Gateway's pod webhook selects on; only pods with this exact value are sent to it.
AI_GATEWAY_WEBHOOK_LABEL = "app.kubernetes.io/managed-by"
AI_GATEWAY_WEBHOOK_OFF = "llm-serving-no-ai-gateway-sidecar"


def envoy_gateway_chart_values(inference_extension: bool = False) -> dict[str, Any]:
    """gateway-helm 1.9.0 values: the defaults, with the controller name the GatewayClass names pinned,
    and without the chart's own CRDs (`crds/`, never upgraded by Helm): gateway-crds-helm owns them.

    `inference_extension`: Envoy AI Gateway as Envoy Gateway's extension server, so an HTTPRoute can
    name an InferencePool (Envoy Gateway alone has no InferencePool support: envoyproxy/gateway v1.9.0
    has no InferencePool code outside its tests). The keys are AI Gateway v1.1.0's
    manifests/envoy-gateway-values.yaml plus its inference-pool add-on
    (examples/inference-pool/envoy-gateway-values-addon.yaml), each checked against EG v1.9.0's
    EnvoyGateway API types.
    """
    envoy_gateway: dict[str, Any] = {"gateway": {"controllerName": CONTROLLER_NAME}}
    if inference_extension:
        envoy_gateway["extensionApis"] = {"enableBackend": True, "enableEnvoyPatchPolicy": True}
        envoy_gateway["extensionManager"] = {
            # The extension rewrites listeners, routes and clusters after translation: it inserts
            # the picker's ext_proc filter and the pool's ORIGINAL_DST cluster.
            "hooks": {"xdsTranslator": {
                # Secrets stay out: with the `secret` hook on (Envoy Gateway's default when unset,
                # api/v1alpha1/envoygateway_helpers.go ShouldIncludeSecrets @v1.9.0) every listener's
                # TLS private key would go over the extension server's plaintext gRPC port, and
                # AI Gateway v1.1.0 only hands them back unchanged (internal/extensionserver/
                # post_translate_modify.go), so it needs none of them.
                "translation": {**{part: {"includeAll": True} for part in ("listener", "route", "cluster")},
                                "secret": {"includeAll": False}},
                "post": ["Translation", "Cluster", "Route"],
            }},
            "service": {"fqdn": {"hostname": f"ai-gateway-controller.{AI_GATEWAY_NAMESPACE}.svc.cluster.local",
                                 "port": AI_GATEWAY_EXTENSION_PORT}},
            "backendResources": [{"group": POOL_GROUP, "kind": "InferencePool", "version": "v1"}],
        }
    return {"config": {"envoyGateway": envoy_gateway}, "crds": {"enabled": False}}


def ai_gateway_chart_values(edge_namespace: str, sidecar: bool = False,
                            webhook_cert_manager: bool = False, pinned_chart: bool = True) -> dict[str, Any]:
    """ai-gateway-helm v1.1.0 values (defaults in tests/fixtures/reference/charts/ai-gateway-helm). Rendered
    with `helm template` (Helm v4.1.4) at the chart's v1.1.0 tag: the PDB, the spread and the webhook's
    objectSelector come out as set here.

    `sidecar` (byModel routing): the webhook injects the ext_proc sidecar into Envoy Gateway's pods (its selector
    back to the chart default, `app.kubernetes.io/managed-by: envoy-gateway`, values.yaml @v1.1.0), from the pinned
    image. Its webhook then answers for every Envoy pod created (failurePolicy Fail, timeoutSeconds 10:
    templates/admission_webhook.yaml), so its certificate matters: `webhook_cert_manager` has cert-manager issue and
    renew it (the chart's `certManager.enable`, a self-signed Issuer and Certificate; the controller copies the CA
    into the webhook at start, cmd/controller/main.go maybePatchAdmissionWebhook); without it the chart makes a
    365-day certificate once and keeps it on upgrades (its `lookup`), which docs/runbooks.md says how to renew."""
    webhook: dict[str, Any] = {"objectSelector": {"matchLabels": {AI_GATEWAY_WEBHOOK_LABEL: AI_GATEWAY_WEBHOOK_OFF}}}
    extra: dict[str, Any] = {}
    if sidecar:
        webhook = {"objectSelector": {"matchLabels": {AI_GATEWAY_WEBHOOK_LABEL: ENVOY_PROXY_LABELS[
            AI_GATEWAY_WEBHOOK_LABEL]}}}
        if webhook_cert_manager:
            webhook["certManager"] = {"enable": True}
        if pinned_chart:
            # The sidecar's tag is the pinned chart's appVersion; a chart at another version runs its own (its
            # controller and sidecar then stay one release).
            extra["extProc"] = {"image": {"tag": AI_GATEWAY_EXTPROC_IMAGE.tag}}
    return {
        "controller": {
            # Two replicas and a PDB: Envoy Gateway stops applying route changes while its extension
            # server is down (extensionManager.failOpen defaults to false).
            "replicaCount": 2,
            "podDisruptionBudget": {"enabled": True, "minAvailable": 1},
            "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}},
            "topologySpreadConstraints": [{
                "maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "ai-gateway-helm"}},
            }],
            # perModel: the webhook's extproc sidecar serves AIGatewayRoutes only, which this program then does not
            # create; but with failurePolicy Fail it would block every Envoy pod while the controller is down, and
            # its chart-made certificate expires after 365 days without renewal. Select a label value no pod
            # carries, so the API server never calls it.
            "mutatingWebhook": webhook,
        },
        # Binds Envoy Gateway's service account (in the edge namespace) to read InferencePools.
        "envoyGateway": {"namespace": edge_namespace},
        **extra,
    }


def inference_pool_reader(edge_namespace: str) -> list[Manifest]:
    """Envoy Gateway must list InferencePools before it turns ready (it watches every
    backendResources kind), and ai-gateway-helm, which grants that, installs after it: the same grant,
    created first (as AI Gateway's own e2e does, tests/internal/e2elib/e2elib.go @v1.1.0)."""
    name = "envoy-gateway-inference-pool-reader"
    return [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": "llm-serving"}},
         "rules": [{"apiGroups": [POOL_GROUP], "resources": ["inferencepools"], "verbs": ["get", "list", "watch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": "llm-serving"}},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
         "subjects": [{"kind": "ServiceAccount", "name": "envoy-gateway", "namespace": edge_namespace}]},
    ]


def envoy_proxy_image(install_controller: bool, chart_version: str, digests: dict[str, str]) -> str | None:
    """The EnvoyProxy's container image by digest: the proxy image Envoy Gateway runs at its pinned version
    (versions.ENVOY_PROXY_IMAGE), when this stack installs that version and has the image's digest. None with
    the cluster's own Envoy Gateway (whose version, and so whose proxy, is not ours to pick), with another
    chart version, or without a digest: Envoy Gateway then runs its built-in default by tag."""
    digest = digests.get(ENVOY_PROXY_IMAGE.reference)
    if not install_controller or digest is None or chart_version != ENVOY_GATEWAY.version:
        return None
    return pinned_reference(ENVOY_PROXY_IMAGE, digest)


def gateway_crds_chart_values() -> dict[str, Any]:
    """gateway-crds-helm 1.9.0 values: Gateway API's standard channel and Envoy Gateway's CRDs (the
    chart's defaults render nothing: envoyproxy/gateway v1.9.0 charts/gateway-crds-helm/values.yaml).
    Standard, not experimental: only GA kinds."""
    return {"crds": {"gatewayAPI": {"enabled": True, "channel": "standard"}, "envoyGateway": {"enabled": True}}}


def gateway_objects(settings: EdgeSettings, routes: list[Route]) -> list[Manifest]:
    """EnvoyProxy, GatewayClass, Gateway, ClientTrafficPolicy, optional SecurityPolicy, then per route
    an HTTPRoute and a BackendTrafficPolicy. Routes live in the Service's namespace (no ReferenceGrant)."""
    _check(settings, routes)
    if settings.existing_gateway:
        # The Gateway, its class, proxies, listeners and their policy are its owner's: only ours attaches.
        namespaces = sorted({route.namespace for route in routes})
        objects = [_security_policy(settings, routes)]
        if gateway_injects_upstream_key(settings):
            objects.extend(_upstream_credential_filter(namespace) for namespace in namespaces)
        return objects + _per_model_routes(settings, routes)
    secret = _tls_secret(settings)
    for route in routes:
        if route.stream_idle_timeout_seconds >= settings.nlb_idle_seconds:
            raise ValueError(
                f"{route.model_name}: stream idle timeout {route.stream_idle_timeout_seconds}s must be below the "
                f"NLB's {settings.nlb_idle_seconds}s TCP idle timeout, or the NLB drops silent streams first"
            )
    name, edge = settings.gateway_name, settings.namespace
    drain = max(route.drain_seconds for route in routes)
    route_namespaces = sorted({route.namespace for route in routes})

    envoy_proxy = {
        "apiVersion": ENVOY_API,
        "kind": "EnvoyProxy",
        "metadata": _meta(f"{name}-proxy", edge),
        "spec": {
            "provider": {
                "type": "Kubernetes",
                "kubernetes": {
                    "envoyDeployment": {
                        "replicas": 2,
                        # The proxy enforces the edge's auth: pulled by digest once the stack has one.
                        **({"container": {"image": settings.proxy_image}} if settings.proxy_image else {}),
                        # Surge first, one at a time: the new proxy is Ready (its NLB target healthy, through the
                        # readiness gate on the edge namespace) before an old one is taken out.
                        "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
                        # The two proxies on different nodes and zones, as preferences: dev's one CPU node
                        # in one zone still runs both. Envoy Gateway labels its proxy pods with the
                        # owning Gateway (gateway.envoyproxy.io/owning-gateway-name) and app name envoy.
                        "pod": {"topologySpreadConstraints": [
                            {"maxSkew": 1, "topologyKey": key, "whenUnsatisfiable": "ScheduleAnyway",
                             "labelSelector": {"matchLabels": {
                                 "app.kubernetes.io/name": "envoy",
                                 "gateway.envoyproxy.io/owning-gateway-name": name,
                                 "gateway.envoyproxy.io/owning-gateway-namespace": edge}}}
                            for key in ("kubernetes.io/hostname", "topology.kubernetes.io/zone")
                        ]},
                    },
                    "envoyPDB": {"minAvailable": 1},
                    "envoyService": {
                        "type": "LoadBalancer",
                        "annotations": {
                            # "external" hands the Service to the AWS Load Balancer Controller (an NLB),
                            # ip targets send straight to Envoy pods (no kube-proxy hop to drain as well).
                            "service.beta.kubernetes.io/aws-load-balancer-type": "external",
                            "service.beta.kubernetes.io/aws-load-balancer-nlb-target-type": "ip",
                            "service.beta.kubernetes.io/aws-load-balancer-scheme": settings.load_balancer_scheme.value,
                            # Keep a removed Envoy pod's flows open as long as Envoy itself drains them.
                            "service.beta.kubernetes.io/aws-load-balancer-target-group-attributes": (
                                f"deregistration_delay.timeout_seconds={drain}"
                            ),
                            **_nlb_listener_attributes(settings),
                        },
                    },
                },
            },
            # Failure: an Envoy rollout or node drain cuts open streams after the 60 s default drain
            # (gateway.envoyproxy.io/v1.9/tasks/operations/graceful-shutdown/). Drain as long as the
            # longest route may; Envoy Gateway sets the pod's grace period to drainTimeout + 300 s
            # (gitlab-org/charts/gitlab MR 5625).
            "shutdown": {"drainTimeout": _duration(drain)},
            # byModel: the key check before AI Gateway's body router. Envoy Gateway puts its custom_response filter
            # first (v1.9.0 internal/xds/translator/httpfilters.go, order 0; api_key_auth is 7) and AI Gateway
            # inserts its ext_proc in front of it (v1.1.0 internal/extensionserver/post_translate_modify.go,
            # insertAIGatewayExtProcFilter), so without this the sidecar would answer GET /v1/models to a client
            # with no key, and parse every unauthenticated body. Moved after api_key_auth, custom_response takes
            # the body router with it; it still sees the picker's 429 and the unknown model's 404 (local replies).
            **({"filterOrder": [{"name": "envoy.filters.http.custom_response",
                                 "after": "envoy.filters.http.api_key_auth"}]} if settings.by_model else {}),
        },
    }
    gateway_class = {
        "apiVersion": GATEWAY_API,
        "kind": "GatewayClass",
        "metadata": _meta(name),
        "spec": {
            "controllerName": CONTROLLER_NAME,
            "parametersRef": {"group": "gateway.envoyproxy.io", "kind": "EnvoyProxy", "name": f"{name}-proxy",
                              "namespace": edge},
        },
    }
    issuer = settings.cert_manager_issuer
    hosts = sorted({route.host for route in routes})
    # `pulumi up` waits until Envoy Gateway reports the Gateway Programmed (its proxies configured and its load
    # balancer holding an address) and each listener's certificate resolved (cert-manager's issued, or the Secret
    # there) before what depends on the edge runs, the deploy gate among them (awaits.gateway_wait_for).
    annotations = {WAIT_FOR_ANNOTATION: gateway_wait_for([f"https-{_slug(host)}" for host in hosts]),
                   **({"cert-manager.io/cluster-issuer": issuer} if issuer else {}),
                   # byModel: the body router sidecar's settings (by_model.sidecar_config; the literal key and name
                   # here because by_model imports this module).
                   **({"aigateway.envoyproxy.io/gateway-config": f"{name}-body-router"} if settings.by_model else {})}
    gateway = {
        "apiVersion": GATEWAY_API,
        "kind": "Gateway",
        "metadata": _meta(name, edge, annotations=annotations),
        "spec": {
            "gatewayClassName": name,
            "listeners": [
                {
                    "name": f"https-{_slug(host)}",
                    "hostname": host,
                    "port": 443,
                    "protocol": "HTTPS",
                    "tls": {"mode": "Terminate", "certificateRefs": [{"group": "", "kind": "Secret", "name": secret}]},
                    # HTTPRoutes sit next to their Services; only the serving namespaces may attach.
                    "allowedRoutes": {
                        "kinds": [{"group": GATEWAY_GROUP, "kind": "HTTPRoute"}],
                        "namespaces": {
                            "from": "Selector",
                            "selector": {"matchExpressions": [
                                {"key": NAMESPACE_LABEL, "operator": "In", "values": route_namespaces}
                            ]},
                        },
                    },
                }
                for host in hosts
            ],
        },
    }
    client_policy: dict[str, Any] = {
        "apiVersion": ENVOY_API,
        "kind": "ClientTrafficPolicy",
        "metadata": _meta(name, edge, annotations=policy_awaited(settings)),
        "spec": {
            "targetRefs": [{"group": GATEWAY_GROUP, "kind": "Gateway", "name": name}],
            "timeout": {
                "http": {
                    # Listener-wide stream idle (CRD default 5 min) for HTTP/1.1 and HTTP/2 alike; each route's
                    # policy narrows it. A non-streamed request is silent until generation ends, so this is
                    # also its ceiling. requestReceivedTimeout stays unset (disabled): no client-side deadline
                    # is shorter than a route's request timeout.
                    "streamIdleTimeout": _duration(max(r.stream_idle_timeout_seconds for r in routes)),
                    "idleTimeout": _duration(CLIENT_CONNECTION_IDLE_SECONDS),
                }
            },
            # Per-connection buffer (CRD default 32768 bytes): sized to the largest allowed prompt so a
            # filter that must hold a whole body never answers 413 to a legal request. Costs memory only
            # under backpressure.
            "connection": {"bufferLimit": _quantity(max(r.request_body_limit_bytes for r in routes))},
        },
    }
    if settings.by_model:
        # An AIGatewayRoute rule cannot set the picker's objective header per model (v1beta1 rules have no
        # filters), and the picker reads a request's objective from that header only (llm-d-router v0.10.0
        # pkg/epp/handlers/request.go): removed before any filter runs, so no client picks its own priority.
        client_policy["spec"]["headers"] = {"earlyRequestHeaders": {"remove": [OBJECTIVE_HEADER]}}
    objects = [envoy_proxy, gateway_class, gateway, client_policy, _security_policy(settings),
               internal_edge_service(settings)]
    if gateway_injects_upstream_key(settings):
        objects.extend(_upstream_credential_filter(namespace) for namespace in route_namespaces)
    return objects + _per_model_routes(settings, routes)


def _per_model_routes(settings: EdgeSettings, routes: list[Route]) -> list[Manifest]:
    """perModel routing: each model's HTTPRoute and policy, and in each route namespace the filter that closes
    vLLM's runtime adapter API. byModel: none (the edge adds the AIGatewayRoute, by_model.models_route_objects)."""
    if settings.by_model:
        return []
    objects = [runtime_adapter_api_closed(namespace) for namespace in sorted({route.namespace for route in routes})]
    for route in routes:
        objects.extend(_route_objects(settings, route))
    return objects


# The picker's objective header (llm-d-router v0.10.0 pkg/epp/metadata/consts.go), stripped from clients' requests
# in byModel routing; routing/objects.py sets the same name per model in perModel routing.
OBJECTIVE_HEADER = "x-llm-d-inference-objective"
# vLLM's runtime LoRA API (vllm/entrypoints/serve/lora/api_router.py @0.33.0, registered when
# VLLM_ALLOW_RUNTIME_LORA_UPDATING is set): loads or unloads adapters on one replica; never a client's to call.
RUNTIME_ADAPTER_PATHS = ("/v1/load_lora_adapter", "/v1/unload_lora_adapter")
RUNTIME_ADAPTER_FILTER = "runtime-adapter-api-closed"
_CLOSED_BODY = ('{"error": {"message": "Not found.", "type": "NotFoundError", "param": null, "code": 404}}')


def runtime_adapter_api_closed(namespace: str) -> Manifest:
    """A direct 404 for the runtime adapter paths (envoyproxy/gateway v1.9.0 api/v1alpha1/httproutefilter_types.go
    HTTPDirectResponseFilter), so a per-model route's `/v1` prefix never forwards them to vLLM."""
    return {
        "apiVersion": ENVOY_API,
        "kind": "HTTPRouteFilter",
        "metadata": _meta(RUNTIME_ADAPTER_FILTER, namespace),
        "spec": {"directResponse": {"statusCode": 404, "contentType": "application/json",
                                    "body": {"type": "Inline", "inline": _CLOSED_BODY}}},
    }


def runtime_adapter_paths(path_prefix: str) -> list[str]:
    """The runtime adapter API under a model's prefix, as a client would call it ("/small" -> "/small/v1/...")."""
    base = v1_path(path_prefix).removesuffix("/v1")
    return [base + path for path in RUNTIME_ADAPTER_PATHS]


def _upstream_credential_filter(namespace: str) -> Manifest:
    """Sets Authorization to vLLM's own key (the Secret holds "Bearer <key>"), replacing whatever the
    client sent, so vLLM keeps checking its key in every auth mode (envoyproxy/gateway v1.9.0
    api/v1alpha1/httproutefilter_types.go HTTPCredentialInjectionFilter)."""
    return {
        "apiVersion": ENVOY_API,
        "kind": "HTTPRouteFilter",
        "metadata": _meta(UPSTREAM_CREDENTIAL_FILTER, namespace),
        "spec": {"credentialInjection": {
            "header": "Authorization",
            "overwrite": True,
            "credential": {"valueRef": {"group": "", "kind": "Secret", "name": UPSTREAM_CREDENTIAL_SECRET}},
        }},
    }


def _security_policy(settings: EdgeSettings, routes: list[Route] | None = None) -> Manifest:
    """Every request is authenticated at the gateway, before anything behind it runs: Envoy Gateway
    orders its api_key_auth and jwt_authn filters (7 and 10) ahead of ext_proc and the credential
    injector (envoyproxy/gateway v1.9.0 internal/xds/translator/httpfilters.go), and Envoy AI Gateway
    inserts the endpoint picker's ext_proc just before the router (envoyproxy/ai-gateway v1.1.0
    internal/extensionserver/inferencepool.go, post_translate_modify.go), so a request
    without a valid key never reaches a picker."""
    if settings.auth in (EdgeAuth.VLLM_API_KEY, EdgeAuth.GATEWAY_API_KEY):
        if not settings.api_key_secret:
            raise ValueError(f"auth {settings.auth} needs api_key_secret")
        spec: dict[str, Any] = {
            "apiKeyAuth": {
                "credentialRefs": [{"group": "", "kind": "Secret", "name": settings.api_key_secret}],
                # OpenAI clients send "Authorization: Bearer <key>"; Envoy Gateway strips the Bearer
                # prefix, so the Secret holds bare keys (envoyproxy/gateway#7706, PR #7767).
                "extractFrom": [{"headers": ["authorization"]}],
                # gateway-api-key: clients' keys never reach vLLM or its logs (vLLM's own key is
                # injected instead). vllm-api-key: the gateway checks vLLM's own key, and vLLM checks
                # the same header again, so it must pass through.
                "sanitize": settings.auth is EdgeAuth.GATEWAY_API_KEY,
            }
        }
    else:
        if not (settings.jwt_issuer and settings.jwt_jwks_uri and settings.jwt_audiences):
            raise ValueError("auth jwt needs jwt_issuer, jwt_jwks_uri and jwt_audiences")
        # Envoy's jwt_authn checks `aud` only when the provider lists audiences: without them any token the issuer
        # signs, for any application, passes (Envoy Gateway JWTProvider `audiences`).
        spec = {"jwt": {"providers": [
            {"name": "default", "issuer": settings.jwt_issuer, "audiences": list(settings.jwt_audiences),
             "remoteJWKS": {"uri": settings.jwt_jwks_uri}}
        ]}}
    if settings.existing_gateway and routes:
        # A shared Gateway's other routes are not ours to authenticate: the policy targets our routes, in their
        # namespace, where its credential Secret lives too (a SecurityPolicy reads Secrets of its own namespace).
        (namespace,) = {route.namespace for route in routes}
        return {
            "apiVersion": ENVOY_API,
            "kind": "SecurityPolicy",
            "metadata": _meta(f"{settings.gateway_name}-auth", namespace, annotations=policy_awaited(settings)),
            "spec": {"targetRefs": [{"group": GATEWAY_GROUP, "kind": "HTTPRoute", "name": name}
                                    for route in routes for name in route_names(route)], **spec},
        }
    return {
        "apiVersion": ENVOY_API,
        "kind": "SecurityPolicy",
        "metadata": _meta(f"{settings.gateway_name}-auth", settings.namespace, annotations=policy_awaited(settings)),
        "spec": {"targetRefs": [{"group": GATEWAY_GROUP, "kind": "Gateway", "name": settings.gateway_name}], **spec},
    }


def _parent_ref(settings: EdgeSettings, route: Route) -> dict[str, Any]:
    """The Gateway listener a route attaches to: our own Gateway's listener for its host, or the existing
    Gateway's named HTTPS listener. Always a section: without one a route attaches to every listener that
    admits it, a plain-HTTP one included (Gateway API ParentReference.sectionName)."""
    ref = {"group": GATEWAY_GROUP, "kind": "Gateway", "name": settings.gateway_name,
           "namespace": settings.owning_gateway_namespace}
    if not settings.existing_gateway:
        return {**ref, "sectionName": f"https-{_slug(route.host)}"}
    assert settings.listener is not None  # ExistingGatewayArgs.listener is required
    return {**ref, "sectionName": settings.listener}


def _route_objects(settings: EdgeSettings, route: Route) -> list[Manifest]:
    request_timeout = _duration(route.request_timeout_seconds)  # "0s" disables (Gateway API GEP-1742)
    match_path = v1_path(route.path_prefix)
    rule: dict[str, Any] = {"matches": [{"path": {"type": "PathPrefix", "value": match_path}}]}
    if match_path != "/v1":
        # vLLM serves the OpenAI API at /v1 on its root; strip the model prefix on the way in.
        rule["filters"] = [{"type": "URLRewrite", "urlRewrite": {
            "path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/v1"}}}]
    if route.objective_header is not None:
        # Set, not added: every request of the route carries the model's objective, whatever the client sent.
        name, value = route.objective_header
        rule.setdefault("filters", []).append({"type": "RequestHeaderModifier",
                                               "requestHeaderModifier": {"set": [{"name": name, "value": value}]}})
    if gateway_injects_upstream_key(settings):
        rule.setdefault("filters", []).append({"type": "ExtensionRef", "extensionRef": {
            "group": "gateway.envoyproxy.io", "kind": "HTTPRouteFilter", "name": UPSTREAM_CREDENTIAL_FILTER}})
    if route.inference_pool:
        # The pool's picker chooses the replica (prefix cache, queue, KV-cache usage); the pool names
        # the port, so the reference has none (Envoy AI Gateway v1.1.0 httproute-inferencepool.md).
        rule["backendRefs"] = [{"group": POOL_GROUP, "kind": "InferencePool", "name": route.model_name}]
    else:
        rule["backendRefs"] = [{"group": "", "kind": "Service", "name": route.model_name, "port": route.port}]
    # Failure: Envoy Gateway's default request timeout is 15 s, so any generation longer than that is
    # cut mid-stream (https://gateway.envoyproxy.io/latest/tasks/traffic/http-timeouts/).
    rule["timeouts"] = {"request": request_timeout}
    # An Exact path match outranks the rule's prefix (Gateway API HTTPRouteRule matching precedence: "Exact"
    # path match before "Prefix"), so the runtime adapter API answers 404 here and never reaches vLLM.
    closed = {
        "matches": [{"path": {"type": "Exact", "value": path}} for path in runtime_adapter_paths(route.path_prefix)],
        "filters": [{"type": "ExtensionRef", "extensionRef": {
            "group": "gateway.envoyproxy.io", "kind": "HTTPRouteFilter", "name": RUNTIME_ADAPTER_FILTER}}],
    }
    parent = _parent_ref(settings, route)

    def http_route(name: str, rules: list[dict[str, Any]]) -> dict[str, Any]:
        # `pulumi up` waits until the Gateway's controller has attached the route and found its backend (the
        # Service, or the InferencePool) for its current spec, before the deploy gate runs.
        return {"apiVersion": GATEWAY_API, "kind": "HTTPRoute",
                "metadata": _meta(name, route.namespace, annotations={
                    WAIT_FOR_ANNOTATION: route_wait_for(parent["name"], parent["namespace"])}),
                "spec": {"parentRefs": [parent], "hostnames": [route.host], "rules": rules}}

    backend_policy: dict[str, Any] = {
        "apiVersion": ENVOY_API,
        "kind": "BackendTrafficPolicy",
        "metadata": _meta(route.model_name, route.namespace, annotations=policy_awaited(settings)),
        "spec": {
            "targetRefs": [{"group": GATEWAY_GROUP, "kind": "HTTPRoute", "name": name} for name in route_names(route)],
            **backend_policy_spec(route),
        },
    }
    if not route.revisions:
        return [http_route(route.model_name, [rule, closed]), backend_policy]
    split, direct = _revision_rules(route, rule)
    # Two routes, so that `pulumi up` can order them: the header rules first (a revision's deploy gate reaches it
    # through them), the weighted split only once the gate passed (llm_serving/stack/stack.py `_gate_revisions`).
    # Gateway API ranks the rules of every route on the same hostname together (apis/v1/httproute_types.go
    # HTTPRouteRule: "Across all rules specified on applicable Routes"), so a header rule still outranks the split,
    # and the closed paths' Exact match both; each route closes them, so neither is ever open alone.
    return [http_route(route.model_name, [split, closed]),
            http_route(revision_route_name(route.model_name), [*direct, closed]), backend_policy]


def _revision_rules(route: Route, rule: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Two revisions: the model's rule split by weight over the revisions' Services, and per revision the same rule
    matching its REVISION_HEADER value too, to its own pool (or Service). A rule with a header match outranks one
    without on the same path (Gateway API apis/v1/httproute_types.go HTTPRouteRule: after the path, "Largest number
    of header matches" wins). The split names Services, not pools: Envoy AI Gateway v1.1.0 refuses a rule with two
    InferencePools ("at most one inferencepool can be referenced per route rule",
    internal/extensionserver/post_route_modify.go @v1.1.0; weighted pools are envoyproxy/ai-gateway PR #2657, open),
    while Envoy Gateway splits Service backends by weight itself (Gateway API HTTPBackendRef.weight, Core support).
    So the weighted share skips the pickers until the gateway takes two pools; the header reaches each pool's own."""
    split = {**rule, "backendRefs": [{"group": "", "kind": "Service", "name": r.backend, "port": route.port,
                                      "weight": r.weight} for r in route.revisions]}
    direct = []
    for revision in route.revisions:
        backend: dict[str, Any] = (
            {"group": POOL_GROUP, "kind": "InferencePool", "name": revision.backend} if route.inference_pool
            else {"group": "", "kind": "Service", "name": revision.backend, "port": route.port})
        filters = [f for f in rule.get("filters", []) if f.get("type") != "RequestHeaderModifier"]
        if route.objective_header is not None:
            # Each revision's picker knows its own objective, named after its pool.
            filters.append({"type": "RequestHeaderModifier", "requestHeaderModifier": {
                "set": [{"name": route.objective_header[0], "value": revision.backend}]}})
        direct.append({
            "matches": [{**match, "headers": [{"type": "Exact", "name": REVISION_HEADER, "value": revision.name}]}
                        for match in rule["matches"]],
            **({"filters": filters} if filters else {}),
            "backendRefs": [backend],
            "timeouts": rule["timeouts"],
        })
    return split, direct


def backend_policy_spec(route: Route) -> dict[str, Any]:
    """What a model's BackendTrafficPolicy sets on its route, whatever route it targets (a per-model HTTPRoute, or
    the model's rule of the byModel AIGatewayRoute's HTTPRoute)."""
    request_timeout = _duration(route.request_timeout_seconds)
    spec: dict[str, Any] = {
        "timeout": {
            "http": {
                # Failure: a BackendTrafficPolicy on a route made Envoy Gateway ignore the route's
                # timeouts.request and fall back to 15 s (envoyproxy/gateway#4091): repeat it here.
                "requestTimeout": request_timeout,
                # Failure: with request timeout 0s, Envoy Gateway 1.9.1 also drops the default stream
                # idle deadline unless one is set (nextjs/adapter-k8s#88), so a hung
                # engine would hold the stream forever. Set it per route (envoyproxy/gateway#8454).
                "streamIdleTimeout": _duration(route.stream_idle_timeout_seconds),
                "connectionIdleTimeout": _duration(UPSTREAM_CONNECTION_IDLE_SECONDS),
            }
        },
        # Retries off: a retried POST re-runs a whole generation (twice the GPU time, and a client that
        # already got tokens gets a second stream). The CRD's default trigger set retries on 503.
        "retry": {"numRetries": 0},
        # vLLM's uvicorn speaks HTTP/1.1 only: HTTP/2 clients must not be proxied upstream as h2c.
        "useClientProtocol": False,
        # requestBuffer stays unset: it holds the whole request in Envoy before forwarding
        # (CRD: "incompatible with streaming APIs"). Without it Envoy Gateway 1.9 cannot reject an
        # oversized body; vLLM rejects prompts beyond --max-model-len itself.
    }
    if route.retry_after_seconds is not None:
        spec["responseOverride"] = [overload_response(route.retry_after_seconds)]
    return spec


def overload_response(retry_after_seconds: int) -> dict[str, Any]:
    """The picker's 429 (an ext_proc immediate response, so a local reply) with Retry-After and an OpenAI-style
    error body. Envoy Gateway v1.9.0 builds this as the custom_response filter, first in the chain
    (internal/xds/translator/httpfilters.go, order 0) and enabled on this route only; a local reply from
    the picker's filter, last before the router, is encoded through every filter, this one included
    (envoyproxy/envoy source/common/http/filter_manager.cc: sendLocalReplyViaFilterChain encodes from the
    first filter; AI Gateway v1.1.0 inserts the picker's filter before the router, post_translate_modify.go).
    `Local`: vLLM's own answers pass untouched. Its body replaces the picker's plain-text one, which
    an OpenAI client cannot parse. `set`: one Retry-After, whatever the reply carried (internal/gatewayapi/
    backendtrafficpolicy.go @v1.9.0 maps it to an overwriting header)."""
    if not 1 <= retry_after_seconds <= _MAX_DURATION_SECONDS:
        raise ValueError(f"Retry-After {retry_after_seconds}s is outside 1..{_MAX_DURATION_SECONDS}s")
    body = ('{"error": {"message": "The model is at capacity; retry after ' f"{retry_after_seconds}"
            ' s.", "type": "server_overloaded", "param": null, "code": 429}}')
    return {
        "match": {"statusCodes": [{"type": "Value", "value": 429}]},
        "source": "Local",
        "response": {
            "contentType": "application/json",
            "body": {"type": "Inline", "inline": body},
            "header": {"set": [{"name": "Retry-After", "value": str(retry_after_seconds)}]},
        },
    }


# --------------------------------------------------------------------------------------------
# Ingress modes. AWS ALB (aws-load-balancer-controller): ALB -> vLLM pods, no proxy in between


def _ingress_routes(settings: EdgeSettings, routes: list[Route], mode: str) -> list[Route]:
    """The routes sorted by host; with every prefix "/", _check leaves one route per host."""
    _check(settings, routes)
    if settings.auth is not EdgeAuth.VLLM_API_KEY:
        raise ValueError(f"{mode} mode cannot check keys or JWTs at the edge; use auth vllm-api-key or gateway mode")
    for route in routes:
        if route.path_prefix.rstrip("/"):
            # Neither builder rewrites paths, and vLLM serves /v1 at its root: a prefixed path would 404.
            raise ValueError(f"{route.model_name}: {mode} mode publishes each model on its own host at '/'")
    return sorted(routes, key=lambda route: route.host)


def _ingress(settings: EdgeSettings, route: Route, class_name: str, annotations: dict[str, str],
             tls: list[dict[str, Any]] | None = None, paths: list[dict[str, Any]] | None = None,
             suffix: str = "") -> Manifest:
    """An Ingress for the route's host: by default its `/v1` prefix to the model's Service; `paths` instead."""
    service = {"service": {"name": route.model_name, "port": {"number": route.port}}}
    spec: dict[str, Any] = {
        "ingressClassName": class_name,
        "rules": [{
            "host": route.host,
            "http": {"paths": paths or [{"path": v1_path(route.path_prefix), "pathType": "Prefix",
                                         "backend": service}]},
        }],
    }
    if tls:
        spec["tls"] = tls
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": _meta(f"{settings.gateway_name}-{_slug(route.host)}{suffix}", route.namespace, annotations),
        "spec": spec,
    }


# The ALB's fixed answer for vLLM's runtime adapter API: an Ingress path whose backend names an action of this
# annotation, port `use-annotation` (aws-load-balancer-controller docs/guide/ingress/annotations.md "actions" at
# v3.5.0). The controller orders an Ingress's rules as its paths are listed, exact paths first in ours.
ALB_CLOSED_ACTION = "runtime-adapter-api-closed"


def _alb_closed_paths(route: Route) -> tuple[dict[str, str], list[dict[str, Any]]]:
    action = {"type": "fixed-response", "fixedResponseConfig": {
        "contentType": "application/json", "statusCode": "404", "messageBody": _CLOSED_BODY}}
    annotation = {f"alb.ingress.kubernetes.io/actions.{ALB_CLOSED_ACTION}": json.dumps(action, separators=(",", ":"))}
    backend = {"service": {"name": ALB_CLOSED_ACTION, "port": {"name": "use-annotation"}}}
    paths = [{"path": path, "pathType": "Exact", "backend": backend}
             for path in runtime_adapter_paths(route.path_prefix)]
    return annotation, paths


def alb_ingress(settings: EdgeSettings, routes: list[Route], subnet_ids: tuple[str, ...] = ()) -> list[Manifest]:
    """One Ingress per host, all in one ALB (group.name), TLS from ACM, HTTP/1.1 to ip targets, in
    exactly `subnet_ids`: the serving pods' NetworkPolicy admits those subnets' CIDRs and no other."""
    if not settings.acm_certificate_arn:
        raise ValueError("alb mode needs acm_certificate_arn")
    if len(set(subnet_ids)) < 2:
        raise ValueError("alb mode needs the ALB's subnets (two or more zones)")
    low, high = ALB_IDLE_RANGE
    idle = settings.alb_idle_timeout_seconds
    if not low <= idle <= high:
        raise ValueError(f"ALB idle timeout {idle}s is outside {low}..{high}s")
    objects = []
    for route in _ingress_routes(settings, routes, "alb"):
        if idle < route.stream_idle_timeout_seconds:
            raise ValueError(f"{route.model_name}: ALB idle timeout {idle}s is shorter than the stream idle timeout "
                             f"{route.stream_idle_timeout_seconds}s; the ALB would cut silent streams first")
        annotations = {
            "alb.ingress.kubernetes.io/group.name": settings.gateway_name,
            "alb.ingress.kubernetes.io/scheme": settings.load_balancer_scheme.value,
            "alb.ingress.kubernetes.io/target-type": "ip",
            # Pinned, not discovered by subnet tags: a newly tagged subnet would move the ALB to
            # addresses the NetworkPolicy does not admit (controller docs, ingress annotations "subnets").
            "alb.ingress.kubernetes.io/subnets": ",".join(subnet_ids),
            "alb.ingress.kubernetes.io/listen-ports": '[{"HTTPS": 443}]',
            "alb.ingress.kubernetes.io/certificate-arn": settings.acm_certificate_arn,
            # Failure: the ALB closes a connection silent for 60 s by default (ELB API reference,
            # LoadBalancerAttribute `idle_timeout.timeout_seconds`), which cuts a queued or slow stream,
            # and is the whole budget of a non-streamed generation.
            "alb.ingress.kubernetes.io/load-balancer-attributes": f"idle_timeout.timeout_seconds={idle}",
            "alb.ingress.kubernetes.io/backend-protocol-version": "HTTP1",  # uvicorn speaks HTTP/1.1
            # /health answers 503 once the engine is dead (vllm-project/vllm#24897).
            "alb.ingress.kubernetes.io/healthcheck-path": "/health",
            # Failure: a deregistered pod's in-flight streams are cut when the delay ends; match vLLM's drain.
            "alb.ingress.kubernetes.io/target-group-attributes": (
                f"deregistration_delay.timeout_seconds={route.drain_seconds}"
            ),
        }
        closed_action, closed_paths = _alb_closed_paths(route)
        prefix = {"path": v1_path(route.path_prefix), "pathType": "Prefix",
                  "backend": {"service": {"name": route.model_name, "port": {"number": route.port}}}}
        objects.append(_ingress(settings, route, "alb", {**annotations, **closed_action},
                                paths=[*closed_paths, prefix]))
    return objects


# --------------------------------------------------------------------------------------------
# ingress-nginx: retired (kubernetes.io/blog/2025/11/11/ingress-nginx-retirement/).
# Only for clusters that already run it; new stacks use gateway_objects.


def nginx_ingress(settings: EdgeSettings, routes: list[Route]) -> list[Manifest]:
    """One Ingress per host with buffering off; the TLS Secret must be in the route's namespace."""
    secret = _tls_secret(settings)
    objects = []
    for route in _ingress_routes(settings, routes, "nginx"):
        # nginx has no "disabled": proxy_read_timeout is the gap between two reads, not the whole response,
        # so it is the stream idle timeout (default 60 s, kubernetes/ingress-nginx
        # docs/user-guide/nginx-configuration/configmap.md). There is no whole-request cap.
        idle = str(route.stream_idle_timeout_seconds)
        annotations = {
            # Failure: buffered responses arrive all at once at the end instead of token by token.
            "nginx.ingress.kubernetes.io/proxy-buffering": "off",
            # Default "on" holds the whole prompt before vLLM sees a byte (ingress-nginx configmap.md).
            "nginx.ingress.kubernetes.io/proxy-request-buffering": "off",
            "nginx.ingress.kubernetes.io/proxy-http-version": "1.1",
            "nginx.ingress.kubernetes.io/proxy-read-timeout": idle,
            "nginx.ingress.kubernetes.io/proxy-send-timeout": idle,
            # Failure: the default "1m" answers 413 to long prompts (ingress-nginx configmap.md).
            "nginx.ingress.kubernetes.io/proxy-body-size": _nginx_size(route.request_body_limit_bytes),
            # No retry to another pod: a second attempt re-runs the generation.
            "nginx.ingress.kubernetes.io/proxy-next-upstream": "off",
        }
        if settings.cert_manager_issuer:
            annotations["cert-manager.io/cluster-issuer"] = settings.cert_manager_issuer
        tls = [{"hosts": [route.host], "secretName": secret}]
        objects.append(_ingress(settings, route, "nginx", annotations, tls))
        # vLLM's runtime adapter API: its exact paths in an Ingress of their own that refuses every client address
        # (`denylist-source-range`, a location annotation: ingress-nginx docs/user-guide/nginx-configuration/
        # annotations.md "Denylist source range"); an Exact path becomes an exact `location =`, which nginx matches
        # before any prefix location (nginx.org/en/docs/http/ngx_http_core_module.html#location: "If an exact match
        # is found, the search terminates"), so the prefix Ingress never forwards them.
        service = {"service": {"name": route.model_name, "port": {"number": route.port}}}
        objects.append(_ingress(
            # The model Ingress's annotations too: nothing passes, and nothing would be buffered if it did.
            settings, route, "nginx",
            {**annotations, "nginx.ingress.kubernetes.io/denylist-source-range": "0.0.0.0/0,::/0"}, tls,
            paths=[{"path": path, "pathType": "Exact", "backend": service}
                   for path in runtime_adapter_paths(route.path_prefix)],
            suffix="-closed"))
    return objects


# --------------------------------------------------------------------------------------------
# NetworkPolicies


def _namespace(name: str) -> dict[str, Any]:
    return {"namespaceSelector": {"matchLabels": {NAMESPACE_LABEL: name}}}


def _dns_egress() -> dict[str, Any]:
    return {
        "to": [{**_namespace("kube-system"), "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
        "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
    }


# The pods of a Prometheus the Prometheus Operator runs (prometheus-operator makeStatefulSet's pod
# selector labels, kept on every pod it creates): only they may scrape vLLM, not their whole namespace.
PROMETHEUS_POD_LABELS = {"app.kubernetes.io/name": "prometheus", "app.kubernetes.io/managed-by": "prometheus-operator"}


def _pods(namespace: str, labels: dict[str, str]) -> dict[str, Any]:
    """Pods with these labels in that namespace (both selectors in one peer: they AND)."""
    return {**_namespace(namespace), "podSelector": {"matchLabels": dict(labels)}}


# The EKS Pod Identity agent, where the SDKs fetch a pod's credentials (EKS user guide, pod-id-how-it-works:
# AWS_CONTAINER_CREDENTIALS_FULL_URI is http://169.254.170.23/v1/credentials, [fd00:ec2::23] on IPv6).
POD_IDENTITY_AGENT_CIDRS = ("169.254.170.23/32", "fd00:ec2::23/128")
POD_IDENTITY_AGENT_PORT = 80


def _pod_identity_egress() -> dict[str, Any]:
    return {"to": [{"ipBlock": {"cidr": cidr}} for cidr in POD_IDENTITY_AGENT_CIDRS],
            "ports": [{"protocol": "TCP", "port": POD_IDENTITY_AGENT_PORT}]}


def _https_egress(cidrs: tuple[str, ...] | None = None) -> dict[str, Any]:
    """HTTPS out to exactly `cidrs`; None: to any address. Both families for any address: on an IPv6 EKS cluster
    the Hub and its CDN are reached over IPv6."""
    blocks = ("0.0.0.0/0", "::/0") if cidrs is None else cidrs
    return {"to": [{"ipBlock": {"cidr": cidr}} for cidr in blocks], "ports": [{"protocol": "TCP", "port": 443}]}


def s3_cidrs(cidrs: Sequence[str]) -> tuple[str, ...]:
    """S3's prefix-list CIDRs as the policies name them: each one once, sorted, so the order DescribePrefixLists
    happens to answer in never shows as a change. Refused: an empty list, since a rule whose `to` is empty admits
    every destination (Kubernetes API, NetworkPolicyEgressRule `to`: "If this field is empty or missing, this rule
    matches all destinations"), and anything but a network address."""
    networks = set()
    for cidr in cidrs:
        try:
            networks.add(ipaddress.ip_network(cidr, strict=True))
        except ValueError as error:
            raise ValueError(f"S3 prefix list entry {cidr!r} is not a CIDR block: {error}") from None
    if not networks:
        raise ValueError("the S3 prefix list has no CIDR block: an egress rule to none would admit every address")
    return tuple(str(n) for n in sorted(networks, key=lambda n: (n.version, n.network_address, n.prefixlen)))


def object_storage_egress(cidrs: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """What a pod reading or writing S3 needs out: the Pod Identity agent for credentials, and HTTPS to S3: to S3's
    prefix-list `cidrs` where the GPU subnets route S3 through a gateway endpoint, else to any address (through NAT,
    S3 answers at public addresses that only ip-ranges.json publishes, and they change). Nothing else on 443: the
    SDKs take the role's credentials from the agent over HTTP, and the agent, a host-network pod these policies do
    not select, calls the EKS Auth API itself (EKS user guide, pod-id-how-it-works), so no STS endpoint; every
    client is given the region (AWS_REGION), so none asks the instance metadata service."""
    return [_pod_identity_egress(), _https_egress(None if cidrs is None else s3_cidrs(cidrs))]


def network_policies(
    *,
    serving_namespace: str,
    model_selector: dict[str, str],
    port: int,
    edge_namespace: str,
    edge_pod_selector: dict[str, str] | None,
    prometheus_namespace: str,
    prometheus_pod_selector: dict[str, str],
    staging_job_selector: dict[str, str],
    load_balancer_cidrs: tuple[str, ...] = (),
    picker_selector: dict[str, str] | None = None,
    verification_selector: dict[str, str] | None = None,
    eval_selector: dict[str, str] | None = None,
    weights_from_s3: bool = False,
    worker_selector: dict[str, str] | None = None,
    s3_prefix_list_cidrs: Sequence[str] | None = None,
) -> list[Manifest]:
    """Serving pods: in on `port` from the edge's proxy pods, the Prometheus pods and the pickers only,
    out to DNS only. Staging Jobs: nothing in, DNS and HTTPS out.

    `edge_pod_selector` None (alb mode): the ALB connects from its own subnets (target type ip), so
    `load_balancer_cidrs` must name exactly those subnets, never the VPC, whose range every pod's IP
    shares under the VPC CNI. vLLM 0.33.0 serves /metrics on its API port (no metrics-port flag in
    its serve flags), so the scrapers' rule cannot be narrowed to a metrics-only port.
    `weights_from_s3`: serving pods also reach the Pod Identity agent and S3 over HTTPS, and the staging Jobs the
    agent. `s3_prefix_list_cidrs` (with `weights_from_s3`, where the GPU subnets route S3 through a gateway
    endpoint): the CIDRs of S3's AWS-managed prefix list, the only addresses S3 traffic may go to; None: any
    address on 443 (through NAT, S3's addresses are public ranges that only ip-ranges.json publishes). The
    staging Jobs keep any address on 443 either way: they download from the Hugging Face Hub and its CDN.
    `worker_selector` (with `weights_from_s3`): the headless ranks of multi-node groups, which the serving
    fence does not select, stream their weights too: the same way out to the agent and S3 (their group's
    own fence admits the other ranks and DNS; NetworkPolicies add up).
    """
    if edge_pod_selector is None and not load_balancer_cidrs:
        raise ValueError("without edge proxy pods, load_balancer_cidrs must name the load balancer's subnets")
    if s3_prefix_list_cidrs is not None and not weights_from_s3:
        raise ValueError("s3_prefix_list_cidrs narrows the S3 egress, which only weights_from_s3 opens")
    to_s3 = object_storage_egress(s3_prefix_list_cidrs)
    sources = [_pods(edge_namespace, edge_pod_selector)] if edge_pod_selector else []
    sources.append(_pods(prometheus_namespace, prometheus_pod_selector))
    sources += [{"ipBlock": {"cidr": cidr}} for cidr in load_balancer_cidrs]
    if picker_selector:
        # Endpoint pickers in the serving namespace scrape each replica's /metrics on the API port.
        sources.append({"podSelector": {"matchLabels": dict(picker_selector)}})
    if verification_selector:
        # The post-deploy verification Job checks each model's Service from inside the namespace.
        sources.append({"podSelector": {"matchLabels": dict(verification_selector)}})
    if eval_selector:
        # The accuracy gate's Job asks each revision's Service, from inside the namespace too.
        sources.append({"podSelector": {"matchLabels": dict(eval_selector)}})
    serving = _network_policy(
        "vllm-serving", serving_namespace, model_selector,
        # Selecting the pods denies every other ingress; only the API port is opened.
        ingress=[{"from": sources, "ports": [{"protocol": "TCP", "port": port}]}],
        # Tensor-parallel workers talk over shared memory inside the pod and weights are pre-staged
        # (HF_HUB_OFFLINE=1), so a serving pod needs no pod-to-pod or internet egress: DNS only.
        egress=[_dns_egress(), *(to_s3 if weights_from_s3 else ())],
    )
    staging = _network_policy(
        "weights-staging", serving_namespace, staging_job_selector,
        ingress=[],  # nothing may reach the pod holding the Hugging Face token
        egress=[_dns_egress(), _https_egress(), *((_pod_identity_egress(),) if weights_from_s3 else ())],
    )
    if not (weights_from_s3 and worker_selector):
        return [serving, staging]
    # Egress only: who may reach a worker is its group fence's to say (the other ranks).
    workers = _network_policy("vllm-worker-weights", serving_namespace, worker_selector,
                              egress=[_dns_egress(), *to_s3])
    return [serving, staging, workers]


def _network_policy(name: str, namespace: str, selector: dict[str, str], *, egress: list[dict[str, Any]],
                    ingress: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A NetworkPolicy over the pods `selector` matches: their egress, and their ingress unless None (an
    egress-only policy, which leaves ingress to other policies)."""
    spec: dict[str, Any] = {"podSelector": {"matchLabels": dict(selector)},
                            "policyTypes": ["Egress"] if ingress is None else ["Ingress", "Egress"]}
    if ingress is not None:
        spec["ingress"] = ingress
    spec["egress"] = egress
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": _meta(name, namespace),
            "spec": spec}
