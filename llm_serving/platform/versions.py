"""Every default version the stack installs, pinned in one place.

A stack file may override a chart version, but the defaults live only here, so a bump is one
reviewed diff. Each pin matches a reference copy the tests check values against.

Beside each chart pin: the images that chart runs at its pinned version (read from the chart's values and
templates at that tag, each cited), and the values key through which a digest reaches each one. The digests
themselves are a stack's (`chartImageDigests`, written by `python -m stacks pin-images <stack> --write`):
none of these charts publishes one, and none is committed here without a source. Bumping a chart means
re-reading its images here and re-running that command.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class DigestForm(StrEnum):
    """How a chart's template takes an image digest through its values key."""

    TAG = "tag"
    """The key is the image's tag and the template prints `repository:tag`: the tag becomes `<tag>@sha256:<hex>`.
    A reference may carry both (the grammar `name[:tag][@digest]` of distribution/reference, which Kubernetes
    image names follow: kubernetes.io docs/concepts/containers/images "Image names"); the pull is by digest."""
    SHA = "sha"
    """The key holds the hex digest alone; the template appends `@sha256:<sha>` to `repository:tag`."""
    DIGEST = "digest"
    """The key holds `sha256:<hex>`; the template appends `@<digest>` to `repository:tag`."""
    IMAGE = "image"
    """The key holds the whole reference: `registry/repository:tag@sha256:<hex>`."""


@dataclass(frozen=True)
class ChartImage:
    """An image a chart runs at its pinned version, and the key that pins it by digest."""

    repository: str  # registry host and path, as a pull names it (docker.io/... spelt out)
    tag: str
    key: str  # the dotted Helm values key (or, for the Envoy proxy, the EnvoyProxy field) the digest goes into
    form: DigestForm

    @property
    def reference(self) -> str:
        """`repository:tag`: the key of `chartImageDigests`."""
        return f"{self.repository}:{self.tag}"


@dataclass(frozen=True)
class ChartPin:
    """A Helm chart at one published version, from its official repository, and the images it runs there."""

    chart: str
    version: str
    repository: str
    # Every image the chart's pods run with this program's values, at `version`; () for a chart of CRDs only.
    # Images the chart only names for features this program leaves off are in the comment beside it.
    images: tuple[ChartImage, ...] = ()


# NVIDIA/k8s-device-plugin v0.20.0 (2026-08-19); chart repo per the project's README and the
# EKS user guide's device-plugin procedure.
# Its images (NVIDIA/k8s-device-plugin tag v0.20.0, commit 1b826acc6af3): the plugin and GPU feature discovery
# run nvcr.io/nvidia/k8s-device-plugin, tag `v` + appVersion 0.20.0 (deployments/helm/nvidia-device-plugin/
# templates/_helpers.tpl "nvidia-device-plugin.fullimage": `repository:tag`); GFD (on here) pulls in the
# node-feature-discovery 0.19.0 subchart under the alias nfd (Chart.yaml, condition nfd.enabled,gfd.enabled),
# whose master, worker, gc and post-delete Job run registry.k8s.io/nfd/node-feature-discovery at its appVersion
# v0.19.0 (charts/node-feature-discovery-0.19.0.tgz templates: `repository:tag | default .Chart.AppVersion`).
NVIDIA_DEVICE_PLUGIN = ChartPin(
    chart="nvidia-device-plugin",
    version="0.20.0",
    repository="https://nvidia.github.io/k8s-device-plugin",
    images=(
        ChartImage("nvcr.io/nvidia/k8s-device-plugin", "v0.20.0", "image.tag", DigestForm.TAG),
        ChartImage("registry.k8s.io/nfd/node-feature-discovery", "v0.19.0", "nfd.image.tag", DigestForm.TAG),
    ),
)

# NVIDIA/dcgm-exporter tag 4.5.3-4.8.2: DCGM 4.5.3, exporter 4.8.2, chart version 4.8.2.
# The chart's own default image for 4.8.2; pinned here so a chart bump cannot move it silently. Its DaemonSet
# prints `repository:tag` (deployment/templates/daemonset.yaml at that tag).
DCGM_EXPORTER_IMAGE_TAG = "4.5.3-4.8.2-distroless"
DCGM_EXPORTER = ChartPin(
    chart="dcgm-exporter",
    version="4.8.2",
    repository="https://nvidia.github.io/dcgm-exporter/helm-charts",
    images=(ChartImage("nvcr.io/nvidia/k8s/dcgm-exporter", DCGM_EXPORTER_IMAGE_TAG, "image.tag", DigestForm.TAG),),
)

