"""Every default version the stack installs, pinned in one place.

A stack file may override a chart version, but the defaults live only here, so a bump is one
reviewed diff. Each pin matches a reference copy the tests check values against.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ChartPin:
    """A Helm chart at one published version, from its official repository."""

    chart: str
    version: str
    repository: str


# NVIDIA/k8s-device-plugin v0.20.0 (2026-08-19); chart repo per the project's README and the
# EKS user guide's device-plugin procedure.
NVIDIA_DEVICE_PLUGIN = ChartPin(
    chart="nvidia-device-plugin",
    version="0.20.0",
    repository="https://nvidia.github.io/k8s-device-plugin",
)

# NVIDIA/dcgm-exporter tag 4.5.3-4.8.2: DCGM 4.5.3, exporter 4.8.2, chart version 4.8.2.
DCGM_EXPORTER = ChartPin(
    chart="dcgm-exporter",
    version="4.8.2",
    repository="https://nvidia.github.io/dcgm-exporter/helm-charts",
)
# The chart's own default image for 4.8.2; pinned here so a chart bump cannot move it silently.
DCGM_EXPORTER_IMAGE_TAG = "4.5.3-4.8.2-distroless"

# prometheus-community kube-prometheus-stack 88.5.3 (prometheus-operator v0.93.1); installed
# only when a stack asks for its own Prometheus (the dev default).
KUBE_PROMETHEUS_STACK = ChartPin(
    chart="kube-prometheus-stack",
    version="88.5.3",
    repository="https://prometheus-community.github.io/helm-charts",
)

# vLLM's OpenAI-compatible server image at the pinned engine version (flags and metrics in
# tests/fixtures/reference/vllm/0.33.0 were read from this release). Tag convention vX.Y.Z.
VLLM_IMAGE_REPOSITORY = "vllm/vllm-openai"
VLLM_IMAGE_TAG = "v0.33.0"
VLLM_VERSION = "0.33.0"

# The weights Job's image: the official Python image (Docker Hub library/python, multi-arch), a few
# hundred MB instead of the multi-GB vLLM image on a CPU node. It installs huggingface_hub from the
# hashed lock components/serving/stage-requirements.txt (`python -m tools.stage_lock`).
STAGE_PYTHON_VERSION = "3.12"
STAGE_IMAGE = "python:3.12.8-slim-bookworm"
HUGGINGFACE_HUB_VERSION = "2.4.0"

# Envoy Gateway's chart is published to an OCI registry only (release workflow of envoyproxy/gateway
# v1.9.0); the version carries the leading "v".
ENVOY_GATEWAY = ChartPin(chart="gateway-helm", version="v1.9.0", repository="oci://docker.io/envoyproxy/gateway-helm")

# kubernetes-sigs/aws-load-balancer-controller v3.5.0, published in the EKS charts repository.
AWS_LOAD_BALANCER_CONTROLLER = ChartPin(
    chart="aws-load-balancer-controller", version="3.5.0", repository="https://aws.github.io/eks-charts"
)

# Gateway API (standard channel, v1.6.1) and Envoy Gateway CRDs from Envoy's CRD-only chart, published
# with gateway-helm and at its version (envoyproxy/gateway v1.9.0 install-helm.md; facts.md T2.2).
GATEWAY_CRDS = ChartPin(chart="gateway-crds-helm", version="v1.9.0", repository="oci://docker.io/envoyproxy/gateway-crds-helm")

# prometheus-community prometheus-operator-crds 31.0.1 = prometheus-operator v0.93.1, the operator
# kube-prometheus-stack 88.5.3 runs (facts.md T2.3); installed with it, in its place for the CRDs.
PROMETHEUS_OPERATOR_CRDS = ChartPin(
    chart="prometheus-operator-crds", version="31.0.1", repository="https://prometheus-community.github.io/helm-charts"
)

# kedacore/charts v2.20.2 (KEDA 2.20.2 and its CRDs).
KEDA = ChartPin(chart="keda", version="2.20.2", repository="https://kedacore.github.io/charts")

# prometheus-community prometheus-adapter 5.3.0 (adapter v0.12.0).
PROMETHEUS_ADAPTER = ChartPin(
    chart="prometheus-adapter", version="5.3.0", repository="https://prometheus-community.github.io/helm-charts"
)

# kubernetes/autoscaler chart 9.53.0 (2025-12-03), the newest chart whose appVersion is 1.34; later
# charts ship 1.35. Cluster Autoscaler's minor must equal the cluster's (its README, "Releases"), so
# the image tag is chosen per cluster minor: the newest patch of each in the reference snapshot
# (tags cluster-autoscaler-1.34.5 and -1.33.6, 2026-07-22; facts.md T2.1). Chart 9.47.0+ supports 1.33.
CLUSTER_AUTOSCALER = ChartPin(
    chart="cluster-autoscaler", version="9.53.0", repository="https://kubernetes.github.io/autoscaler"
)
CLUSTER_AUTOSCALER_IMAGE_TAGS: dict[str, str] = {"1.33": "v1.33.6", "1.34": "v1.34.5"}

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
    )
}
