"""The llm-serving guardrails as pure functions: one check per rule, no Pulumi import.

The Pulumi policy pack (pack.py) and the offline render (`violations()`, tests,
stacks/offline/policy_check.py) run the same checks on the same input form: a resource's type
token and its inputs (a Kubernetes manifest, camelCase).

Length: the complete rule set; the policy pack loads it as one module next to pack.py (the CLI
runs the pack from its own directory), and each rule carries its message and its reason.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

ENVIRONMENTS: tuple[str, ...] = ("dev", "staging", "prod")

# How the offline render shows a Pulumi secret (stacks/offline/render.py SECRET); rules.py must not import it,
# because the published pack ships without the rest of the repository.
RENDERED_SECRET = "[secret]"

GPU_RESOURCE = "nvidia.com/gpu"
# The GPU node group's taint (llm_serving/gpu/scheduling.py): key nvidia.com/gpu, value true, NoSchedule.
GPU_TAINT = {"key": GPU_RESOURCE, "value": "true", "effect": "NoSchedule"}
# Node labels that only GPU nodes carry: GPU feature discovery's nvidia.com/gpu.* and our node group label.
GPU_NODE_LABEL_PREFIXES = ("nvidia.com/gpu", "llm-serving/node-group")
WEIGHTS_COMPONENT = "weights"

# Mirrors llm_serving/serving/capacity.py MIN_STARTUP_BUDGET_SECONDS and the vLLM liveness settings in
# llm_serving/serving/engine.py; tests/policies/test_rules.py keeps them equal.
MIN_STARTUP_BUDGET_SECONDS = 600
MIN_LIVENESS_TIMEOUT_SECONDS = 10
MIN_LIVENESS_WINDOW_SECONDS = 90
# The longest generation a request timeout or ALB idle timeout must allow for.
MIN_STREAM_TIMEOUT_SECONDS = 600

# Kubernetes defaults when a field is left out (core/v1 Probe, Envoy Gateway, AWS ALB).
PROBE_DEFAULTS = {"timeoutSeconds": 1, "periodSeconds": 10, "failureThreshold": 3, "initialDelaySeconds": 0}
ENVOY_GATEWAY_DEFAULT_REQUEST_TIMEOUT = "15s"
ALB_DEFAULT_IDLE_SECONDS = 60

DEPLOYMENT = "kubernetes:apps/v1:Deployment"
STATEFUL_SET = "kubernetes:apps/v1:StatefulSet"
DAEMON_SET = "kubernetes:apps/v1:DaemonSet"
REPLICA_SET = "kubernetes:apps/v1:ReplicaSet"
JOB = "kubernetes:batch/v1:Job"
CRON_JOB = "kubernetes:batch/v1:CronJob"
POD = "kubernetes:core/v1:Pod"
CONFIG_MAP = "kubernetes:core/v1:ConfigMap"
SECRET = "kubernetes:core/v1:Secret"
PVC = "kubernetes:core/v1:PersistentVolumeClaim"
INGRESS = "kubernetes:networking.k8s.io/v1:Ingress"
HTTP_ROUTES = (
    "kubernetes:gateway.networking.k8s.io/v1:HTTPRoute",
    "kubernetes:gateway.networking.k8s.io/v1beta1:HTTPRoute",
)
# byModel routing's route: its rules carry `timeouts.request` as an HTTPRoute's do; unset, Envoy AI Gateway v1.1.0
# sets 60 s (api/v1beta1/ai_gateway_route_helper.go defaultRequestTimeout).
AI_GATEWAY_ROUTE = "kubernetes:aigateway.envoyproxy.io/v1beta1:AIGatewayRoute"
AI_GATEWAY_DEFAULT_REQUEST_TIMEOUT = "60s"
BACKEND_TRAFFIC_POLICY = "kubernetes:gateway.envoyproxy.io/v1alpha1:BackendTrafficPolicy"
ENVOY_PROXY = "kubernetes:gateway.envoyproxy.io/v1alpha1:EnvoyProxy"
INFERENCE_POOL = "kubernetes:inference.networking.k8s.io/v1:InferencePool"
# Envoy AI Gateway v1.1.0 reads this pool annotation: `buffered` makes the endpoint picker's ext_proc
# filter hold whole request and response bodies (internal/extensionserver/inferencepool.go).
BODY_MODE_ANNOTATION = "aigateway.envoyproxy.io/processing-body-mode"
SCALED_OBJECT = "kubernetes:keda.sh/v1alpha1:ScaledObject"
HPA_V2 = "kubernetes:autoscaling/v2:HorizontalPodAutoscaler"
HPA_V1 = "kubernetes:autoscaling/v1:HorizontalPodAutoscaler"
HELM_RELEASE = "kubernetes:helm.sh/v3:Release"
EKS_CLUSTER = "aws:eks/cluster:Cluster"
# Control-plane logs an incident review needs: who did what (audit, authenticator) and why the API refused.
REQUIRED_CONTROL_PLANE_LOGS = ("api", "audit", "authenticator")
NAMESPACE = "kubernetes:core/v1:Namespace"
# One replica of a model larger than one node: a leader pod template and a worker pod template.
LEADER_WORKER_SET = "kubernetes:leaderworkerset.x-k8s.io/v1:LeaderWorkerSet"
WORKLOADS = (DEPLOYMENT, STATEFUL_SET, DAEMON_SET, REPLICA_SET, JOB, CRON_JOB, POD, LEADER_WORKER_SET)


@dataclass(frozen=True)
class RuleContext:
    """What a rule knows besides the inputs.

    `retain_on_delete` is None when the caller cannot see it: Pulumi's analyzer protocol does not send
    it to policy packs. `secrets_visible` is False in the pack, which receives secrets as plain text.
    """

    environment: str
    name: str = ""
    protect: bool = False
    retain_on_delete: bool | None = False
    secrets_visible: bool = True


Check = Callable[[str, Mapping[str, Any], RuleContext], list[str]]


@dataclass(frozen=True)
class Rule:
    name: str
    description: str
    enforcement: Literal["mandatory", "advisory"]
    check: Check
    resource_types: tuple[str, ...]

    def applies_to(self, resource_type: str) -> bool:
        return resource_type in self.resource_types


def resolve_environment(configured: str | None, stack: str | None) -> str:
    """`llm-serving:environment`; else the stack's name if it is one; else prod, the strictest."""
    if configured in ENVIRONMENTS:
        return configured
    if stack in ENVIRONMENTS:
        return stack
    # An unknown environment must never relax prod's rules.
    return "prod"