# prometheus-community kube-prometheus-stack 88.5.3 (prometheus-operator v0.93.1); installed
# only when a stack asks for its own Prometheus (the dev default).
# Its images with this program's values (prometheus-community/helm-charts tag kube-prometheus-stack-88.5.3,
# commit ea930baeebeb, charts/kube-prometheus-stack/values.yaml and templates/): every `sha` key there is empty,
# and each template appends `@sha256:<sha>` to `registry/repository:tag` (prometheus-operator/deployment.yaml for
# the operator and the config reloader it passes to Prometheus and Alertmanager, prometheus/prometheus.yaml,
# alertmanager/alertmanager.yaml, admission-webhooks/job-patch/*.yaml for the certificate Jobs). Tags left
# empty default to appVersion v0.93.1. The subcharts: kube-state-metrics 8.4.0 (tag kube-state-metrics-8.4.0,
# _helpers.tpl "kube-state-metrics.image": `...:tag@<sha>`, so its `sha` holds `sha256:<hex>`, tag v + appVersion
# 2.20.0), prometheus-node-exporter 4.56.1 (tag prometheus-node-exporter-4.56.1, _helpers.tpl: `image.digest`,
# `sha` refused; kube-prometheus-stack sets `distroless: true`, so the tag is v1.12.1-distroless) and grafana
# 12.11.1 (grafana-community/helm-charts tag grafana-12.11.1, templates/_pod.tpl: `@sha256:<sha>` for Grafana,
# appVersion 13.2.0, and for the dashboard and datasource sidecars kube-prometheus-stack turns on). Not run
# here: the CRD upgrade Job (crds.enabled false), the Thanos images (no Thanos sidecar or ruler), the admission
# webhook Deployment (admissionWebhooks.deployment.enabled false), Grafana's init, download and test images
# (no persistence, no dashboards to download; the test pod runs only under `helm test`).
KUBE_PROMETHEUS_STACK = ChartPin(
    chart="kube-prometheus-stack",
    version="88.5.3",
    repository="https://prometheus-community.github.io/helm-charts",
    images=(
        ChartImage("quay.io/prometheus-operator/prometheus-operator", "v0.93.1", "prometheusOperator.image.sha",
                   DigestForm.SHA),
        ChartImage("quay.io/prometheus-operator/prometheus-config-reloader", "v0.93.1",
                   "prometheusOperator.prometheusConfigReloader.image.sha", DigestForm.SHA),
        ChartImage("ghcr.io/jkroepke/kube-webhook-certgen", "1.8.7",
                   "prometheusOperator.admissionWebhooks.patch.image.sha", DigestForm.SHA),
        ChartImage("quay.io/prometheus/prometheus", "v3.14.0-distroless", "prometheus.prometheusSpec.image.sha",
                   DigestForm.SHA),
        ChartImage("quay.io/prometheus/alertmanager", "v0.34.0", "alertmanager.alertmanagerSpec.image.sha",
                   DigestForm.SHA),
        ChartImage("registry.k8s.io/kube-state-metrics/kube-state-metrics", "v2.20.0", "kube-state-metrics.image.sha",
                   DigestForm.DIGEST),
        ChartImage("quay.io/prometheus/node-exporter", "v1.12.1-distroless", "prometheus-node-exporter.image.digest",
                   DigestForm.DIGEST),
        ChartImage("docker.io/grafana/grafana", "13.2.0", "grafana.image.sha", DigestForm.SHA),
        ChartImage("quay.io/kiwigrid/k8s-sidecar", "2.10.1", "grafana.sidecar.image.sha", DigestForm.SHA),
    ),
)

