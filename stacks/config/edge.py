"""Configuration of the streaming-safe edge: Gateway API or ALB, authentication, TLS, and the
inference routing (endpoint pickers) behind it. Feeds components/edge and components/routing.
Shapes and ranges only; timeouts against stream lengths are checked in stacks/checks/.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import Field, StringConstraints

from components.platform import versions
from stacks.config.base import (
    AcmCertificateArn,
    ChartVersion,
    ConfigModel,
    DnsLabel,
    Hostname,
    HttpsUrl,
    IamRoleArn,
    ImageDigest,
    SubnetId,
)


class EdgeMode(StrEnum):
    """What publishes the models: Gateway API (Envoy Gateway), an AWS ALB, or legacy ingress-nginx."""

    GATEWAY = "gateway"
    ALB = "alb"
    INGRESS_NGINX = "ingress-nginx"


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


class TlsConfig(ConfigModel):
    """Where the edge's certificate comes from."""

    secret_name: DnsLabel | None = Field(default=None, description="Existing TLS Secret in the edge namespace.")
    cert_manager_issuer: DnsLabel | None = Field(
        default=None, description="cert-manager ClusterIssuer that issues the certificate."
    )
    acm_certificate_arn: AcmCertificateArn | None = Field(
        default=None, description="ACM certificate ARN (alb mode)."
    )
    self_signed: bool = Field(
        default=False,
        description=(
            "Dev only (gateway mode): the program creates a self-signed certificate for `edge.host` and its "
            "Secret in the edge namespace, so HTTPS answers on the first `pulumi up`; clients must trust it "
            "or skip verification."
        ),
    )


class JwtConfig(ConfigModel):
    issuer: HttpsUrl = Field(description="Expected `iss` of client tokens.")
    jwks_uri: HttpsUrl = Field(description="Where the gateway fetches the signing keys.")


class OverloadConfig(ConfigModel):
    """What the endpoint pickers do with requests the pool cannot start within the TTFT objective."""

    flow_control: bool = Field(
        default=True,
        description=(
            "Hold requests in the picker while the pool is saturated and answer 429 with Retry-After to one that "
            "cannot start within `queueWaitSeconds` (llm-d-router flow control); false: the picker forwards "
            "everything, vLLM queues without bound and only negative priorities get 429."
        ),
    )
    queue_wait_seconds: float | None = Field(
        default=None, gt=0, le=600,
        description=(
            "Longest a request waits in the picker for a replica before its 429; unset: the model's "
            "`slo.ttftP95Seconds` (a request that waited that long has already missed it)."
        ),
    )
    queue_depth_per_replica: int | None = Field(
        default=None, ge=1, le=10000,
        description=(
            "Waiting requests per replica the picker counts as full; unset: the model's "
            "`autoscaling.waitingPerReplicaTarget` / `autoscaling.ttftTargetFraction`, rounded up (queue wait "
            "grows with depth: where KEDA aims for that fraction of the TTFT objective, this is all of it)."
        ),
    )
    kv_cache_usage: float | None = Field(
        default=None, gt=0, le=1,
        description=(
            "KV-cache usage (0..1) the picker counts as full; unset: the model's `autoscaling.kvUsageTarget` / "
            "`autoscaling.ttftTargetFraction`, at most 1."
        ),
    )
    sheddable_queue_requests: int | None = Field(
        default=None, ge=1, le=100000,
        description=(
            "Requests of negative priority each picker holds while saturated before it refuses the next at once; "
            "unset: the model's queue depth per replica (one replica's worth)."
        ),
    )
    retry_after_seconds: int | None = Field(
        default=None, ge=1, le=3600,
        description="`Retry-After` on the edge's 429s, in seconds; unset: `queueWaitSeconds` rounded up.",
    )