# --------------------------------------------------------------------------------------------
# Reading manifests


def _dig(value: Any, *keys: str) -> Any:
    """value[k1][k2]...; None as soon as a level is missing or is not a mapping."""
    for key in keys:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _kind(resource_type: str) -> str:
    return resource_type.rsplit(":", 1)[-1]


def _subject(resource_type: str, inputs: Mapping[str, Any], context: RuleContext) -> str:
    """`Kind namespace/name` as kubectl shows it; the Pulumi name when the manifest has none."""
    metadata = _map(inputs.get("metadata"))
    name = metadata.get("name") or context.name
    namespace = metadata.get("namespace")
    return f"{_kind(resource_type)} {namespace}/{name}" if namespace else f"{_kind(resource_type)} {name}"


def _pod_specs(resource_type: str, inputs: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """(role, pod spec) of each pod template: a LeaderWorkerSet has a leader and a worker template (the
    leader's defaults to the worker's); every other workload one, with role ""."""
    if resource_type == LEADER_WORKER_SET:
        group = _map(_dig(inputs.get("spec"), "leaderWorkerTemplate"))
        worker = _map(_dig(group, "workerTemplate", "spec"))
        return [("leader", _map(_dig(group, "leaderTemplate", "spec")) or worker), ("worker", worker)]
    return [("", _pod_spec(resource_type, inputs))]


def _all_containers(resource_type: str, inputs: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    for _, pod_spec in _pod_specs(resource_type, inputs):
        yield from _containers(pod_spec)


def _pod_spec(resource_type: str, inputs: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = inputs.get("spec")
    if resource_type == POD:
        return _map(spec)
    if resource_type == CRON_JOB:
        return _map(_dig(spec, "jobTemplate", "spec", "template", "spec"))
    return _map(_dig(spec, "template", "spec"))


def _containers(pod_spec: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    for field in ("initContainers", "containers", "ephemeralContainers"):
        for container in _list(pod_spec.get(field)):
            if isinstance(container, Mapping):
                yield container


def _where(subject: str, container: Mapping[str, Any]) -> str:
    return f"{subject} container {container.get('name', '?')}"


def _requests_gpu(container: Mapping[str, Any]) -> bool:
    resources = _map(container.get("resources"))
    return any(GPU_RESOURCE in _map(resources.get(part)) for part in ("requests", "limits"))


def _seconds(probe: Mapping[str, Any], field: str) -> int:
    value = probe.get(field)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return PROBE_DEFAULTS[field]
    return int(value)


def _shown(mapping: Mapping[str, Any], field: str, default: str) -> str:
    """A field's value as YAML writes it, or what Kubernetes uses when it is unset."""
    if field not in mapping:
        return f"unset (default {default})"
    value = mapping[field]
    return str(value).lower() if isinstance(value, bool) else f"{value}"


# --------------------------------------------------------------------------------------------
# 1. images-pinned and images-digest-pinned

MOVING_TAG = "latest"
_DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")


def _tag(image: str) -> str | None:
    """The tag of `registry:port/repo:tag@digest`, or None."""
    last = image.split("@", 1)[0].rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else None


def _image_problem(image: Any) -> str | None:
    if not isinstance(image, str) or not image:
        return "no image is set, so the runtime default decides what runs; set repository:tag"
    tag = _tag(image)
    if tag == MOVING_TAG:
        return (f"image {image} uses the moving tag '{MOVING_TAG}', so nodes can run different builds and a "
                "rollback cannot return to the old one; pin a release tag (and in prod a digest)")
    if tag is None and not _DIGEST.search(image):
        return (f"image {image} has no tag, so each node pulls whatever '{MOVING_TAG}' is at that moment; "
                "pin a release tag (and in prod a digest)")
    return None


def _helm_images(values: Any, path: str = "values") -> Iterator[tuple[str, Any]]:
    """(path, tag) of every `image: {tag: ...}` block in Helm values, subcharts included."""
    if isinstance(values, Mapping):
        for key, value in values.items():
            if key == "image" and isinstance(value, Mapping) and "tag" in value:
                yield f"{path}.image.tag", value["tag"]
            yield from _helm_images(value, f"{path}.{key}")
    elif isinstance(values, list):
        for index, value in enumerate(values):
            yield from _helm_images(value, f"{path}[{index}]")


def check_images_pinned(resource_type: str, inputs: Mapping[str, Any], context: RuleContext) -> list[str]:
    if resource_type == HELM_RELEASE:
        release = inputs.get("name") or context.name
        return [
            f"Helm release {release}: {path} is '{tag}', a moving image; set a release tag, or leave it out "
            "so the chart's pinned appVersion is used"
            for path, tag in _helm_images(inputs.get("values"))
            if tag == MOVING_TAG
        ]
    subject = _subject(resource_type, inputs, context)
    messages = []
    for container in _all_containers(resource_type, inputs):
        problem = _image_problem(container.get("image"))
        if problem:
            messages.append(f"{_where(subject, container)}: {problem}.")
    return messages


# Environments that pull only by digest: prod, and staging, which rehearses prod's deploys.
DIGEST_ENVIRONMENTS = ("prod", "staging")
PIN_COMMAND = "python -m stacks pin-images <stack> --write"

# The Helm values keys that pin each chart's images by digest, and the form its template takes there: "tag"
# `<tag>@sha256:<hex>`, "sha" the hex alone, "digest" `sha256:<hex>`, "image" a whole reference ending in
# `@sha256:<hex>`; () for a chart of CRDs only. A mirror of llm_serving/platform/versions.py (ChartPin.images,
# where each key is cited from the chart's templates), which the published pack cannot import;
# tests/policies/test_rules.py keeps the two equal. A release of a chart missing here is refused in prod.
CHART_IMAGE_KEYS: dict[str, tuple[tuple[str, str], ...]] = {
    "nvidia-device-plugin": (("image.tag", "tag"), ("nfd.image.tag", "tag")),
    "dcgm-exporter": (("image.tag", "tag"),),
    "kube-prometheus-stack": (
        ("prometheusOperator.image.sha", "sha"),
        ("prometheusOperator.prometheusConfigReloader.image.sha", "sha"),
        ("prometheusOperator.admissionWebhooks.patch.image.sha", "sha"),
        ("prometheus.prometheusSpec.image.sha", "sha"),
        ("alertmanager.alertmanagerSpec.image.sha", "sha"),
        ("kube-state-metrics.image.sha", "digest"),
        ("prometheus-node-exporter.image.digest", "digest"),
        ("grafana.image.sha", "sha"),
        ("grafana.sidecar.image.sha", "sha"),
    ),
    "gateway-helm": (("global.images.envoyGateway.image", "image"),),
    "gateway-crds-helm": (),
    "prometheus-operator-crds": (),
    "aws-load-balancer-controller": (("image.tag", "tag"),),
    "keda": (("image.keda.tag", "tag"), ("image.metricsApiServer.tag", "tag"), ("image.webhooks.tag", "tag")),
    "prometheus-adapter": (("image.tag", "tag"),),
    "cluster-autoscaler": (("image.tag", "tag"),),
    "ai-gateway-helm": (("controller.image.tag", "tag"),),
    "ai-gateway-crds-helm": (),
    "aws-efa-k8s-device-plugin": (("image.tag", "tag"),),
    "lws": (("image.manager.tag", "tag"),),
}
# Where an EnvoyProxy names the proxy's image (gateway.envoyproxy.io/v1alpha1 KubernetesContainerSpec); unset,
# Envoy Gateway runs its built-in default by tag (envoyproxy/gateway v1.9.0 api/v1alpha1/shared_types.go).
ENVOY_PROXY_WORKLOADS = ("envoyDeployment", "envoyDaemonSet")
_HEX_DIGEST = re.compile(r"^[0-9a-f]{64}$")
_FULL_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


def _pins_digest(value: Any, form: str) -> bool:
    """Whether a chart's values key holds a digest in the form its template takes (CHART_IMAGE_KEYS)."""
    if not isinstance(value, str):
        return False
    if form == "sha":
        return bool(_HEX_DIGEST.match(value))
    if form == "digest":
        return bool(_FULL_DIGEST.match(value))
    return bool(_DIGEST.search(value))


def _chart_digest_problems(inputs: Mapping[str, Any], context: RuleContext) -> list[str]:
    release = inputs.get("name") or context.name
    # A classic chart is named as such; an OCI one by its reference, whose last part is the chart's name.
    chart = str(inputs.get("chart") or "").rstrip("/").rsplit("/", 1)[-1]
    environment = context.environment
    keys = CHART_IMAGE_KEYS.get(chart)
    if keys is None:
        return [f"Helm release {release}: chart {chart or '(unset)'} is not in this pack's table of chart images "
                f"(CHART_IMAGE_KEYS), so nothing shows that {environment} pulls its images by digest; list them in "
                "llm_serving/platform/versions.py and in the table."]
    messages = []
    for key, form in keys:
        value = _dig(inputs.get("values"), *key.split("."))
        if not _pins_digest(value, form):
            shown = "unset" if value is None else f"'{value}'"
            messages.append(
                f"Helm release {release}: values {key} is {shown}, so chart {chart} pulls that image by tag; a tag "
                f"can be pushed again, so {environment} pulls exactly the build that was tested: run "
                f"`{PIN_COMMAND}` (chartImageDigests).")
    return messages


def _proxy_digest_problems(inputs: Mapping[str, Any], context: RuleContext) -> list[str]:
    subject = _subject(ENVOY_PROXY, inputs, context)
    kubernetes = _map(_dig(inputs.get("spec"), "provider", "kubernetes"))
    workload = next((w for w in ENVOY_PROXY_WORKLOADS if w in kubernetes), ENVOY_PROXY_WORKLOADS[0])
    image = _dig(kubernetes, workload, "container", "image")
    if isinstance(image, str) and _DIGEST.search(image):
        return []
    shown = f"image {image}" if isinstance(image, str) and image else "Envoy Gateway's built-in image, by tag"
    return [f"{subject}: the proxies run {shown} (spec.provider.kubernetes.{workload}.container.image); they carry "
            f"every request and enforce the edge's auth, and a tag can be pushed again, so {context.environment} "
            f"pulls exactly the build that was tested: run `{PIN_COMMAND}` (chartImageDigests, with the stack's own "
            "Envoy Gateway)."]


def check_images_digest_pinned(
    resource_type: str, inputs: Mapping[str, Any], context: RuleContext
) -> list[str]:
    if context.environment not in DIGEST_ENVIRONMENTS:
        return []
    if resource_type == HELM_RELEASE:
        return _chart_digest_problems(inputs, context)
    if resource_type == ENVOY_PROXY:
        return _proxy_digest_problems(inputs, context)
    subject = _subject(resource_type, inputs, context)
    return [
        f"{_where(subject, c)}: image {c['image']} has no digest; a tag can be pushed again, so {context.environment} "
        f"pulls exactly the build that was tested: for vLLM run `{PIN_COMMAND}` (models[].image.digest)."
        for c in _all_containers(resource_type, inputs)
        if isinstance(c.get("image"), str) and not _DIGEST.search(c["image"])
    ]


# --------------------------------------------------------------------------------------------
# 2. gpu-pods-select-gpu-nodes


def _is_gpu_label(key: Any) -> bool:
    return isinstance(key, str) and key.startswith(GPU_NODE_LABEL_PREFIXES)


def _selects_gpu_nodes(pod_spec: Mapping[str, Any]) -> bool:
    if any(_is_gpu_label(k) for k in _map(pod_spec.get("nodeSelector"))):
        return True
    terms = _list(_dig(pod_spec, "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution",
                       "nodeSelectorTerms"))
    # Terms are ORed: every one of them must keep the pod on GPU nodes.
    return bool(terms) and all(
        any(_is_gpu_label(e.get("key")) and e.get("operator") in ("In", "Exists", "Gt")
            for e in _list(_map(term).get("matchExpressions")) if isinstance(e, Mapping))
        for term in terms
    )


def _tolerates_gpu_taint(toleration: Mapping[str, Any]) -> bool:
    """Kubernetes' toleration matching against the GPU taint nvidia.com/gpu=true:NoSchedule."""
    operator = toleration.get("operator", "Equal")
    key = toleration.get("key", "")
    if key != GPU_TAINT["key"] and not (key == "" and operator == "Exists"):
        return False
    if toleration.get("effect", "") not in ("", GPU_TAINT["effect"]):
        return False
    return operator == "Exists" or toleration.get("value", "") == GPU_TAINT["value"]


def check_gpu_pods_select_gpu_nodes(resource_type: str, inputs: Mapping[str, Any], context: RuleContext) -> list[str]:
    messages = []
    for role, pod_spec in _pod_specs(resource_type, inputs):
        subject = _subject(resource_type, inputs, context) + (f" ({role} pods)" if role else "")
        messages += _gpu_pod_placement(subject, pod_spec)
    return messages


def _gpu_pod_placement(subject: str, pod_spec: Mapping[str, Any]) -> list[str]:
    if not any(_requests_gpu(c) for c in _containers(pod_spec)):
        return []
    messages = []
    if not _selects_gpu_nodes(pod_spec):
        messages.append(
            f"{subject} requests {GPU_RESOURCE} but has no nodeSelector or required node affinity on a GPU node "
            "label (nvidia.com/gpu.*, llm-serving/node-group), so it may land on another GPU type that cannot "
            "hold the model; select the GPU node group (GpuNodeGroup's node_selector)."
        )
    if not any(_tolerates_gpu_taint(t) for t in _list(pod_spec.get("tolerations")) if isinstance(t, Mapping)):
        messages.append(
            f"{subject} requests {GPU_RESOURCE} but does not tolerate the GPU nodes' taint "
            "nvidia.com/gpu=true:NoSchedule, so it stays Pending; add the toleration "
            "{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}."
        )
    return messages


# --------------------------------------------------------------------------------------------
# 3. probes-present-lenient-liveness

_PROBE_WHY = {
    "startupProbe": "without it liveness checks start while the weights load and kill the pod in a loop",
    "readinessProbe": "without it the pod receives requests before the engine is warm",
    "livenessProbe": "without it a hung engine keeps its endpoint and its requests forever",
}


def check_probes_present_lenient_liveness(
    resource_type: str, inputs: Mapping[str, Any], context: RuleContext
) -> list[str]:
    subject = _subject(resource_type, inputs, context)
    messages: list[str] = []
    if resource_type in (JOB, CRON_JOB):
        # A run-to-completion GPU pod (the compile cache's producer) holds no endpoint and no requests; its
        # activeDeadlineSeconds bounds a hung engine instead.
        return messages
    # A LeaderWorkerSet's workers run headless ranks with no HTTP server: the leader's probes stand for
    # the group (and LeaderWorkerSet recreates the group when any of its pods restarts).
    serving = [c for role, spec in _pod_specs(resource_type, inputs) if role != "worker" for c in _containers(spec)]
    for container in serving:
        if not _requests_gpu(container):
            continue
        where = _where(subject, container)
        for probe, why in _PROBE_WHY.items():
            if not isinstance(container.get(probe), Mapping):
                messages.append(f"{where}: no {probe}; {why}. Add one on /health.")
        liveness = _map(container.get("livenessProbe"))
        if liveness:
            if _seconds(liveness, "timeoutSeconds") < MIN_LIVENESS_TIMEOUT_SECONDS:
                messages.append(
                    f"{where}: livenessProbe.timeoutSeconds is {_shown(liveness, 'timeoutSeconds', '1')}; an "
                    "engine at full load answers /health slowly, and a short timeout restarts busy pods. Set "
                    f"timeoutSeconds >= {MIN_LIVENESS_TIMEOUT_SECONDS}."
                )
            period, failures = _seconds(liveness, "periodSeconds"), _seconds(liveness, "failureThreshold")
            if period * failures < MIN_LIVENESS_WINDOW_SECONDS:
                messages.append(
                    f"{where}: livenessProbe gives up after {period * failures} s (periodSeconds {period} x "
                    f"failureThreshold {failures}); a load spike that long restarts serving pods and turns into "
                    f"an outage. Make periodSeconds x failureThreshold >= {MIN_LIVENESS_WINDOW_SECONDS}."
                )
        startup = _map(container.get("startupProbe"))
        if startup:
            delay = _seconds(startup, "initialDelaySeconds")
            period, failures = _seconds(startup, "periodSeconds"), _seconds(startup, "failureThreshold")
            budget = delay + period * failures
            if budget < MIN_STARTUP_BUDGET_SECONDS:
                messages.append(
                    f"{where}: startupProbe allows {budget} s (initialDelaySeconds {delay} + periodSeconds {period} "
                    f"x failureThreshold {failures}) to load weights and capture graphs; a slow load is killed and "
                    f"restarted forever. Allow >= {MIN_STARTUP_BUDGET_SECONDS} s (the capacity planner's budget)."
                )
    return messages


# --------------------------------------------------------------------------------------------
# 4. no-privileged-containers


def check_no_privileged_containers(resource_type: str, inputs: Mapping[str, Any], context: RuleContext) -> list[str]:
    subject = _subject(resource_type, inputs, context)
    messages = []
    for container in _all_containers(resource_type, inputs):
        where = _where(subject, container)
        security = _map(container.get("securityContext"))
        if security.get("privileged") is True:
            messages.append(
                f"{where}: securityContext.privileged is true, which gives the container the node's devices and "
                "kernel; remove it (GPUs come from the NVIDIA device plugin, not from privilege)."
            )
        if security.get("allowPrivilegeEscalation") is not False:
            shown = _shown(security, "allowPrivilegeEscalation", "true")
            messages.append(
                f"{where}: securityContext.allowPrivilegeEscalation is {shown}; set it to false so a setuid "
                "binary cannot gain root inside the container."
            )
    return messages


# --------------------------------------------------------------------------------------------
# 5. requests-and-limits-set

_RESOURCE_WHY = {
    ("requests", "memory"): "the scheduler reserves no memory for it and it is evicted first under pressure",
    ("limits", "memory"): "one container can then take the node's memory and get other pods OOM-killed",
    ("requests", "cpu"): "it then gets only CPU left over by others, which starves tokenisation and HTTP",
}


def check_requests_and_limits_set(resource_type: str, inputs: Mapping[str, Any], context: RuleContext) -> list[str]:
    subject = _subject(resource_type, inputs, context)
    messages = []
    for container in _all_containers(resource_type, inputs):
        where = _where(subject, container)
        resources = _map(container.get("resources"))
        for (part, resource), why in _RESOURCE_WHY.items():
            if resource not in _map(resources.get(part)):
                messages.append(f"{where}: resources.{part}.{resource} is not set; {why}. Set it.")
        if _requests_gpu(container) and GPU_RESOURCE not in _map(resources.get("limits")):
            messages.append(
                f"{where}: requests {GPU_RESOURCE} without resources.limits['{GPU_RESOURCE}']; Kubernetes only "
                "accepts extended resources in limits. Set the limit to the GPU count."
            )
    return messages


# --------------------------------------------------------------------------------------------
# 6. no-plaintext-secrets

# Whole words of an env var name: HF_TOKEN and VLLM_API_KEY, not TOKENIZER_REVISION.
SECRET_ENV_NAME = re.compile(r"(?i)(?:^|_)(?:token|key|secret|password|passwd|apikey)s?(?:$|_)")
# Names of a file or directory that holds a credential (HF_TOKEN_PATH): the value is a path, and the
# credential itself sits in a mounted Secret, which is what the rule asks for.
SECRET_PATH_ENV_NAME = re.compile(r"(?i)_(?:path|file|dir)$")
SECRET_DATA_KEY = re.compile(
    r"(?i)(?:^|[-_.])(?:token|password|passwd|secret|api[-_]?key|access[-_]?key|private[-_]?key)s?(?:$|[-_.])"
)
CREDENTIAL_VALUES = (
    (re.compile(r"\bhf_[A-Za-z0-9]{30,}"), "a Hugging Face token"),
    (re.compile(r"\bsk-[A-Za-z0-9_-]{20,}"), "an API secret key (sk-...)"),
    (re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), "an AWS access key id"),
    (re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"), "a private key"),
)
_USE_A_SECRET = "use a Kubernetes Secret built from a Pulumi secret (pulumi config set --secret)"


def _credential(value: Any) -> str | None:
    if isinstance(value, str):
        for pattern, label in CREDENTIAL_VALUES:
            if pattern.search(value):
                return label
    return None


def check_no_plaintext_secrets(resource_type: str, inputs: Mapping[str, Any], context: RuleContext) -> list[str]:
    subject = _subject(resource_type, inputs, context)
    messages = []
    if resource_type == CONFIG_MAP:
        for field in ("data", "binaryData"):
            for key, value in _map(inputs.get(field)).items():
                if SECRET_DATA_KEY.search(key):
                    messages.append(
                        f"{subject}: {field} key {key} names a credential, and ConfigMaps are neither encrypted nor "
                        f"access-restricted like Secrets; {_USE_A_SECRET}."
                    )
                elif label := _credential(value):
                    messages.append(f"{subject}: {field}[{key}] contains what looks like {label}; {_USE_A_SECRET}.")
        return messages
    if resource_type == SECRET:
        if not context.secrets_visible:
            return []  # the policy pack receives secrets as plain text and cannot tell them apart
        for field in ("stringData", "data"):
            for key, value in _map(inputs.get(field)).items():
                if value != RENDERED_SECRET:
                    messages.append(
                        f"{subject}: {field}[{key}] is not a Pulumi secret, so it is stored in plain text in the "
                        "stack state and shown in previews; build it from pulumi.Config().require_secret() or wrap "
                        "it in pulumi.Output.secret()."
                    )
        return messages
    for container in _all_containers(resource_type, inputs):
        where = _where(subject, container)
        for env in _list(container.get("env")):
            if not isinstance(env, Mapping) or "value" not in env:
                continue
            name = env.get("name", "?")
            if SECRET_ENV_NAME.search(str(name)) and not SECRET_PATH_ENV_NAME.search(str(name)):
                messages.append(
                    f"{where}: env {name} is set as a plain value, readable by anyone who can read the "
                    f"{_kind(resource_type)} and stored in the stack state; use valueFrom.secretKeyRef and "
                    f"{_USE_A_SECRET}."
                )
            elif label := _credential(env["value"]):
                messages.append(f"{where}: env {name} holds what looks like {label}; use valueFrom.secretKeyRef and "
                                f"{_USE_A_SECRET}.")
    return messages


# --------------------------------------------------------------------------------------------
# 7. weights-retained-and-protected-in-prod


def check_weights_retained_and_protected_in_prod(
    resource_type: str, inputs: Mapping[str, Any], context: RuleContext
) -> list[str]:
    labels = _map(_dig(inputs, "metadata", "labels"))
    if labels.get("app.kubernetes.io/component") != WEIGHTS_COMPONENT:
        return []
    subject = _subject(resource_type, inputs, context)
    messages = []
    # None: the caller cannot see the option (the policy pack); the offline render checks it.
    if context.retain_on_delete is False:
        messages.append(
            f"{subject} holds model weights without retainOnDelete; a destroy or a replacement would delete the "
            "volume and force a re-download of hundreds of GiB before serving resumes. Set retain_on_delete=True."
        )
    if context.environment == "prod" and not context.protect:
        messages.append(
            f"{subject} holds prod model weights without protect; a mistaken change could delete the volume prod "
            "serves from. Set protect=True in prod."
        )
    return messages


# --------------------------------------------------------------------------------------------
# 8. edge-non-buffering

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(h|ms|m|s)")
_UNIT_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def duration_seconds(value: Any) -> float | None:
    """Gateway API / Envoy Gateway durations ("0s", "1h30m", "500ms"); None when not one."""
    if not isinstance(value, str) or not value:
        return None
    parts = _DURATION_PART.findall(value)
    if "".join(n + u for n, u in parts) != value:
        return None
    return sum(float(n) * _UNIT_SECONDS[u] for n, u in parts)


def _long_enough(value: Any) -> bool:
    seconds = duration_seconds(value)
    return seconds is not None and (seconds == 0 or seconds >= MIN_STREAM_TIMEOUT_SECONDS)


_TIMEOUT_RULE = f'"0s" (no limit) or >= {MIN_STREAM_TIMEOUT_SECONDS}s'


def _ingress_checks(subject: str, inputs: Mapping[str, Any]) -> list[str]:
    annotations = _map(_dig(inputs, "metadata", "annotations"))
    ingress_class = str(_dig(inputs, "spec", "ingressClassName") or annotations.get("kubernetes.io/ingress.class", ""))
    messages = []
    if "nginx" in ingress_class or any(str(k).startswith("nginx.ingress.kubernetes.io/") for k in annotations):
        for option, why in (
            ("proxy-buffering", "buffered responses reach the client all at once instead of token by token"),
            ("proxy-request-buffering", "nginx holds the whole prompt before vLLM sees a byte, delaying prefill"),
        ):
            key = f"nginx.ingress.kubernetes.io/{option}"
            if annotations.get(key) != "off":
                messages.append(f'{subject}: {key} is {_shown(annotations, key, "on")}; {why}. Set it to "off".')
    if ingress_class == "alb" or any(str(k).startswith("alb.ingress.kubernetes.io/") for k in annotations):
        attributes = dict(
            item.split("=", 1) for item in
            str(annotations.get("alb.ingress.kubernetes.io/load-balancer-attributes", "")).split(",") if "=" in item
        )
        idle = attributes.get("idle_timeout.timeout_seconds", "").strip()
        if not idle.isdigit() or int(idle) < MIN_STREAM_TIMEOUT_SECONDS:
            shown = idle or f"unset (default {ALB_DEFAULT_IDLE_SECONDS})"
            messages.append(
                f"{subject}: the ALB idle_timeout.timeout_seconds is {shown}; the ALB closes a response that is "
                "silent that long, which cuts queued and non-streamed generations. Set it to >= "
                f"{MIN_STREAM_TIMEOUT_SECONDS} in alb.ingress.kubernetes.io/load-balancer-attributes."
            )
    return messages


def check_edge_non_buffering(resource_type: str, inputs: Mapping[str, Any], context: RuleContext) -> list[str]:
    subject = _subject(resource_type, inputs, context)
    spec = _map(inputs.get("spec"))
    if resource_type == INGRESS:
        return _ingress_checks(subject, inputs)
    if resource_type == INFERENCE_POOL:
        mode = _map(_dig(inputs, "metadata", "annotations")).get(BODY_MODE_ANNOTATION)
        if str(mode).lower() == "buffered":
            return [f"{subject}: {BODY_MODE_ANNOTATION} is buffered; the gateway then holds each whole response "
                    "in the endpoint picker's filter, so no token reaches the client before the last. Set it to "
                    "duplex."]
        return []
    messages = []
    if resource_type == BACKEND_TRAFFIC_POLICY:
        if "requestBuffer" in spec:
            messages.append(f"{subject} sets spec.requestBuffer; buffering the request delays prefill and breaks "
                            "streaming uploads. Remove it.")
        retry = _map(spec.get("retry"))
        if retry.get("numRetries") != 0:
            messages.append(
                f"{subject}: spec.retry.numRetries is {retry.get('numRetries', 'unset')}; a retried POST "
                "re-runs the whole generation and can send the client a second stream. Set it to 0 explicitly."
            )
        timeout = _dig(spec, "timeout", "http", "requestTimeout")
        if timeout is not None and not _long_enough(timeout):
            messages.append(f"{subject}: spec.timeout.http.requestTimeout is {timeout}; it overrides the route's "
                            f"timeout and cuts long generations. Set {_TIMEOUT_RULE}.")
        return messages
    for index, rule in enumerate(_list(spec.get("rules"))):
        if not _list(_map(rule).get("backendRefs")):
            continue  # a rule without a backend answers itself (a direct response): no generation to cut
        timeouts = _map(_map(rule).get("timeouts"))
        if not _long_enough(timeouts.get("request")):
            default = (f"{AI_GATEWAY_DEFAULT_REQUEST_TIMEOUT} in Envoy AI Gateway" if resource_type == AI_GATEWAY_ROUTE
                       else f"{ENVOY_GATEWAY_DEFAULT_REQUEST_TIMEOUT} in Envoy Gateway")
            shown = _shown(timeouts, "request", default)
            messages.append(f"{subject} rule {index}: timeouts.request is {shown}, which cuts every longer "
                            f"generation. Set {_TIMEOUT_RULE}.")
        if "backendRequest" in timeouts and not _long_enough(timeouts["backendRequest"]):
            messages.append(f"{subject} rule {index}: timeouts.backendRequest is {timeouts['backendRequest']}, "
                            f"which cuts every longer generation. Set {_TIMEOUT_RULE}.")
    return messages


# --------------------------------------------------------------------------------------------
# 9. autoscaling-not-on-utilisation

UTILISATION_RESOURCES = ("cpu", "memory")
GPU_UTIL_METRIC = re.compile(r"(?i)DCGM_FI_DEV_GPU_UTIL|gpu[-_.:]?util")
_SCALE_ON_QUEUE = "scale on queue depth (vllm:num_requests_waiting) and KV-cache usage instead"
_GPU_UTIL_WHY = "GPU utilisation reaches 100 % with a single request, so it cannot tell load apart"


def check_autoscaling_not_on_utilisation(
    resource_type: str, inputs: Mapping[str, Any], context: RuleContext
) -> list[str]:
    subject = _subject(resource_type, inputs, context)
    spec = _map(inputs.get("spec"))
    messages = []
    if resource_type == SCALED_OBJECT:
        for index, trigger in enumerate(_list(spec.get("triggers"))):
            trigger = _map(trigger)
            name = trigger.get("name") or f"#{index}"
            if trigger.get("type") in UTILISATION_RESOURCES:
                messages.append(f"{subject} trigger {name}: type {trigger['type']} scales on utilisation, which "
                                f"says nothing about an LLM server's load; {_SCALE_ON_QUEUE}.")
            if any(GPU_UTIL_METRIC.search(str(v)) for v in _map(trigger.get("metadata")).values()):
                messages.append(f"{subject} trigger {name}: its query uses GPU utilisation; {_GPU_UTIL_WHY}; "
                                f"{_SCALE_ON_QUEUE}.")
        return messages
    if resource_type == HPA_V1:
        if "targetCPUUtilizationPercentage" in spec:
            messages.append(f"{subject}: targetCPUUtilizationPercentage scales on CPU, which says nothing about an "
                            f"LLM server's load; {_SCALE_ON_QUEUE}.")
        return messages
    for index, metric in enumerate(_list(spec.get("metrics"))):
        metric = _map(metric)
        kind = metric.get("type")
        if kind in ("Resource", "ContainerResource"):
            resource = _dig(metric, "resource" if kind == "Resource" else "containerResource", "name")
            if resource in UTILISATION_RESOURCES:
                messages.append(f"{subject} metric {index}: {kind} {resource} scales on utilisation, which says "
                                f"nothing about an LLM server's load; {_SCALE_ON_QUEUE}.")
        for source in ("pods", "object", "external"):
            name = _dig(metric, source, "metric", "name")
            if name and GPU_UTIL_METRIC.search(str(name)):
                messages.append(f"{subject} metric {index}: {name} is GPU utilisation; {_GPU_UTIL_WHY}; "
                                f"{_SCALE_ON_QUEUE}.")
    return messages


# --------------------------------------------------------------------------------------------
# 10. namespaces-enforce-pod-security

# Mirrors llm_serving/platform/pod_security.py; tests/policies/test_rules.py keeps them equal.
POD_SECURITY_LEVELS = ("restricted", "baseline", "privileged")
POD_SECURITY_LABEL_PREFIX = "pod-security.kubernetes.io"
POD_SECURITY_REASON_ANNOTATION = "llm-serving/pod-security-reason"


def check_namespaces_enforce_pod_security(
    resource_type: str, inputs: Mapping[str, Any], context: RuleContext
) -> list[str]:
    subject = _subject(resource_type, inputs, context)
    labels = _map(_dig(inputs, "metadata", "labels"))
    annotations = _map(_dig(inputs, "metadata", "annotations"))
    levels = ", ".join(POD_SECURITY_LEVELS)
    messages = []
    enforce = labels.get(f"{POD_SECURITY_LABEL_PREFIX}/enforce")
    if enforce not in POD_SECURITY_LEVELS:
        shown = "unset" if enforce is None else repr(enforce)
        messages.append(
            f"{subject}: label {POD_SECURITY_LABEL_PREFIX}/enforce is {shown}, so the namespace admits privileged "
            f"pods that nobody reviewed; set it to one of {levels} (restricted unless a pod needs more)."
        )
    elif enforce != "restricted" and not str(annotations.get(POD_SECURITY_REASON_ANNOTATION, "")).strip():
        messages.append(
            f"{subject}: enforces Pod Security level {enforce} without annotation {POD_SECURITY_REASON_ANNOTATION}; "
            "say which pod needs more than restricted and why, so the next reviewer can tell whether it still does."
        )
    for mode, where in (("warn", "kubectl warnings"), ("audit", "the audit log")):
        value = labels.get(f"{POD_SECURITY_LABEL_PREFIX}/{mode}")
        if value != "restricted":
            shown = "unset" if value is None else repr(value)
            messages.append(
                f"{subject}: label {POD_SECURITY_LABEL_PREFIX}/{mode} is {shown}; set it to restricted so every pod "
                f"that needs more than the restricted profile shows up in {where}."
            )
    return messages


def check_eks_cluster_hardened(resource_type: str, inputs: Mapping[str, Any], context: RuleContext) -> list[str]:
    subject = f"EKS cluster {inputs.get('name', context.name)}"
    messages = []
    encrypted = _list(_dig(inputs, "encryptionConfig", "resources"))
    if "secrets" not in encrypted or not _dig(inputs, "encryptionConfig", "provider", "keyArn"):
        messages.append(f"{subject}: Secrets are not envelope-encrypted with a KMS key (encryptionConfig); API keys "
                        "and tokens would sit in etcd under EKS's default encryption only.")
    mode = _dig(inputs, "accessConfig", "authenticationMode")
    if mode != "API":
        messages.append(f"{subject}: authenticationMode is {mode or 'unset'}; use API, so access is granted only by "
                        "access entries in state and never by the aws-auth ConfigMap.")
    if _dig(inputs, "accessConfig", "bootstrapClusterCreatorAdminPermissions") is not False:
        messages.append(f"{subject}: bootstrapClusterCreatorAdminPermissions is not false; the creator's admin "
                        "access would be an invisible side effect instead of a reviewed access entry.")
    missing = [t for t in REQUIRED_CONTROL_PLANE_LOGS if t not in _list(inputs.get("enabledClusterLogTypes"))]
    if missing:
        messages.append(f"{subject}: control-plane logs {', '.join(missing)} are off; an incident review needs them.")
    if _dig(inputs, "vpcConfig", "endpointPrivateAccess") is not True:
        messages.append(f"{subject}: the private API endpoint is off, so nodes reach the API over the internet.")
    return messages


# --------------------------------------------------------------------------------------------
# The rule table

RULES: list[Rule] = [
    Rule("images-pinned",
         "Container images carry a release tag, never 'latest' (Helm values image.tag too).",
         "mandatory", check_images_pinned, (*WORKLOADS, HELM_RELEASE)),
    Rule("images-digest-pinned",
         "In prod and staging, container images are also pinned by digest (@sha256:...): the charts' images "
         "(Helm values) and the Envoy proxy's included.",
         "mandatory", check_images_digest_pinned, (*WORKLOADS, HELM_RELEASE, ENVOY_PROXY)),
    Rule("gpu-pods-select-gpu-nodes",
         "Pods requesting nvidia.com/gpu select GPU nodes and tolerate the nvidia.com/gpu NoSchedule taint.",
         "mandatory", check_gpu_pods_select_gpu_nodes, WORKLOADS),
    Rule("probes-present-lenient-liveness",
         "GPU containers have startup, readiness and liveness probes; liveness is lenient (timeout >= 10 s, "
         ">= 90 s of failures) and the startup budget is >= 600 s.",
         "mandatory", check_probes_present_lenient_liveness, WORKLOADS),
    Rule("no-privileged-containers",
         "Containers we declare are not privileged and set allowPrivilegeEscalation: false.",
         "mandatory", check_no_privileged_containers, WORKLOADS),
    Rule("requests-and-limits-set",
         "Containers we declare set memory requests and limits and CPU requests; GPU containers set "
         "nvidia.com/gpu in limits.",
         "mandatory", check_requests_and_limits_set, WORKLOADS),
    Rule("no-plaintext-secrets",
         "Credentials live in Kubernetes Secrets built from Pulumi secrets: never in env values or ConfigMaps.",
         "mandatory", check_no_plaintext_secrets, (*WORKLOADS, CONFIG_MAP, SECRET)),
    Rule("weights-retained-and-protected-in-prod",
         "Model-weights PVCs are retained on delete, and protected in prod.",
         "mandatory", check_weights_retained_and_protected_in_prod, (PVC,)),
    Rule("edge-non-buffering",
         "The edge never buffers a request or response and never cuts or retries a long generation.",
         "mandatory", check_edge_non_buffering,
         (INGRESS, *HTTP_ROUTES, AI_GATEWAY_ROUTE, BACKEND_TRAFFIC_POLICY, INFERENCE_POOL)),
    Rule("autoscaling-not-on-utilisation",
         "Autoscalers scale on queue depth and KV-cache usage, never on CPU, memory or GPU utilisation.",
         "mandatory", check_autoscaling_not_on_utilisation, (SCALED_OBJECT, HPA_V2, HPA_V1)),
    Rule("namespaces-enforce-pod-security",
         "Namespaces enforce a Pod Security level (below restricted only with a reason annotation) and warn and "
         "audit at restricted.",
         "mandatory", check_namespaces_enforce_pod_security, (NAMESPACE,)),
    Rule("eks-cluster-hardened",
         "An EKS cluster the program creates encrypts Secrets with a KMS key, authenticates through access entries "
         "only (API mode, no creator bootstrap), logs api, audit and authenticator, and keeps the private endpoint.",
         "mandatory", check_eks_cluster_hardened, (EKS_CLUSTER,)),
]


def violations(result: Any, environment: str | None = None, rules: list[Rule] = RULES) -> dict[str, list[str]]:
    """Rule name -> messages over an offline render (`.resources`, `.wiring`); every rule has a key.

    `environment` defaults to `result.environment`; the render does not carry the stack's config.
    """
    environment = environment or getattr(result, "environment", None)
    if environment not in ENVIRONMENTS:
        raise ValueError(f"environment must be one of {', '.join(ENVIRONMENTS)}, got {environment!r}")
    wiring: Mapping[str, Mapping[str, Any]] = getattr(result, "wiring", {}) or {}
    found: dict[str, list[str]] = {rule.name: [] for rule in rules}
    for resource in result.resources:
        options = wiring.get(f"{resource['type']}::{resource['name']}", {})
        context = RuleContext(
            environment=environment,
            name=resource["name"],
            protect=bool(options.get("protect", False)),
            retain_on_delete=bool(options.get("retainOnDelete", False)),
        )
        for rule in rules:
            if rule.applies_to(resource["type"]):
                found[rule.name] += rule.check(resource["type"], resource["inputs"], context)
    return found