# vLLM's OpenAI-compatible server image at the pinned engine version (flags and metrics in
# tests/fixtures/reference/vllm/0.33.0 were read from this release). Tag convention vX.Y.Z.
VLLM_IMAGE_REPOSITORY = "vllm/vllm-openai"
VLLM_IMAGE_TAG = "v0.33.0"
VLLM_VERSION = "0.33.0"
# Whether that image can stream weights from S3 (`--load-format runai_streamer` with an s3:// model):
# vLLM's docker/Dockerfile installs `runai-model-streamer[s3,gcs]` into the `vllm-openai-base` stage
# the published image is built from (vllm-project/vllm@dead20baf70d:docker/Dockerfile, the
# `uv pip install --system accelerate hf_transfer modelscope ... 'runai-model-streamer[s3,gcs]>=0.14.0'`
# line of that stage; later releases keep the `runai` extra as `runai-model-streamer[s3,gcs,azure]`).
# The Dockerfile at the v0.33.0 tag itself could not be read here (the repository snapshot is larger
# than the fetch limit): a first deploy on S3 confirms it, and `models[].image.s3Streamer: false`
# turns the backend off for an image without it.
VLLM_IMAGE_HAS_S3_STREAMER = True

# The weights Job's image: the official Python image (Docker Hub library/python, multi-arch), a few
# hundred MB instead of the multi-GB vLLM image on a CPU node. It installs huggingface_hub from the
# hashed lock llm_serving/serving/stage-requirements.txt (`python -m tools.stage_lock`).
STAGE_PYTHON_VERSION = "3.12"
STAGE_IMAGE = "python:3.12.8-slim-bookworm"
# Its multi-arch index digest, as pinned by astral-sh/uv-docker-example (multistage.Dockerfile) and
# many other public Dockerfiles: a tag can be pushed again, so the Job pulls exactly this build.
STAGE_IMAGE_DIGEST = "sha256:2199a62885a12290dc9c5be3ca0681d367576ab7bf037da120e564723292a2f0"
HUGGINGFACE_HUB_VERSION = "2.4.0"
# The S3 backend's staging Job uploads with boto3 (multipart uploads, retries): in the same hashed lock.
BOTO3_VERSION = "1.44.8"
# The verification Job's image: the same Python image by digest (the multi-arch index digest of
# python:3.12.8-slim-bookworm, as astral-sh/uv-docker-example's multistage.Dockerfile pins it), so a
# re-pushed tag cannot change what gates a deploy. The probe needs only the standard library.
VERIFY_IMAGE = f"{STAGE_IMAGE}@sha256:2199a62885a12290dc9c5be3ca0681d367576ab7bf037da120e564723292a2f0"
# The accuracy gate's harness: lm-evaluation-harness (EleutherAI/lm-evaluation-harness, tag v0.4.13; PyPI
# lm_eval 0.4.13), whose core no longer needs torch or transformers. The eval Job runs it on VERIFY_IMAGE from the
# hashed lock llm_serving/verification/eval-requirements.txt (`python -m tools.stage_lock --only eval`).
HARNESS_VERSION = "0.4.13"

# Envoy Gateway's chart is published to an OCI registry only (release workflow of envoyproxy/gateway
# v1.9.0); the version carries the leading "v".
# Its image (envoyproxy/gateway tag v1.9.0, commit 39763b1c07ec): the release workflow packages the chart with
# IMAGE=docker.io/envoyproxy/gateway TAG=v1.9.0 (.github/workflows/release.yaml, tools/make/helm.mk fills
# values.tmpl.yaml's global.images.envoyGateway.image). charts/gateway-helm/templates/_helpers.tpl "eg.image"
# splits that value at its first ':' and prints registry/repository:rest, so `...:v1.9.0@sha256:<hex>` passes
# through whole; the controller Deployment, the certgen Job and the proxies' shutdown-manager container
# (envoy-gateway-config.yaml: provider.kubernetes.shutdownManager.image) all run it. The rate limit image
# (global.images.ratelimit) runs only with the EnvoyGateway's rateLimit set (internal/infrastructure/runner/
# runner.go), which this program leaves off.
ENVOY_GATEWAY = ChartPin(
    chart="gateway-helm", version="v1.9.0", repository="oci://docker.io/envoyproxy/gateway-helm",
    images=(ChartImage("docker.io/envoyproxy/gateway", "v1.9.0", "global.images.envoyGateway.image",
                       DigestForm.IMAGE),),
)
# The Envoy proxy that carries every request (and enforces the edge's auth): Envoy Gateway v1.9.0 runs
# DefaultEnvoyProxyImage unless the EnvoyProxy names another (api/v1alpha1/shared_types.go; internal/
# infrastructure/kubernetes/proxy/resource.go resolveProxyImage). It is not a chart value: the EnvoyProxy this
# program renders (llm_serving/edge/objects.py) sets it, and its CRD admits `repo:tag@sha256:<hex>`
# (KubernetesContainerSpec.Image's CEL pattern, shared_types.go @v1.9.0).
ENVOY_PROXY_IMAGE = ChartImage("docker.io/envoyproxy/envoy", "distroless-v1.39.0",
                               "spec.provider.kubernetes.envoyDeployment.container.image", DigestForm.IMAGE)

