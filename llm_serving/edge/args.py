"""What a stack says about its edge: Gateway API (Envoy Gateway) or an ALB, authentication, TLS, timeouts, and
the endpoint pickers behind `inferencePool` routes. Shapes and ranges only; timeouts against stream
lengths are the stack's rules (llm_serving.stack.rules)."""

from enum import StrEnum

from pydantic import Field

from llm_serving.platform import versions
from llm_serving.platform.args import (
    ACM_CERTIFICATE_ARN,
    CHART_VERSION,
    DNS_LABEL,
    HOSTNAME,
    HTTPS_URL,
    IAM_ROLE_ARN,
    IMAGE_DIGEST,
    SUBNET_ID,
    Constraint,
    args_type,
    check_each,
)


class EdgeMode(StrEnum):
    """What publishes the models: Gateway API (Envoy Gateway), an AWS ALB, or legacy ingress-nginx."""

    GATEWAY = "gateway"
    ALB = "alb"
    INGRESS_NGINX = "ingress-nginx"


class EdgeRouting(StrEnum):
    """How the edge finds a request's model: by its host and path prefix, or by the `model` field of its body."""

    PER_MODEL = "perModel"
    BY_MODEL = "byModel"


class EdgeAuth(StrEnum):
    """Who checks credentials: vLLM's own API key, or the gateway (API keys or JWT)."""

    VLLM_API_KEY = "vllm-api-key"
    GATEWAY_API_KEY = "gateway-api-key"
    JWT = "jwt"


class ControllerMode(StrEnum):
    """Install the edge controller from its chart, or use one the cluster already runs."""

    INSTALL = "install"
    EXISTING = "existing"


class LoadBalancerScheme(StrEnum):
    INTERNAL = "internal"
    INTERNET_FACING = "internet-facing"


@args_type
class TlsArgs:
    """Where the edge's certificate comes from."""

    secret_name: str | None = Field(default=None, **DNS_LABEL)
    """Existing TLS Secret in the edge namespace."""
    cert_manager_issuer: str | None = Field(default=None, **DNS_LABEL)
    """cert-manager ClusterIssuer that issues the certificate."""
    acm_certificate_arn: str | None = Field(default=None, **ACM_CERTIFICATE_ARN)
    """ACM certificate ARN (alb mode)."""
    self_signed: bool = False
    """Dev only (gateway mode): the program creates a self-signed certificate for `edge.host` and its Secret in the
    edge namespace, so HTTPS answers on the first `pulumi up`; clients must trust it or skip verification."""


# An `aud` value: a non-empty string without whitespace (an application id or URI).
JWT_AUDIENCE: Constraint = {"pattern": r"^\S{1,256}$"}


@args_type
class JwtArgs:
    issuer: str = Field(**HTTPS_URL)
    """Expected `iss` of client tokens."""
    jwks_uri: str = Field(**HTTPS_URL)
    """Where the gateway fetches the signing keys."""
    audiences: list[str] = Field(min_length=1, max_length=8)
    """Accepted `aud` values, at least one (Envoy Gateway's `audiences`, at most 8): without an audience the gateway
    would accept any token the issuer signs for any application, and then inject vLLM's key for it."""

    _check_audiences = check_each("audiences", JWT_AUDIENCE)


@args_type
class OverloadArgs:
    """What the endpoint pickers do with requests the pool cannot start within the TTFT objective."""

    flow_control: bool = True
    """Hold requests in the picker while the pool is saturated and answer 429 with Retry-After to one that cannot start
    within `queueWaitSeconds` (llm-d-router flow control); false: the picker forwards everything, vLLM queues
    without bound and only negative priorities get 429."""
    queue_wait_seconds: float | None = Field(default=None, gt=0, le=600)
    """Longest a request waits in the picker for a replica before its 429; unset: the model's `slo.ttftP95Seconds` (a
    request that waited that long has already missed it)."""
    queue_depth_per_replica: int | None = Field(default=None, ge=1, le=10000)
    """Waiting requests per replica the picker counts as full; unset: the model's `autoscaling.waitingPerReplicaTarget`
    / `autoscaling.ttftTargetFraction`, rounded up (queue wait grows with depth: where KEDA aims for that fraction
    of the TTFT objective, this is all of it)."""
    kv_cache_usage: float | None = Field(default=None, gt=0, le=1)
    """KV-cache usage (0..1) the picker counts as full; unset: the model's `autoscaling.kvUsageTarget` /
    `autoscaling.ttftTargetFraction`, at most 1."""
    sheddable_queue_requests: int | None = Field(default=None, ge=1, le=100000)
    """Requests of negative priority each picker holds while saturated before it refuses the next at once; unset: the
    model's queue depth per replica (one replica's worth)."""
    retry_after_seconds: int | None = Field(default=None, ge=1, le=3600)
    """`Retry-After` on the edge's 429s, in seconds; unset: `queueWaitSeconds` rounded up."""


@args_type
class InferenceRoutingArgs:
    """The endpoint pickers and Envoy AI Gateway behind `routing: inferencePool` routes."""

    overload: OverloadArgs = Field(default_factory=OverloadArgs)
    """Overload shedding in the pickers: hold, then 429 with Retry-After (docs/request-path.md)."""
    picker_replicas: int = Field(default=2, ge=1, le=10)
    """Endpoint-picker replicas per model; the gateway fails closed without one, so 2+ outside dev."""
    picker_cpu_request: str = Field(default="2", pattern=r"^[0-9]+(\.[0-9]+)?m?$")
    """CPU request of each picker (scores every request; upstream's chart asks 8)."""
    picker_memory_request_mib: int = Field(default=4096, ge=256, le=65536)
    """Memory request of each picker in MiB."""
    picker_memory_limit_mib: int = Field(default=8192, ge=256, le=131072)
    """Memory limit of each picker in MiB (its prefix index lives here)."""
    picker_image_digest: str = Field(default=versions.ENDPOINT_PICKER_IMAGE_DIGEST, **IMAGE_DIGEST)
    """Digest of the pinned endpoint-picker image (`sha256:...`); the picker is pulled by digest."""
    ai_gateway_chart_version: str = Field(default=versions.AI_GATEWAY.version, **CHART_VERSION)
    """ai-gateway-helm chart version."""
    ai_gateway_crds_chart_version: str = Field(default=versions.AI_GATEWAY_CRDS.version, **CHART_VERSION)
    """ai-gateway-crds-helm chart version."""