class InferenceRoutingConfig(ConfigModel):
    """The endpoint pickers and Envoy AI Gateway behind `routing: inferencePool` routes."""

    overload: OverloadConfig = Field(
        default_factory=OverloadConfig,
        description="Overload shedding in the pickers: hold, then 429 with Retry-After (docs/request-path.md).",
    )

    picker_replicas: int = Field(
        default=2, ge=1, le=10,
        description="Endpoint-picker replicas per model; the gateway fails closed without one, so 2+ outside dev.",
    )
    picker_cpu_request: Annotated[str, StringConstraints(pattern=r"^[0-9]+(\.[0-9]+)?m?$")] = Field(
        default="2", description="CPU request of each picker (scores every request; upstream's chart asks 8)."
    )
    picker_memory_request_mib: int = Field(
        default=4096, ge=256, le=65536, description="Memory request of each picker in MiB."
    )
    picker_memory_limit_mib: int = Field(
        default=8192, ge=256, le=131072, description="Memory limit of each picker in MiB (its prefix index lives here)."
    )
    picker_image_digest: ImageDigest = Field(
        default=versions.ENDPOINT_PICKER_IMAGE_DIGEST,
        description="Digest of the pinned endpoint-picker image (`sha256:...`); the picker is pulled by digest.",
    )
    ai_gateway_chart_version: ChartVersion = Field(
        default=versions.AI_GATEWAY.version, description="ai-gateway-helm chart version."
    )
    ai_gateway_crds_chart_version: ChartVersion = Field(
        default=versions.AI_GATEWAY_CRDS.version, description="ai-gateway-crds-helm chart version."
    )


class EdgeConfig(ConfigModel):
    """The streaming-safe edge in front of the models."""

    mode: EdgeMode = Field(default=EdgeMode.GATEWAY, description="`gateway` (default), `alb` or `ingress-nginx`.")
    controller: ControllerMode = Field(
        default=ControllerMode.INSTALL, description="Install the controller's chart, or use an existing one."
    )
    namespace: DnsLabel | None = Field(
        default=None,
        description=(
            "Namespace of the edge controller (and its proxies); unset: `envoy-gateway-system` (gateway), "
            "`kube-system` (alb), `ingress-nginx` (ingress-nginx)."
        ),
    )
    envoy_gateway_chart_version: ChartVersion = Field(
        default=versions.ENVOY_GATEWAY.version, description="gateway-helm chart version (gateway mode)."
    )
    alb_controller_chart_version: ChartVersion = Field(
        default=versions.AWS_LOAD_BALANCER_CONTROLLER.version,
        description=(
            "aws-load-balancer-controller chart version (alb mode with `install`, or "
            "`cluster.loadBalancerController: install`)."
        ),
    )
    alb_controller_role_arn: IamRoleArn | None = Field(
        default=None, description="IAM role for the ALB controller's service account (alb mode with `install`)."
    )
    load_balancer_subnet_ids: list[SubnetId] = Field(
        default_factory=list,
        description=(
            "Subnets the ALB is placed in (alb mode, two or more zones): the only addresses the serving "
            "pods admit besides Prometheus, since the ALB connects to the pods directly."
        ),
    )
    host: Hostname = Field(description="Default hostname of the model APIs.")
    scheme: LoadBalancerScheme = Field(
        default=LoadBalancerScheme.INTERNAL, description="`internal` (default) or `internet-facing` load balancer."
    )
    tls: TlsConfig = Field(default_factory=TlsConfig, description="Certificate source.")
    auth: EdgeAuth = Field(default=EdgeAuth.VLLM_API_KEY, description="Who checks client credentials.")
    jwt: JwtConfig | None = Field(default=None, description="JWT provider (auth `jwt`).")
    stream_idle_timeout_seconds: int = Field(
        default=300, ge=10, le=3600, description="Longest silence allowed inside a response stream."
    )
    min_decode_tokens_per_second: float = Field(
        default=10, gt=0, le=10000,
        description="Slowest decode speed to allow for: timeouts must cover max-model-len tokens at this speed.",
    )
    inference_routing: InferenceRoutingConfig = Field(
        default_factory=InferenceRoutingConfig,
        description="Endpoint pickers and Envoy AI Gateway for models routed through an InferencePool.",
    )