# kubernetes-sigs/aws-load-balancer-controller v3.5.0, published in the EKS charts repository. Its image:
# helm/aws-load-balancer-controller/values.yaml at tag v3.5.0 (the same in aws/eks-charts stable/), printed as
# `repository:tag` by templates/deployment.yaml.
AWS_LOAD_BALANCER_CONTROLLER = ChartPin(
    chart="aws-load-balancer-controller", version="3.5.0", repository="https://aws.github.io/eks-charts",
    images=(ChartImage("public.ecr.aws/eks/aws-load-balancer-controller", "v3.5.0", "image.tag", DigestForm.TAG),),
)

# Gateway API (standard channel, v1.6.1) and Envoy Gateway CRDs from Envoy's CRD-only chart, published
# with gateway-helm and at its version (envoyproxy/gateway v1.9.0 install-helm.md).
GATEWAY_CRDS = ChartPin(chart="gateway-crds-helm", version="v1.9.0", repository="oci://docker.io/envoyproxy/gateway-crds-helm")

# prometheus-community prometheus-operator-crds 31.0.1 = prometheus-operator v0.93.1, the operator
# kube-prometheus-stack 88.5.3 runs (prometheus-community/helm-charts charts/prometheus-operator-crds/Chart.yaml
# @ tag prometheus-operator-crds-31.0.1); installed with it, in its place for the CRDs.
# Envoy AI Gateway v1.1.0 (envoyproxy/ai-gateway tag v1.1.0, commit c217da8a5395, 2026-08-21): the
# extension server that lets Envoy Gateway route an HTTPRoute to an InferencePool (its
# site/versioned_docs/version-1.1/capabilities/inference/httproute-inferencepool.md).
# Its CRD chart keeps the CRDs in templates/, so a release upgrades them. Tested upstream with Envoy
# Gateway v1.8.1 and Gateway API v1.5.1; our v1.9.0 / v1.6.1 fall under its "v1.8.1+" wording (docs/decisions.md).
# Its controller image: `repository:tag | default .Chart.AppVersion` (manifests/charts/ai-gateway-helm/templates/
# deployment.yaml @v1.1.0), appVersion v1.1.0 (the release workflow packages with --app-version of the tag,
# Makefile helm-package).
AI_GATEWAY = ChartPin(
    chart="ai-gateway-helm", version="v1.1.0", repository="oci://docker.io/envoyproxy/ai-gateway-helm",
    images=(ChartImage("docker.io/envoyproxy/ai-gateway-controller", "v1.1.0", "controller.image.tag",
                       DigestForm.TAG),),
)
# The ext_proc sidecar the controller's webhook injects into every Envoy pod, for byModel routing only (edge.routing:
# the webhook sees no pod otherwise, edge/objects.py ai_gateway_chart_values): `--extProcImage=
# {{ extProc.image.repository }}:{{ extProc.image.tag | default .Chart.AppVersion }}` (manifests/charts/
# ai-gateway-helm/templates/deployment.yaml @v1.1.0, values.yaml extProc.image); the tag is set, not left to the
# appVersion, and a digest in chartImageDigests pins it.
AI_GATEWAY_EXTPROC_IMAGE = ChartImage("docker.io/envoyproxy/ai-gateway-extproc", "v1.1.0", "extProc.image.tag",
                                      DigestForm.TAG)
