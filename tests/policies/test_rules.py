"""Tests for policies/rules.py: every rule on a compliant, a non-compliant and a missing-property input.

Messages are pinned exactly, since they are what a reviewer reads in a failed preview. The edge and
autoscaling generators of llm_serving/ are run through the rules too, for the modes no stack renders.

Length: every rule on a compliant, a non-compliant and a missing-property input.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from llm_serving.edge import EdgeAuth, LoadBalancerScheme
from llm_serving.edge import objects as edge_objects
from llm_serving.platform import pod_security
from llm_serving.scaling import objects as autoscaling
from llm_serving.serving import capacity
from llm_serving.serving import engine as vllm_engine
from policies import rules
from policies.rules import RuleContext

GPU = "nvidia.com/gpu"
DEV = RuleContext(environment="dev", name="pulumi-name")
PROD = RuleContext(environment="prod", name="pulumi-name")
DEPLOYMENT, JOB, CRON_JOB = rules.DEPLOYMENT, rules.JOB, rules.CRON_JOB
WHERE = "Deployment llm-serving/llama container vllm"
VLLM_IMAGE = "vllm/vllm-openai:v0.33.0"
DIGEST = "sha256:" + "ab" * 32


def gpu_container(**changes: Any) -> dict[str, Any]:
    """A vLLM container as VllmDeployment declares it; `changes` replace or (value None) drop fields."""
    container: dict[str, Any] = {
        "name": "vllm",
        "image": VLLM_IMAGE,
        "securityContext": {"privileged": False, "allowPrivilegeEscalation": False},
        "resources": {"requests": {"cpu": "8", "memory": "64Gi", GPU: "1"}, "limits": {"memory": "64Gi", GPU: "1"}},
        "startupProbe": {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 10, "failureThreshold": 60},
        "readinessProbe": {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 5},
        "livenessProbe": {"httpGet": {"path": "/health", "port": "http"}, "timeoutSeconds": 10, "periodSeconds": 15,
                          "failureThreshold": 6},
        "env": [{"name": "VLLM_API_KEY", "valueFrom": {"secretKeyRef": {"name": "vllm-api-key", "key": "api-key"}}}],
    }
    for key, value in changes.items():
        if value is None:
            container.pop(key, None)
        else:
            container[key] = value
    return container


GPU_SCHEDULING = {
    "nodeSelector": {"llm-serving/node-group": "gpu-p5-48xlarge", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
    "tolerations": [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}],
}


def deployment(*containers: dict[str, Any], pod: dict[str, Any] | None = None) -> dict[str, Any]:
    pod_spec = dict(GPU_SCHEDULING if pod is None else pod)
    pod_spec["containers"] = list(containers) or [gpu_container()]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "llama", "namespace": "llm-serving"},
        "spec": {"template": {"spec": pod_spec}},
    }


def check(rule_name: str, resource_type: str, inputs: dict[str, Any], context: RuleContext = DEV) -> list[str]:
    (rule,) = [r for r in rules.RULES if r.name == rule_name]
    assert rule.applies_to(resource_type), f"{rule_name} does not apply to {resource_type}"
    return rule.check(resource_type, inputs, context)


# --------------------------------------------------------------------------------------------
# The table and the shared pieces


def test_rule_table_names_levels_and_descriptions():
    assert [(r.name, r.enforcement) for r in rules.RULES] == [
        ("images-pinned", "mandatory"),
        ("images-digest-pinned", "mandatory"),
        ("gpu-pods-select-gpu-nodes", "mandatory"),
        ("probes-present-lenient-liveness", "mandatory"),
        ("no-privileged-containers", "mandatory"),
        ("requests-and-limits-set", "mandatory"),
        ("no-plaintext-secrets", "mandatory"),
        ("weights-retained-and-protected-in-prod", "mandatory"),
        ("edge-non-buffering", "mandatory"),
        ("autoscaling-not-on-utilisation", "mandatory"),
        ("namespaces-enforce-pod-security", "mandatory"),
        ("eks-cluster-hardened", "mandatory"),
    ]
    for rule in rules.RULES:
        assert rule.description.endswith(".") and rule.resource_types
        assert rule.check.__name__ == "check_" + rule.name.replace("-", "_")


def test_thresholds_match_what_the_program_generates():
    # The pack ships without llm_serving/, so rules.py repeats these numbers; they must not drift apart.
    assert rules.MIN_STARTUP_BUDGET_SECONDS == capacity.MIN_STARTUP_BUDGET_SECONDS
    probes = vllm_engine.probes(capacity.MIN_STARTUP_BUDGET_SECONDS)
    assert rules.MIN_LIVENESS_TIMEOUT_SECONDS == probes.liveness_timeout_seconds
    assert rules.MIN_LIVENESS_WINDOW_SECONDS == probes.liveness_window_seconds
    assert probes.startup_budget_seconds >= rules.MIN_STARTUP_BUDGET_SECONDS
    assert rules.POD_SECURITY_LEVELS == pod_security.LEVELS
    assert rules.POD_SECURITY_LABEL_PREFIX == pod_security.LABEL_PREFIX
    assert rules.POD_SECURITY_REASON_ANNOTATION == pod_security.POD_SECURITY_REASON_ANNOTATION


@pytest.mark.parametrize(("configured", "stack", "expected"), [
    ("staging", "anything", "staging"),
    (None, "dev", "dev"),
    (None, "feature-x", "prod"),  # unknown: the strictest rules
    ("qa", None, "prod"),
])
def test_environment_comes_from_config_then_stack_name_else_prod(configured, stack, expected):
    assert rules.resolve_environment(configured, stack) == expected


@pytest.mark.parametrize(("text", "seconds"), [
    ("0s", 0), ("600s", 600), ("1h", 3600), ("1h30m", 5400), ("500ms", 0.5), ("10m0s", 600),
    ("", None), ("600", None), ("ten", None), (600, None),
])
def test_gateway_durations(text, seconds):
    assert rules.duration_seconds(text) == seconds


def test_violations_maps_every_rule_and_reads_options_from_the_wiring():
    pvc = {"kind": "PersistentVolumeClaim", "metadata": {"name": "w", "namespace": "ns",
                                                         "labels": {"app.kubernetes.io/component": "weights"}}}

    class Render:
        resources = [{"type": rules.PVC, "name": "w-claim", "inputs": pvc}]
        wiring = {f"{rules.PVC}::w-claim": {"protect": True, "retainOnDelete": True}}

    assert rules.violations(Render(), "prod") == {r.name: [] for r in rules.RULES}
    Render.wiring = {}
    found = rules.violations(Render(), "prod")["weights-retained-and-protected-in-prod"]
    assert [m.split(";")[0] for m in found] == [
        "PersistentVolumeClaim ns/w holds model weights without retainOnDelete",
        "PersistentVolumeClaim ns/w holds prod model weights without protect",
    ]
    with pytest.raises(ValueError, match="environment must be one of dev, staging, prod, got None"):
        rules.violations(Render())


# --------------------------------------------------------------------------------------------
# 1. images-pinned, images-digest-pinned


@pytest.mark.parametrize("image", [VLLM_IMAGE, f"{VLLM_IMAGE}@{DIGEST}", f"vllm/vllm-openai@{DIGEST}",
                                   "registry.example.com:5000/vllm/vllm-openai:v0.33.0"])
def test_images_pinned_accepts_a_tag_or_a_digest(image):
    assert check("images-pinned", DEPLOYMENT, deployment(gpu_container(image=image))) == []


def test_images_pinned_refuses_latest_and_untagged_images_in_every_container():
    cron_job = {"metadata": {"name": "sweep"}, "spec": {"jobTemplate": {"spec": {"template": {"spec": {
        "initContainers": [{"name": "init", "image": "busybox:latest"}],
        "containers": [{"name": "main", "image": "registry.example.com:5000/tools"}],
    }}}}}}
    assert check("images-pinned", CRON_JOB, cron_job) == [
        "CronJob sweep container init: image busybox:latest uses the moving tag 'latest', so nodes can run different "
        "builds and a rollback cannot return to the old one; pin a release tag (and in prod a digest).",
        "CronJob sweep container main: image registry.example.com:5000/tools has no tag, so each node pulls whatever "
        "'latest' is at that moment; pin a release tag (and in prod a digest).",
    ]


def test_images_pinned_refuses_a_container_without_image_and_ignores_a_manifest_without_pods():
    assert check("images-pinned", DEPLOYMENT, deployment(gpu_container(image=None))) == [
        f"{WHERE}: no image is set, so the runtime default decides what runs; set repository:tag."
    ]
    assert check("images-pinned", DEPLOYMENT, {"metadata": {"name": "empty"}}) == []


def test_images_pinned_reads_helm_values_image_tags_at_any_depth():
    release = {"name": "nvidia-device-plugin", "values": {
        "image": {"tag": "v0.20.0"},
        "nfd": {"worker": {"image": {"repository": "nfd", "tag": "latest"}}},
        "tolerations": [{"image": {"tag": "latest"}}],
    }}
    assert check("images-pinned", rules.HELM_RELEASE, release) == [
        "Helm release nvidia-device-plugin: values.nfd.worker.image.tag is 'latest', a moving image; set a release "
        "tag, or leave it out so the chart's pinned appVersion is used",
        "Helm release nvidia-device-plugin: values.tolerations[0].image.tag is 'latest', a moving image; set a "
        "release tag, or leave it out so the chart's pinned appVersion is used",
    ]
    assert check("images-pinned", rules.HELM_RELEASE, {"name": "keda", "values": {"crds": {"install": True}}}) == []
    assert check("images-pinned", rules.HELM_RELEASE, {}) == []


def test_digest_is_required_in_prod_and_staging():
    untagged = deployment(gpu_container(image=VLLM_IMAGE))
    for context in (PROD, RuleContext(environment="staging", name="pulumi-name")):
        assert check("images-digest-pinned", DEPLOYMENT, untagged, context) == [
            f"{WHERE}: image {VLLM_IMAGE} has no digest; a tag can be pushed again, so {context.environment} pulls "
            "exactly the build that was tested: for vLLM run `python -m stacks pin-images <stack> --write` "
            "(models[].image.digest)."
        ]
    assert check("images-digest-pinned", DEPLOYMENT, untagged, DEV) == []
    pinned = deployment(gpu_container(image=f"{VLLM_IMAGE}@{DIGEST}"))
    assert check("images-digest-pinned", DEPLOYMENT, pinned, PROD) == []
    # A missing image is images-pinned's finding, not this one's.
    assert check("images-digest-pinned", DEPLOYMENT, deployment(gpu_container(image=None)), PROD) == []


PIN = "run `python -m stacks pin-images <stack> --write` (chartImageDigests)."


def test_chart_image_keys_mirror_the_images_versions_lists():
    # The pack cannot import llm_serving: its table is a copy of versions.py's, key for key and form for form.
    from llm_serving.platform import versions

    assert rules.CHART_IMAGE_KEYS == {
        chart: tuple(dict.fromkeys((image.key, image.form.value) for image in pin.images))
        for chart, pin in versions.CHARTS.items()
    }
    assert rules.ENVOY_PROXY_WORKLOADS[0] == versions.ENVOY_PROXY_IMAGE.key.split(".")[3]


def test_a_chart_image_without_a_digest_fails_in_prod_and_names_the_command():
    gateway = {"name": "gateway-helm", "chart": "oci://docker.io/envoyproxy/gateway-helm", "version": "v1.9.0",
               "values": {"config": {}}}
    assert check("images-digest-pinned", rules.HELM_RELEASE, gateway, PROD) == [
        "Helm release gateway-helm: values global.images.envoyGateway.image is unset, so chart gateway-helm pulls "
        f"that image by tag; a tag can be pushed again, so prod pulls exactly the build that was tested: {PIN}"]
    assert check("images-digest-pinned", rules.HELM_RELEASE, gateway, DEV) == []
    gateway["values"] = {"global": {"images": {"envoyGateway": {
        "image": f"docker.io/envoyproxy/gateway:v1.9.0@{DIGEST}"}}}}
    assert check("images-digest-pinned", rules.HELM_RELEASE, gateway, PROD) == []


@pytest.mark.parametrize("key,form,pinned,unpinned", [
    ("image.tag", "tag", f"v0.20.0@{DIGEST}", "v0.20.0"),
    # kube-prometheus-stack and Grafana append `@sha256:` themselves: the hex alone, nothing else.
    ("prometheusOperator.image.sha", "sha", DIGEST.removeprefix("sha256:"), DIGEST),
    # kube-state-metrics and node-exporter append `@` only.
    ("prometheus-node-exporter.image.digest", "digest", DIGEST, DIGEST.removeprefix("sha256:")),
])
def test_each_chart_key_takes_the_digest_in_its_templates_form(key, form, pinned, unpinned):
    chart = {"tag": "nvidia-device-plugin", "sha": "kube-prometheus-stack", "digest": "kube-prometheus-stack"}[form]
    assert (key, form) in rules.CHART_IMAGE_KEYS[chart]

    def values(value: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        node = out
        for part in key.split(".")[:-1]:
            node = node.setdefault(part, {})
        node[key.split(".")[-1]] = value
        return out

    found = check("images-digest-pinned", rules.HELM_RELEASE, {"name": chart, "chart": chart,
                                                                  "values": values(pinned)}, PROD)
    assert not [m for m in found if f"values {key} " in m]
    found = check("images-digest-pinned", rules.HELM_RELEASE, {"name": chart, "chart": chart,
                                                                  "values": values(unpinned)}, PROD)
    assert f"Helm release {chart}: values {key} is '{unpinned}', so chart {chart} pulls that image by tag; a tag " \
           f"can be pushed again, so prod pulls exactly the build that was tested: {PIN}" in found


def test_a_chart_the_pack_does_not_know_fails_in_prod():
    release = {"name": "ingress-nginx", "chart": "ingress-nginx", "values": {"controller": {"image": {
        "digest": DIGEST}}}}
    assert check("images-digest-pinned", rules.HELM_RELEASE, release, PROD) == [
        "Helm release ingress-nginx: chart ingress-nginx is not in this pack's table of chart images "
        "(CHART_IMAGE_KEYS), so nothing shows that prod pulls its images by digest; list them in "
        "llm_serving/platform/versions.py and in the table."]
    # A chart of CRDs only runs no image.
    assert check("images-digest-pinned", rules.HELM_RELEASE, {"name": "ai-gateway-crds-helm", "chart":
                 "oci://docker.io/envoyproxy/ai-gateway-crds-helm", "values": {}}, PROD) == []


def _envoy_proxy(container: dict[str, Any] | None) -> dict[str, Any]:
    settings = edge_objects.EdgeSettings(
        namespace="envoy-gateway-system", gateway_name="llm-serving", tls_secret_name="tls", cert_manager_issuer=None,
        load_balancer_scheme=LoadBalancerScheme.INTERNET_FACING, auth=EdgeAuth.VLLM_API_KEY, api_key_secret="keys",
        jwt_issuer=None, jwt_jwks_uri=None, jwt_audiences=(), acm_certificate_arn=None, alb_idle_timeout_seconds=60,
        proxy_image=(container or {}).get("image"))
    route = edge_objects.Route("llama", "llm-serving", 8000, "llm.example.com", "/", 600, 300, 8 * 1024**2, 600)
    (proxy,) = [o for o in edge_objects.gateway_objects(settings, [route]) if o["kind"] == "EnvoyProxy"]
    return proxy


def test_the_envoy_proxy_image_needs_a_digest_in_prod():
    subject = "EnvoyProxy envoy-gateway-system/llm-serving-proxy"
    tail = ("(spec.provider.kubernetes.envoyDeployment.container.image); they carry every request and enforce the "
            "edge's auth, and a tag can be pushed again, so prod pulls exactly the build that was tested: run "
            "`python -m stacks pin-images <stack> --write` (chartImageDigests, with the stack's own Envoy Gateway).")
    assert check("images-digest-pinned", rules.ENVOY_PROXY, _envoy_proxy(None), PROD) == [
        f"{subject}: the proxies run Envoy Gateway's built-in image, by tag {tail}"]
    tagged = "docker.io/envoyproxy/envoy:distroless-v1.39.0"
    assert check("images-digest-pinned", rules.ENVOY_PROXY, _envoy_proxy({"image": tagged}), PROD) == [
        f"{subject}: the proxies run image {tagged} {tail}"]
    assert check("images-digest-pinned", rules.ENVOY_PROXY, _envoy_proxy({"image": f"{tagged}@{DIGEST}"}), PROD) == []
    assert check("images-digest-pinned", rules.ENVOY_PROXY, _envoy_proxy(None), DEV) == []


# --------------------------------------------------------------------------------------------
# 2. gpu-pods-select-gpu-nodes

NO_SELECTOR = (
    "Deployment llm-serving/llama requests nvidia.com/gpu but has no nodeSelector or required node affinity on a "
    "GPU node label (nvidia.com/gpu.*, llm-serving/node-group), so it may land on another GPU type that cannot "
    "hold the model; select the GPU node group (GpuNodeGroup's node_selector)."
)
NO_TOLERATION = (
    "Deployment llm-serving/llama requests nvidia.com/gpu but does not tolerate the GPU nodes' taint "
    "nvidia.com/gpu=true:NoSchedule, so it stays Pending; add the toleration "
    "{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}."
)
GPU_AFFINITY = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
    {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-H100-80GB-HBM3"]}]},
]}}}


@pytest.mark.parametrize("pod", [
    GPU_SCHEDULING,
    {"affinity": GPU_AFFINITY, "tolerations": [{"operator": "Exists"}]},
    {"nodeSelector": {"nvidia.com/gpu.present": "true"},
     "tolerations": [{"key": GPU, "operator": "Equal", "value": "true", "effect": "NoSchedule"}]},
])
def test_gpu_pods_on_gpu_nodes_pass(pod):
    assert check("gpu-pods-select-gpu-nodes", DEPLOYMENT, deployment(pod=pod)) == []


@pytest.mark.parametrize("pod", [
    {"nodeSelector": {"kubernetes.io/os": "linux"}, "tolerations": GPU_SCHEDULING["tolerations"]},
    {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        *GPU_AFFINITY["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"],
        {"matchExpressions": [{"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}]},
    ]}}}, "tolerations": GPU_SCHEDULING["tolerations"]},
])
def test_gpu_pods_selecting_other_nodes_fail(pod):
    assert check("gpu-pods-select-gpu-nodes", DEPLOYMENT, deployment(pod=pod)) == [NO_SELECTOR]


@pytest.mark.parametrize("toleration", [
    {"key": GPU, "operator": "Exists", "effect": "NoExecute"},
    {"key": GPU, "operator": "Equal", "value": "present", "effect": "NoSchedule"},
    {"key": "dedicated", "operator": "Exists"},
])
def test_gpu_pods_with_a_toleration_that_misses_the_taint_fail(toleration):
    pod = {"nodeSelector": GPU_SCHEDULING["nodeSelector"], "tolerations": [toleration]}
    assert check("gpu-pods-select-gpu-nodes", DEPLOYMENT, deployment(pod=pod)) == [NO_TOLERATION]


def test_gpu_pod_without_scheduling_fields_fails_twice_and_cpu_pods_are_not_concerned():
    assert check("gpu-pods-select-gpu-nodes", DEPLOYMENT, deployment(pod={})) == [NO_SELECTOR, NO_TOLERATION]
    cpu_only = gpu_container(resources={"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "1Gi"}})
    assert check("gpu-pods-select-gpu-nodes", DEPLOYMENT, deployment(cpu_only, pod={})) == []


# --------------------------------------------------------------------------------------------
# 3. probes-present-lenient-liveness


def test_lenient_probes_pass():
    assert check("probes-present-lenient-liveness", DEPLOYMENT, deployment()) == []


def test_missing_probes_fail_with_the_reason_for_each():
    bare = gpu_container(startupProbe=None, readinessProbe=None, livenessProbe=None)
    assert check("probes-present-lenient-liveness", DEPLOYMENT, deployment(bare)) == [
        f"{WHERE}: no startupProbe; without it liveness checks start while the weights load and kill the pod in a "
        "loop. Add one on /health.",
        f"{WHERE}: no readinessProbe; without it the pod receives requests before the engine is warm. Add one on "
        "/health.",
        f"{WHERE}: no livenessProbe; without it a hung engine keeps its endpoint and its requests forever. Add one "
        "on /health.",
    ]
    # Only GPU (engine) containers must carry them.
    sidecar = {"name": "sidecar", "image": "busybox:1.37"}
    assert check("probes-present-lenient-liveness", DEPLOYMENT, deployment(gpu_container(), sidecar)) == []


def test_strict_liveness_and_short_startup_fail():
    container = gpu_container(
        livenessProbe={"httpGet": {"path": "/health"}, "timeoutSeconds": 1, "periodSeconds": 10, "failureThreshold": 3},
        startupProbe={"httpGet": {"path": "/health"}, "initialDelaySeconds": 60, "periodSeconds": 10,
                      "failureThreshold": 24},
    )
    assert check("probes-present-lenient-liveness", DEPLOYMENT, deployment(container)) == [
        f"{WHERE}: livenessProbe.timeoutSeconds is 1; an engine at full load answers /health slowly, and a short "
        "timeout restarts busy pods. Set timeoutSeconds >= 10.",
        f"{WHERE}: livenessProbe gives up after 30 s (periodSeconds 10 x failureThreshold 3); a load spike that "
        "long restarts serving pods and turns into an outage. Make periodSeconds x failureThreshold >= 90.",
        f"{WHERE}: startupProbe allows 300 s (initialDelaySeconds 60 + periodSeconds 10 x failureThreshold 24) to "
        "load weights and capture graphs; a slow load is killed and restarted forever. Allow >= 600 s (the "
        "capacity planner's budget).",
    ]


def test_unset_probe_fields_count_as_the_kubernetes_defaults():
    container = gpu_container(livenessProbe={"httpGet": {"path": "/health"}},
                              startupProbe={"httpGet": {"path": "/health"}, "failureThreshold": 60})
    assert check("probes-present-lenient-liveness", DEPLOYMENT, deployment(container)) == [
        f"{WHERE}: livenessProbe.timeoutSeconds is unset (default 1); an engine at full load answers /health "
        "slowly, and a short timeout restarts busy pods. Set timeoutSeconds >= 10.",
        f"{WHERE}: livenessProbe gives up after 30 s (periodSeconds 10 x failureThreshold 3); a load spike that "
        "long restarts serving pods and turns into an outage. Make periodSeconds x failureThreshold >= 90.",
    ]


# --------------------------------------------------------------------------------------------
# 4. no-privileged-containers

ESCALATION = ("securityContext.allowPrivilegeEscalation is {}; set it to false so a setuid binary cannot gain root "
              "inside the container.")


def test_unprivileged_containers_pass():
    assert check("no-privileged-containers", JOB, deployment()) == []


def test_privileged_and_escalating_containers_fail():
    container = gpu_container(securityContext={"privileged": True, "allowPrivilegeEscalation": True})
    assert check("no-privileged-containers", DEPLOYMENT, deployment(container)) == [
        f"{WHERE}: securityContext.privileged is true, which gives the container the node's devices and kernel; "
        "remove it (GPUs come from the NVIDIA device plugin, not from privilege).",
        f"{WHERE}: " + ESCALATION.format("true"),
    ]


def test_escalation_must_be_refused_explicitly():
    # Kubernetes allows escalation when the field is unset, so a missing securityContext fails.
    assert check("no-privileged-containers", DEPLOYMENT, deployment(gpu_container(securityContext=None))) == [
        f"{WHERE}: " + ESCALATION.format("unset (default true)")
    ]


# --------------------------------------------------------------------------------------------
# 5. requests-and-limits-set


def test_sized_containers_pass():
    assert check("requests-and-limits-set", DEPLOYMENT, deployment()) == []


def test_unsized_containers_fail_per_missing_field():
    assert check("requests-and-limits-set", DEPLOYMENT, deployment(gpu_container(resources=None))) == [
        f"{WHERE}: resources.requests.memory is not set; the scheduler reserves no memory for it and it is evicted "
        "first under pressure. Set it.",
        f"{WHERE}: resources.limits.memory is not set; one container can then take the node's memory and get other "
        "pods OOM-killed. Set it.",
        f"{WHERE}: resources.requests.cpu is not set; it then gets only CPU left over by others, which starves "
        "tokenisation and HTTP. Set it.",
    ]


def test_gpu_requested_without_a_gpu_limit_fails():
    resources = {"requests": {"cpu": "8", "memory": "64Gi", GPU: "1"}, "limits": {"memory": "64Gi"}}
    assert check("requests-and-limits-set", DEPLOYMENT, deployment(gpu_container(resources=resources))) == [
        f"{WHERE}: requests nvidia.com/gpu without resources.limits['nvidia.com/gpu']; Kubernetes only accepts "
        "extended resources in limits. Set the limit to the GPU count."
    ]


# --------------------------------------------------------------------------------------------
# 6. no-plaintext-secrets

USE_A_SECRET = "use a Kubernetes Secret built from a Pulumi secret (pulumi config set --secret)"


def test_secret_references_and_ordinary_env_pass():
    env = [
        {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token"}}},
        {"name": "TOKENIZER_REVISION", "value": "0e9e39f249a16976918f6564b8830bc894c89659"},
        {"name": "VLLM_HTTP_TIMEOUT_KEEP_ALIVE", "value": "1700"},
        {"name": "HF_TOKEN_PATH"},  # no value at all: nothing leaks
        # The path of a mounted Secret file: a path, not a credential.
        {"name": "HF_TOKEN_PATH", "value": "/var/run/secrets/huggingface/token"},
    ]
    assert check("no-plaintext-secrets", JOB, deployment(gpu_container(env=env))) == []


def test_a_credential_value_under_a_path_name_still_fails():
    env = [{"name": "HF_TOKEN_FILE", "value": "hf_" + "a1" * 17}]
    assert check("no-plaintext-secrets", DEPLOYMENT, deployment(gpu_container(env=env))) == [
        f"{WHERE}: env HF_TOKEN_FILE holds what looks like a Hugging Face token; use valueFrom.secretKeyRef and "
        f"{USE_A_SECRET}.",
    ]


def test_plaintext_credentials_in_env_fail():
    env = [{"name": "HF_TOKEN", "value": "[secret]"}, {"name": "EXTRA", "value": "hf_" + "a1" * 17}]
    assert check("no-plaintext-secrets", DEPLOYMENT, deployment(gpu_container(env=env))) == [
        f"{WHERE}: env HF_TOKEN is set as a plain value, readable by anyone who can read the Deployment and stored "
        f"in the stack state; use valueFrom.secretKeyRef and {USE_A_SECRET}.",
        f"{WHERE}: env EXTRA holds what looks like a Hugging Face token; use valueFrom.secretKeyRef and "
        f"{USE_A_SECRET}.",
    ]


def test_configmaps_must_not_carry_credentials():
    config_map = {"metadata": {"name": "extra", "namespace": "llm-serving"}, "data": {
        "tokenizer_config.json": "{}", "chat-template.jinja": "{{ messages }}",
        "api-key": "abc", "settings.env": "OPENAI_API_KEY=sk-" + "x" * 24,
    }}
    assert check("no-plaintext-secrets", rules.CONFIG_MAP, config_map) == [
        "ConfigMap llm-serving/extra: data key api-key names a credential, and ConfigMaps are neither encrypted nor "
        f"access-restricted like Secrets; {USE_A_SECRET}.",
        "ConfigMap llm-serving/extra: data[settings.env] contains what looks like an API secret key (sk-...); "
        f"{USE_A_SECRET}.",
    ]
    assert check("no-plaintext-secrets", rules.CONFIG_MAP, {"metadata": {"name": "empty"}}) == []


def test_kubernetes_secrets_must_hold_pulumi_secrets_where_secretness_is_visible():
    rendered = {"metadata": {"name": "hf-token", "namespace": "llm-serving"}, "stringData": {"token": "[secret]"}}
    assert check("no-plaintext-secrets", rules.SECRET, rendered) == []
    plain = copy.deepcopy(rendered)
    plain["stringData"]["token"] = "hf_plain"
    assert check("no-plaintext-secrets", rules.SECRET, plain) == [
        "Secret llm-serving/hf-token: stringData[token] is not a Pulumi secret, so it is stored in plain text in the "
        "stack state and shown in previews; build it from pulumi.Config().require_secret() or wrap it in "
        "pulumi.Output.secret()."
    ]
    # The policy pack gets every secret as plain text, so it cannot judge this part.
    blind = RuleContext(environment="prod", secrets_visible=False)
    assert check("no-plaintext-secrets", rules.SECRET, plain, blind) == []
    assert check("no-plaintext-secrets", rules.SECRET, {"metadata": {"name": "empty"}}) == []


# --------------------------------------------------------------------------------------------
# 7. weights-retained-and-protected-in-prod

WEIGHTS_PVC = {"metadata": {"name": "llama-weights", "namespace": "llm-serving",
                            "labels": {"app.kubernetes.io/component": "weights"}}}
NOT_RETAINED = (
    "PersistentVolumeClaim llm-serving/llama-weights holds model weights without retainOnDelete; a destroy or a "
    "replacement would delete the volume and force a re-download of hundreds of GiB before serving resumes. Set "
    "retain_on_delete=True."
)
NOT_PROTECTED = (
    "PersistentVolumeClaim llm-serving/llama-weights holds prod model weights without protect; a mistaken change "
    "could delete the volume prod serves from. Set protect=True in prod."
)


def test_weights_claims_retained_everywhere_and_protected_in_prod_pass():
    assert check("weights-retained-and-protected-in-prod", rules.PVC, WEIGHTS_PVC,
                 RuleContext(environment="prod", protect=True, retain_on_delete=True)) == []
    assert check("weights-retained-and-protected-in-prod", rules.PVC, WEIGHTS_PVC,
                 RuleContext(environment="dev", retain_on_delete=True)) == []


def test_weights_claims_without_the_options_fail():
    assert check("weights-retained-and-protected-in-prod", rules.PVC, WEIGHTS_PVC, PROD) == [
        NOT_RETAINED, NOT_PROTECTED
    ]
    assert check("weights-retained-and-protected-in-prod", rules.PVC, WEIGHTS_PVC, DEV) == [NOT_RETAINED]
    # The pack cannot see retainOnDelete (None): it still checks protect.
    assert check("weights-retained-and-protected-in-prod", rules.PVC, WEIGHTS_PVC,
                 RuleContext(environment="prod", retain_on_delete=None)) == [NOT_PROTECTED]


def test_claims_without_the_weights_label_are_not_concerned():
    assert check("weights-retained-and-protected-in-prod", rules.PVC, {"metadata": {"name": "scratch"}}, PROD) == []


# --------------------------------------------------------------------------------------------
# 8. edge-non-buffering

ROUTE = edge_objects.Route(
    model_name="llama-70b", namespace="llm-serving", port=8000, host="llm.example.com", path_prefix="/",
    request_timeout_seconds=0, stream_idle_timeout_seconds=300, request_body_limit_bytes=8 * 1024**2,
    drain_seconds=300,
)
SETTINGS = edge_objects.EdgeSettings(
    namespace="ingress-nginx", gateway_name="llm-serving", tls_secret_name="llm-tls", cert_manager_issuer=None,
    load_balancer_scheme=LoadBalancerScheme.INTERNAL, auth=EdgeAuth.VLLM_API_KEY, api_key_secret="keys",
    jwt_issuer=None, jwt_jwks_uri=None, jwt_audiences=(),
    acm_certificate_arn="arn:aws:acm:us-east-1:123456789012:certificate/0000",
    alb_idle_timeout_seconds=1639,
)
INGRESS_SUBJECT = "Ingress llm-serving/llm-serving-llm-example-com"


def edge_check(resource_type: str, inputs: dict[str, Any]) -> list[str]:
    return check("edge-non-buffering", resource_type, inputs)


def test_a_buffered_inference_pool_is_refused_and_the_programs_pool_passes():
    from llm_serving.routing import RoutedModel, inference_pool

    pool = inference_pool(RoutedModel("llama-70b", "llm-serving", {"app.kubernetes.io/name": "llama-70b"}, 8000, 300))
    assert edge_check(rules.INFERENCE_POOL, pool) == []
    pool["metadata"]["annotations"]["aigateway.envoyproxy.io/processing-body-mode"] = "buffered"
    assert edge_check(rules.INFERENCE_POOL, pool) == [
        "InferencePool llm-serving/llama-70b: aigateway.envoyproxy.io/processing-body-mode is buffered; the gateway "
        "then holds each whole response in the endpoint picker's filter, so no token reaches the client before the "
        "last. Set it to duplex."]


def test_the_programs_ingresses_and_gateway_objects_pass():
    objects = [
        *edge_objects.nginx_ingress(SETTINGS, [ROUTE]),
        *edge_objects.alb_ingress(SETTINGS, [ROUTE], ("subnet-0aaa1111", "subnet-0bbb2222")),
        *edge_objects.gateway_objects(SETTINGS, [ROUTE]),
    ]
    types = {"Ingress": rules.INGRESS, "HTTPRoute": rules.HTTP_ROUTES[0],
             "BackendTrafficPolicy": rules.BACKEND_TRAFFIC_POLICY}
    checked = [o for o in objects if o["kind"] in types]
    # nginx: the model's Ingress and the one closing vLLM's runtime adapter API; the ALB's.
    assert sorted(o["kind"] for o in checked) == ["BackendTrafficPolicy", "HTTPRoute", "Ingress", "Ingress", "Ingress"]
    for manifest in checked:
        assert edge_check(types[manifest["kind"]], manifest) == [], manifest["kind"]


def test_nginx_buffering_fails_whether_on_or_left_at_the_default():
    ingress = edge_objects.nginx_ingress(SETTINGS, [ROUTE])[0]
    ingress["metadata"]["annotations"]["nginx.ingress.kubernetes.io/proxy-buffering"] = "on"
    del ingress["metadata"]["annotations"]["nginx.ingress.kubernetes.io/proxy-request-buffering"]
    assert edge_check(rules.INGRESS, ingress) == [
        f"{INGRESS_SUBJECT}: nginx.ingress.kubernetes.io/proxy-buffering is on; buffered responses reach the client "
        'all at once instead of token by token. Set it to "off".',
        f"{INGRESS_SUBJECT}: nginx.ingress.kubernetes.io/proxy-request-buffering is unset (default on); nginx holds "
        'the whole prompt before vLLM sees a byte, delaying prefill. Set it to "off".',
    ]


def test_alb_idle_timeout_below_the_longest_generation_fails():
    (ingress,) = edge_objects.alb_ingress(SETTINGS, [ROUTE], ("subnet-0aaa1111", "subnet-0bbb2222"))
    annotations = ingress["metadata"]["annotations"]
    annotations["alb.ingress.kubernetes.io/load-balancer-attributes"] = "idle_timeout.timeout_seconds=300"
    message = ("{}: the ALB idle_timeout.timeout_seconds is {}; the ALB closes a response that is silent that long, "
               "which cuts queued and non-streamed generations. Set it to >= 600 in "
               "alb.ingress.kubernetes.io/load-balancer-attributes.")
    assert edge_check(rules.INGRESS, ingress) == [message.format(INGRESS_SUBJECT, "300")]
    del annotations["alb.ingress.kubernetes.io/load-balancer-attributes"]
    assert edge_check(rules.INGRESS, ingress) == [message.format(INGRESS_SUBJECT, "unset (default 60)")]


def test_other_ingress_classes_are_not_concerned():
    ingress = {"metadata": {"name": "web"}, "spec": {"ingressClassName": "traefik"}}
    assert edge_check(rules.INGRESS, ingress) == []


def test_backend_traffic_policy_that_buffers_retries_or_times_out_fails():
    policy = {"metadata": {"name": "llama-70b", "namespace": "llm-serving"}, "spec": {
        "requestBuffer": {"limit": "4Mi"},
        "retry": {"numRetries": 2},
        "timeout": {"http": {"requestTimeout": "60s"}},
    }}
    subject = "BackendTrafficPolicy llm-serving/llama-70b"
    assert edge_check(rules.BACKEND_TRAFFIC_POLICY, policy) == [
        f"{subject} sets spec.requestBuffer; buffering the request delays prefill and breaks streaming uploads. "
        "Remove it.",
        f"{subject}: spec.retry.numRetries is 2; a retried POST re-runs the whole generation and can send the "
        "client a second stream. Set it to 0 explicitly.",
        f'{subject}: spec.timeout.http.requestTimeout is 60s; it overrides the route\'s timeout and cuts long '
        'generations. Set "0s" (no limit) or >= 600s.',
    ]
    # Without `retry` the engine's default applies; the rule wants the 0 written down.
    assert edge_check(rules.BACKEND_TRAFFIC_POLICY, {"metadata": {"name": "p"}, "spec": {}}) == [
        "BackendTrafficPolicy p: spec.retry.numRetries is unset; a retried POST re-runs the whole generation and "
        "can send the client a second stream. Set it to 0 explicitly."
    ]


@pytest.mark.parametrize("timeouts", [{"request": "0s"}, {"request": "1h"}, {"request": "600s"},
                                      {"request": "0s", "backendRequest": "0s"}])
def test_http_routes_without_a_short_timeout_pass(timeouts):
    route = {"metadata": {"name": "r", "namespace": "ns"}, "spec": {"rules": [
        {"timeouts": timeouts, "backendRefs": [{"name": "llama-70b"}]}]}}
    assert edge_check(rules.HTTP_ROUTES[0], route) == []


def test_http_routes_with_a_short_or_default_timeout_fail():
    route = {"metadata": {"name": "r", "namespace": "ns"}, "spec": {"rules": [
        {"timeouts": {"request": "300s", "backendRequest": "30s"}, "backendRefs": [{"name": "llama-70b"}]},
        {"backendRefs": [{"name": "llama-70b"}]},
        # A rule without a backend answers itself (the runtime adapter API's direct 404): no generation to cut.
        {"matches": [{"path": {"type": "Exact", "value": "/v1/load_lora_adapter"}}], "filters": [
            {"type": "ExtensionRef", "extensionRef": {"kind": "HTTPRouteFilter", "name": "closed"}}]},
    ]}}
    assert edge_check(rules.HTTP_ROUTES[0], route) == [
        'HTTPRoute ns/r rule 0: timeouts.request is 300s, which cuts every longer generation. Set "0s" (no limit) '
        "or >= 600s.",
        'HTTPRoute ns/r rule 0: timeouts.backendRequest is 30s, which cuts every longer generation. Set "0s" (no '
        "limit) or >= 600s.",
        "HTTPRoute ns/r rule 1: timeouts.request is unset (default 15s in Envoy Gateway), which cuts every longer "
        'generation. Set "0s" (no limit) or >= 600s.',
    ]


# --------------------------------------------------------------------------------------------
# 9. autoscaling-not-on-utilisation

TARGET = autoscaling.ScalingTarget(
    deployment_name="llama-70b", namespace="llm-serving", served_model_name="llama-70b", min_replicas=2,
    max_replicas=4, waiting_per_replica_target=5, waiting_activation=1, kv_usage_target=0.8, kv_usage_activation=0.5,
    scale_down_window_seconds=900, scale_up_window_seconds=0, cooldown_seconds=1200, ttft_target_seconds=1.6,
)
SCALE_ON_QUEUE = "scale on queue depth (vllm:num_requests_waiting) and KV-cache usage instead"
GPU_UTIL_WHY = "GPU utilisation reaches 100 % with a single request, so it cannot tell load apart"


def scaling_check(resource_type: str, inputs: dict[str, Any]) -> list[str]:
    return check("autoscaling-not-on-utilisation", resource_type, inputs)


def test_the_programs_scaled_object_and_hpa_pass():
    scaled = autoscaling.scaled_object(TARGET, prometheus_url="http://prometheus:9090", name="llama-70b")
    hpa = autoscaling.horizontal_pod_autoscaler(TARGET, name="llama-70b")
    assert scaling_check(rules.SCALED_OBJECT, scaled) == []
    assert scaling_check(rules.HPA_V2, hpa) == []


def test_scaled_object_on_cpu_or_gpu_utilisation_fails():
    scaled = autoscaling.scaled_object(TARGET, prometheus_url="http://prometheus:9090", name="llama-70b")
    scaled["spec"]["triggers"] += [
        {"type": "cpu", "metricType": "Utilization", "metadata": {"value": "60"}},
        {"type": "prometheus", "name": "gpu", "metadata": {"query": "avg(DCGM_FI_DEV_GPU_UTIL)", "threshold": "80"}},
    ]
    subject = "ScaledObject llm-serving/llama-70b"
    assert scaling_check(rules.SCALED_OBJECT, scaled) == [
        f"{subject} trigger #3: type cpu scales on utilisation, which says nothing about an LLM server's load; "
        f"{SCALE_ON_QUEUE}.",
        f"{subject} trigger gpu: its query uses GPU utilisation; {GPU_UTIL_WHY}; {SCALE_ON_QUEUE}.",
    ]
    assert scaling_check(rules.SCALED_OBJECT, {"metadata": {"name": "empty"}}) == []


def test_hpa_on_resource_or_gpu_utilisation_fails():
    hpa = autoscaling.horizontal_pod_autoscaler(TARGET, name="llama-70b")
    hpa["spec"]["metrics"] += [
        {"type": "Resource", "resource": {"name": "memory", "target": {"type": "Utilization"}}},
        {"type": "Pods", "pods": {"metric": {"name": "gpu_utilization"}, "target": {"type": "AverageValue"}}},
    ]
    subject = "HorizontalPodAutoscaler llm-serving/llama-70b"
    assert scaling_check(rules.HPA_V2, hpa) == [
        f"{subject} metric 2: Resource memory scales on utilisation, which says nothing about an LLM server's load; "
        f"{SCALE_ON_QUEUE}.",
        f"{subject} metric 3: gpu_utilization is GPU utilisation; {GPU_UTIL_WHY}; {SCALE_ON_QUEUE}.",
    ]
    v1 = {"metadata": {"name": "old"}, "spec": {"targetCPUUtilizationPercentage": 70}}
    assert scaling_check(rules.HPA_V1, v1) == [
        "HorizontalPodAutoscaler old: targetCPUUtilizationPercentage scales on CPU, which says nothing about an LLM "
        f"server's load; {SCALE_ON_QUEUE}."
    ]
    assert scaling_check(rules.HPA_V2, {"metadata": {"name": "empty"}}) == []


# --------------------------------------------------------------------------------------------
# namespaces-enforce-pod-security


def namespace(labels: dict[str, str], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "gpu-monitoring", "labels": labels}
    if annotations is not None:
        metadata["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": metadata}


NS = "kubernetes:core/v1:Namespace"
PSA = "pod-security.kubernetes.io"
REASON = {"llm-serving/pod-security-reason": "dcgm-exporter mounts the host's /var/lib/kubelet/pod-resources"}


def test_the_programs_namespace_labels_pass_at_every_level():
    assert check("namespaces-enforce-pod-security", NS, namespace(pod_security.pod_security_labels("restricted"))) == []
    for level in ("baseline", "privileged"):
        labels = pod_security.pod_security_labels(level)
        assert check("namespaces-enforce-pod-security", NS, namespace(labels, REASON)) == []


def test_a_namespace_without_labels_fails_once_per_missing_label():
    assert check("namespaces-enforce-pod-security", NS, namespace({})) == [
        f"Namespace gpu-monitoring: label {PSA}/enforce is unset, so the namespace admits privileged pods that "
        "nobody reviewed; set it to one of restricted, baseline, privileged (restricted unless a pod needs more).",
        f"Namespace gpu-monitoring: label {PSA}/warn is unset; set it to restricted so every pod that needs more "
        "than the restricted profile shows up in kubectl warnings.",
        f"Namespace gpu-monitoring: label {PSA}/audit is unset; set it to restricted so every pod that needs more "
        "than the restricted profile shows up in the audit log.",
    ]


def test_an_unknown_level_and_a_relaxed_warn_level_fail():
    labels = {f"{PSA}/enforce": "strict", f"{PSA}/warn": "baseline", f"{PSA}/audit": "restricted"}
    assert check("namespaces-enforce-pod-security", NS, namespace(labels)) == [
        f"Namespace gpu-monitoring: label {PSA}/enforce is 'strict', so the namespace admits privileged pods that "
        "nobody reviewed; set it to one of restricted, baseline, privileged (restricted unless a pod needs more).",
        f"Namespace gpu-monitoring: label {PSA}/warn is 'baseline'; set it to restricted so every pod that needs "
        "more than the restricted profile shows up in kubectl warnings.",
    ]


@pytest.mark.parametrize("annotations", [None, {}, {"llm-serving/pod-security-reason": "  "}])
def test_a_level_below_restricted_without_a_reason_fails(annotations):
    labels = pod_security.pod_security_labels("privileged")
    assert check("namespaces-enforce-pod-security", NS, namespace(labels, annotations)) == [
        "Namespace gpu-monitoring: enforces Pod Security level privileged without annotation "
        "llm-serving/pod-security-reason; say which pod needs more than restricted and why, so the next reviewer "
        "can tell whether it still does.",
    ]