@args_type
class ExistingGatewayArgs:
    """A Gateway (Envoy Gateway) the cluster already runs, that the stack attaches its routes to."""

    name: str = Field(**DNS_LABEL)
    """The Gateway's name."""
    namespace: str = Field(**DNS_LABEL)
    """The Gateway's namespace (its proxies run in `edge.namespace`, Envoy Gateway's own)."""
    listener: str = Field(**DNS_LABEL)
    """The HTTPS listener the routes attach to (`sectionName`). Named, never implied: without a section a route
    attaches to every listener that admits it, a plain-HTTP one included, and the API keys would cross in
    cleartext."""
    replaces_gateway_policies: bool = False
    """The stack attaches a SecurityPolicy and BackendTrafficPolicies to its own routes; Envoy Gateway then applies
    them instead of any the Gateway's owner attached to the Gateway (the more specific target wins, for each kind).
    Preflight refuses such Gateway-level policies until this is true: set it once you have checked that the model
    routes need none of them."""


@args_type
class EdgeArgs:
    """The streaming-safe edge in front of the models."""

    mode: EdgeMode = EdgeMode.GATEWAY
    """`gateway` (default), `alb` or `ingress-nginx`."""
    controller: ControllerMode = ControllerMode.INSTALL
    """Install the controller's chart, or use an existing one."""
    gateway: ExistingGatewayArgs | None = None
    """Gateway mode: an existing Envoy Gateway `Gateway` the routes attach to (with `controller: existing`); its
    listeners, certificate and load balancer are its owner's, and the stack authenticates its own routes. Unset:
    the stack creates its Gateway, GatewayClass, EnvoyProxy and listener policy."""
    namespace: str | None = Field(default=None, **DNS_LABEL)
    """Namespace of the edge controller (and its proxies); unset: `envoy-gateway-system` (gateway), `kube-system`
    (alb), `ingress-nginx` (ingress-nginx)."""
    envoy_gateway_chart_version: str = Field(default=versions.ENVOY_GATEWAY.version, **CHART_VERSION)
    """gateway-helm chart version (gateway mode)."""
    alb_controller_chart_version: str = Field(default=versions.AWS_LOAD_BALANCER_CONTROLLER.version, **CHART_VERSION)
    """aws-load-balancer-controller chart version (alb mode with `install`, or `cluster.loadBalancerController:
    install`)."""
    alb_controller_role_arn: str | None = Field(default=None, **IAM_ROLE_ARN)
    """IAM role for the ALB controller's service account (alb mode with `install`)."""
    load_balancer_subnet_ids: list[str] = Field(default_factory=list)
    """Subnets the ALB is placed in (alb mode, two or more zones): the only addresses the serving pods admit besides
    Prometheus, since the ALB connects to the pods directly. Never the GPU nodes' subnets (their pods would be
    admitted too); subnets no node uses."""
    host: str = Field(**HOSTNAME)
    """Default hostname of the model APIs."""
    routing: EdgeRouting = EdgeRouting.PER_MODEL
    """`perModel` (default): each model at its own `route.host` and `route.pathPrefix`, as an OpenAI base URL of its
    own. `byModel` (gateway mode with an installed controller, every model on an InferencePool): every model behind
    one base URL, `https://<host>/v1`, chosen by the request body's `model` (Envoy AI Gateway's AIGatewayRoute);
    `GET /v1/models` lists them and an unknown model gets a 404 naming them (docs/request-path.md)."""
    scheme: LoadBalancerScheme = LoadBalancerScheme.INTERNAL
    """`internal` (default) or `internet-facing` load balancer."""
    tls: TlsArgs = Field(default_factory=TlsArgs)
    """Certificate source."""
    auth: EdgeAuth = EdgeAuth.VLLM_API_KEY
    """Who checks client credentials."""
    jwt: JwtArgs | None = None
    """JWT provider (auth `jwt`)."""
    stream_idle_timeout_seconds: int = Field(default=300, ge=10, le=3600)
    """Longest silence allowed inside a response stream (Envoy's stream idle timeout): also the longest a request
    may wait in the endpoint picker, for a replica or for a model waking from zero, with no byte sent."""
    load_balancer_idle_timeout_seconds: int | None = Field(default=None, ge=60, le=6000)
    """Gateway mode: the NLB's TCP idle timeout (listener attribute `tcp.idle_timeout.seconds`, 60..6000 s); it must
    exceed `streamIdleTimeoutSeconds`, or the NLB drops a silent stream first. Unset: the NLB's default, 350 s
    (raise it for a model that scales to zero and wakes for longer)."""
    min_decode_tokens_per_second: float = Field(default=10, gt=0, le=10000)
    """Slowest decode speed to allow for: timeouts must cover max-model-len tokens at this speed."""
    inference_routing: InferenceRoutingArgs = Field(default_factory=InferenceRoutingArgs)
    """Endpoint pickers and Envoy AI Gateway for models routed through an InferencePool."""
    _check_load_balancer_subnet_ids = check_each("load_balancer_subnet_ids", SUBNET_ID)