AI_GATEWAY_CRDS = ChartPin(
    chart="ai-gateway-crds-helm", version="v1.1.0", repository="oci://docker.io/envoyproxy/ai-gateway-crds-helm"
)
# CRDs no chart publishes, applied by Pulumi from files in this repository: the bytes reviewed in a
# pull request are the bytes preview and up apply. A release URL would be fetched on every preview,
# unpinned (the provider does not check the HTTP status, so a 404 surfaces as a YAML error), and
# llm-d-router's release workflow re-uploads assets under an existing tag (`gh release upload
# --clobber`). `make reference-fixtures` derives the files from the pinned upstream CRDs (the release
# manifest and config/crd/bases named below; descriptions stripped, schemas and CEL rules as shipped).
# The files ship inside this package (llm_serving/platform/crds/, package data) and are applied from
# their content (platform.crd_manifests), so an installed library needs no checkout and no path.
# The InferencePool CRD (inference.networking.k8s.io/v1) with InferencePoolImport, the two CRDs the
# Gateway API Inference Extension's v1.6.0 release manifest carries (GIE README @v1.6.0).
INFERENCE_POOL_CRDS_VERSION = "v1.6.0"
INFERENCE_POOL_CRDS_FILE = f"gateway-api-inference-extension-{INFERENCE_POOL_CRDS_VERSION}.yaml"
# The endpoint picker (EPP) moved from GIE (last: v1.5.0) to llm-d's router; v0.10.0 (2026-08-17,
# llm-d/llm-d-router commit 71f4f0999f95) is its maintained successor (GIE README @v1.6.0; llm-d-router
# README.md, "API & Code Consolidation"). We deploy it
# from our own manifests, not its chart: the chart sets no securityContext, no PDB and a Recreate
# strategy (checked with `helm template` at v0.10.0), all of which the picker needs in a fail-closed path.
ENDPOINT_PICKER_IMAGE = "ghcr.io/llm-d/llm-d-router-endpoint-picker:v0.10.0"
# Its multi-arch index digest as a public lab's pin list recorded it on 2026-09-19 (amd64 manifest
# sha256:9862ae38...); not checked against ghcr.io from here: `crane digest` it when bumping.
ENDPOINT_PICKER_IMAGE_DIGEST = "sha256:2e516fa1310da7be59b82beb1445362139597d6d553ef04d546716abe3aaaa70"
# The llm-d.ai CRDs the picker reads (InferenceObjective, InferenceModelRewrite, v1alpha2) at the same
# release (llm-d/llm-d-router v0.10.0 config/crd/bases).
LLM_D_ROUTER_CRDS_FILE = "llm-d-router-v0.10.0.yaml"

# EKS managed add-ons, pinned per Kubernetes minor instead of EKS's default for the cluster version,
# which moves whenever AWS publishes a build (a later `pulumi up` would then show no diff but a new
# cluster would get another version than the reviewed one). Sources: the reference folder holds no
# add-on versions; each pin is the add-on build of the upstream release the rest of this file pins:
# - eks-node-monitoring-agent v1.7.0: the chart at aws/eks-node-monitoring-agent tag v1.7.0 (commit
#   c399089, 2026-08-04) sets `nodeAgent.image.tag: v1.7.0-eksbuild.1`, the add-on build EKS ships;
#   the vendored configuration schema (tests/fixtures/reference/addons/, chart 1.7.0) is that chart's.
#   1.6.0 is the first release with the `nodeAgent`/`dcgmAgent` keys our configuration uses.
# - aws-efs-csi-driver v3.4.1: the driver of the aws-efs-csi-driver chart 4.4.1 in the reference
#   folder (appVersion 3.4.1); `v3.4.1-eksbuild.1` is the add-on build public EKS configurations pin.
# - aws-fsx-csi-driver v1.9.0: kubernetes-sigs/aws-fsx-csi-driver's newest release (tag v1.9.0,
#   2026-04-20, chart 1.17.0); `v1.9.0-eksbuild.1` is the add-on build public EKS configurations pin.
# None of these add-ons is built per Kubernetes minor; whether EKS lists each build as compatible with
# the cluster's minor (DescribeAddonVersions) is what the preflight command checks (docs/testing.md).
EKS_ADDON_VERSIONS: dict[str, dict[str, str]] = {
    "eks-node-monitoring-agent": {"1.33": "v1.7.0-eksbuild.1", "1.34": "v1.7.0-eksbuild.1"},
    "aws-efs-csi-driver": {"1.33": "v3.4.1-eksbuild.1", "1.34": "v3.4.1-eksbuild.1"},
    "aws-fsx-csi-driver": {"1.33": "v1.9.0-eksbuild.1", "1.34": "v1.9.0-eksbuild.1"},
}
# How EKS resolves a field the add-on's objects carry with another value than the add-on's own.
# On create, OVERWRITE: a self-managed install of the same driver (a Helm release, a hand-applied
# CSIDriver object) would otherwise fail CreateAddon after the node group's creation; with
# `install*` set the program owns the driver, and an operator who keeps their own sets it false.
# On update, OVERWRITE too: the stack file is the add-on's only configuration (configurationValues);
# PRESERVE would keep a hand edit across version bumps, so the cluster would drift from the review.
EKS_ADDON_RESOLVE_CONFLICTS_ON_CREATE = "OVERWRITE"
EKS_ADDON_RESOLVE_CONFLICTS_ON_UPDATE = "OVERWRITE"

# AWS's EFA device plugin (aws/eks-charts stable/aws-efa-k8s-device-plugin, chart v0.5.30 at commit
# bfe91c4, 2026-07-21, image v0.5.20; the repo has no tags, the gh-pages index lists "v0.5.30").
# Its image is in EKS's own ECR account (values.yaml at bfe91c4; templates/daemonset.yaml prints
# `repository:tag`): `pin-images` resolves it with ecr:BatchGetImage (a pull's manifest read; that registry
# refuses ecr:DescribeImages to other accounts, jetstack/version-checker#167) and AWS credentials.
EFA_DEVICE_PLUGIN = ChartPin(
    chart="aws-efa-k8s-device-plugin", version="v0.5.30", repository="https://aws.github.io/eks-charts",
    images=(ChartImage("602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/aws-efa-k8s-device-plugin", "v0.5.20",
                       "image.tag", DigestForm.TAG),),
)
# LeaderWorkerSet v0.10.0 (kubernetes-sigs/lws tag v0.10.0, 2026-08-11): one group of pods per
# replica of a model larger than one node.
# The chart is pushed with the git tag as its version (hack/push-chart.sh), so the OCI tag is "v0.10.0"; the
# same script sets image.manager to registry.k8s.io/lws/lws at that tag before packaging, and
# templates/manager/deployment.yaml prints `repository:tag`.
LWS = ChartPin(
    chart="lws", version="v0.10.0", repository="oci://registry.k8s.io/lws/charts/lws",
    images=(ChartImage("registry.k8s.io/lws/lws", "v0.10.0", "image.manager.tag", DigestForm.TAG),),
)

PROMETHEUS_OPERATOR_CRDS = ChartPin(
    chart="prometheus-operator-crds", version="31.0.1", repository="https://prometheus-community.github.io/helm-charts"
)

# kedacore/charts v2.20.2 (KEDA 2.20.2 and its CRDs). Its three Deployments (operator, metrics server and
# admission webhooks, all on by default) print `registry/repository:tag | default .Chart.AppVersion`
# (keda/templates/{manager,metrics-server,webhooks}/deployment.yaml), appVersion 2.20.2, no "v".
KEDA = ChartPin(
    chart="keda", version="2.20.2", repository="https://kedacore.github.io/charts",
    images=(
        ChartImage("ghcr.io/kedacore/keda", "2.20.2", "image.keda.tag", DigestForm.TAG),
        ChartImage("ghcr.io/kedacore/keda-metrics-apiserver", "2.20.2", "image.metricsApiServer.tag", DigestForm.TAG),
        ChartImage("ghcr.io/kedacore/keda-admission-webhooks", "2.20.2", "image.webhooks.tag", DigestForm.TAG),
    ),
)

# prometheus-community prometheus-adapter 5.3.0 (adapter v0.12.0): templates/deployment.yaml prints
# `repository:tag | default .Chart.AppVersion` (tag prometheus-adapter-5.3.0).
PROMETHEUS_ADAPTER = ChartPin(
    chart="prometheus-adapter", version="5.3.0", repository="https://prometheus-community.github.io/helm-charts",
    images=(ChartImage("registry.k8s.io/prometheus-adapter/prometheus-adapter", "v0.12.0", "image.tag",
                       DigestForm.TAG),),
)

# kubernetes/autoscaler chart 9.53.0 (2025-12-03), the newest chart whose appVersion is 1.34; later
# charts ship 1.35. Cluster Autoscaler's minor must equal the cluster's (its README, "Releases"), so
# the image tag is chosen per cluster minor: the newest patch of each in the reference snapshot
# (tags cluster-autoscaler-1.34.5 and -1.33.6, 2026-07-22). Chart 9.47.0+ supports 1.33.
# The chart prints `repository:tag` (cluster-autoscaler/charts/cluster-autoscaler/templates/deployment.yaml at
# tag cluster-autoscaler-chart-9.53.0), so one image per pinned tag; a stack runs the one of its minor.
CLUSTER_AUTOSCALER_IMAGE_TAGS: dict[str, str] = {"1.33": "v1.33.6", "1.34": "v1.34.5"}
CLUSTER_AUTOSCALER = ChartPin(
    chart="cluster-autoscaler", version="9.53.0", repository="https://kubernetes.github.io/autoscaler",
    images=tuple(ChartImage("registry.k8s.io/autoscaling/cluster-autoscaler", tag, "image.tag", DigestForm.TAG)
                 for tag in CLUSTER_AUTOSCALER_IMAGE_TAGS.values()),
)

# The EKS cluster version the stack validates its Kubernetes objects against by default.
DEFAULT_KUBERNETES_VERSION = "1.34"

CHARTS: dict[str, ChartPin] = {
    pin.chart: pin
    for pin in (
        NVIDIA_DEVICE_PLUGIN,
        DCGM_EXPORTER,
        KUBE_PROMETHEUS_STACK,
        ENVOY_GATEWAY,
        GATEWAY_CRDS,
        PROMETHEUS_OPERATOR_CRDS,
        AWS_LOAD_BALANCER_CONTROLLER,
        KEDA,
        PROMETHEUS_ADAPTER,
        CLUSTER_AUTOSCALER,
        AI_GATEWAY,
        AI_GATEWAY_CRDS,
        EFA_DEVICE_PLUGIN,
        LWS,
    )
}

# --- A cluster the program creates (cluster.mode: create) ---------------------------------------
# Kubernetes minors EKS offers for a new cluster, with the end of each one's extended support
# (EKS: 14 months standard plus 12 extended; dates from endoflife.date/amazon-eks, which mirrors the
# EKS user guide's release calendar, read 2026-12-01). 1.31's extended support ended 2026-11-26.
EKS_KUBERNETES_VERSIONS: dict[str, str] = {
    "1.32": "2027-03-23",
    "1.33": "2027-07-29",
    "1.34": "2027-12-02",
    "1.35": "2028-03-27",
}

# EKS add-on versions per add-on name, per Kubernetes minor: the program creates exactly these, so a
# minor upgrade moves each add-on in the same reviewed diff. Sources (the latest Amazon EKS type of
# each add-on per minor, as published):
# - kube-proxy: EKS user guide "Manage kube-proxy", version table (docs.amazonaws.cn/zh_cn/eks/latest/
#   userguide/managing-kube-proxy.md: 1.34 v1.34.6-eksbuild.2, 1.33 v1.33.10-eksbuild.2); kube-proxy
#   follows the control plane's minor, so it is the add-on whose version must change on an upgrade.
# - coredns: EKS user guide "Manage CoreDNS", version table (same snapshot: v1.13.2-eksbuild.4 for
#   1.33 to 1.35).
# - vpc-cni: one version serves every supported minor (the user guide's table lists the same build
#   for each); v1.22.3-eksbuild.1 is what `describe-addon-versions --kubernetes-version 1.33` offered
#   on 2026-07-08 (ministryofjustice/cloud-platform-infrastructure PR 4678). Its network policy agent
#   enforces NetworkPolicy when `enableNetworkPolicy` is "true" (EKS user guide, cni-network-policy).
# - eks-pod-identity-agent: v1.3.10-eksbuild.1, the default version in all regions since 2025-11-24
#   (aws/containers-roadmap issue 2684, EKS team comment).
# Confirm before a bump: aws eks describe-addon-versions --kubernetes-version <minor> --addon-name <name>.
ADDON_VERSIONS: dict[str, dict[str, str]] = {
    "vpc-cni": {"1.33": "v1.22.3-eksbuild.1", "1.34": "v1.22.3-eksbuild.1"},
    "kube-proxy": {"1.33": "v1.33.10-eksbuild.2", "1.34": "v1.34.6-eksbuild.2"},
    "coredns": {"1.33": "v1.13.2-eksbuild.4", "1.34": "v1.13.2-eksbuild.4"},
    "eks-pod-identity-agent": {"1.33": "v1.3.10-eksbuild.1", "1.34": "v1.3.10-eksbuild.1"},
}

# The AMI family of the created cluster's CPU node group (EKS AMI type for x86 AL2023 without GPUs).
SYSTEM_NODE_AMI_TYPE = "AL2023_x86_64_STANDARD"
