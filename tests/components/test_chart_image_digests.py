"""Chart images by digest, component by component: each release takes the digest of each image its chart runs through
the values key the chart's templates read (llm_serving/platform/versions.py), in the form they read it, and keeps
every other value; a chart at another version than its pin gets none, since its images are not the listed ones."""

from __future__ import annotations

from typing import Any

from llm_serving.gpu import ClusterAutoscaler, NvidiaDevicePlugin, NvidiaDevicePluginArgs
from llm_serving.observability import PrometheusStack
from llm_serving.platform import versions
from llm_serving.stack import parts
from tests.support.components import committed_args, run, site
from tests.support.reference import helm_value_errors
from tests.support.stack_variants import fake_digest

RELEASE = "kubernetes:helm.sh/v3:Release"
# A digest for every image versions.py lists (made up: no registry is reachable here).
DIGESTS = {image.reference: fake_digest(image.reference)
           for pin in versions.CHARTS.values() for image in pin.images}


def release_values(result: Any) -> dict[str, Any]:
    (release,) = [r for r in result.resources if r["type"] == RELEASE]
    return release["inputs"]["values"]


def hex_of(reference: str) -> str:
    return DIGESTS[reference].removeprefix("sha256:")


def test_the_device_plugin_pins_its_image_and_the_node_feature_discovery_subcharts():
    args = NvidiaDevicePluginArgs(namespace="nvidia-device-plugin", chart_version="0.20.0", image_digests=DIGESTS)
    values = release_values(run(lambda: NvidiaDevicePlugin("nvidia-device-plugin", args)))
    # Both templates print `repository:tag`: the tag carries the digest.
    assert values["image"] == {"tag": f"v0.20.0@{DIGESTS['nvcr.io/nvidia/k8s-device-plugin:v0.20.0']}"}
    assert values["nfd"]["image"] == {
        "tag": f"v0.19.0@{DIGESTS['registry.k8s.io/nfd/node-feature-discovery:v0.19.0']}"}
    # Laid over the scheduling values, not in their place.
    assert values["nfd"]["worker"]["tolerations"] and values["gfd"] == {"enabled": True}
    assert helm_value_errors("nvidia-device-plugin", "0.20.0", values) == []
    # At another chart version the listed images are not the chart's: it runs its own tags.
    other = NvidiaDevicePluginArgs(namespace="nvidia-device-plugin", chart_version="0.19.0", image_digests=DIGESTS)
    values = release_values(run(lambda: NvidiaDevicePlugin("nvidia-device-plugin", other)))
    assert "image" not in values and "image" not in values["nfd"]


def test_kube_prometheus_stack_takes_each_digest_in_the_form_its_template_reads():
    args = parts.prometheus(committed_args("dev", chartImageDigests=DIGESTS))
    assert args is not None
    values = release_values(run(lambda: PrometheusStack("prometheus", args)))
    operator = "quay.io/prometheus-operator/"
    # kube-prometheus-stack and Grafana append `@sha256:<sha>`: the hex alone.
    assert values["prometheusOperator"] == {
        "image": {"sha": hex_of(f"{operator}prometheus-operator:v0.93.1")},
        "prometheusConfigReloader": {"image": {"sha": hex_of(f"{operator}prometheus-config-reloader:v0.93.1")}},
        "admissionWebhooks": {"patch": {"image": {"sha": hex_of("ghcr.io/jkroepke/kube-webhook-certgen:1.8.7")}}},
    }
    assert values["prometheus"]["prometheusSpec"]["image"] == {
        "sha": hex_of("quay.io/prometheus/prometheus:v3.14.0-distroless")}
    assert values["prometheus"]["prometheusSpec"]["retention"] == "15d"
    assert values["alertmanager"] == {"alertmanagerSpec": {"image": {
        "sha": hex_of("quay.io/prometheus/alertmanager:v0.34.0")}}}
    assert values["grafana"] == {
        "admin": {"existingSecret": "grafana-admin"},
        "image": {"sha": hex_of("docker.io/grafana/grafana:13.2.0")},
        "sidecar": {"image": {"sha": hex_of("quay.io/kiwigrid/k8s-sidecar:2.10.1")}},
    }
    # kube-state-metrics and node-exporter append `@<digest>`: the whole `sha256:<hex>`.
    assert values["kube-state-metrics"] == {"image": {
        "sha": DIGESTS["registry.k8s.io/kube-state-metrics/kube-state-metrics:v2.20.0"]}}
    assert values["prometheus-node-exporter"] == {"image": {
        "digest": DIGESTS["quay.io/prometheus/node-exporter:v1.12.1-distroless"]}}
    assert helm_value_errors("kube-prometheus-stack", "88.5.3", values) == []


def test_the_cluster_autoscaler_pins_the_image_of_its_clusters_minor():
    # Its values are an Output (the region): the digest is laid over them once they resolve.
    args = committed_args("dev", chartImageDigests=DIGESTS, cluster={"kubernetesVersion": "1.33"})
    autoscaler = parts.cluster_autoscaler(args, site(args))
    assert autoscaler is not None
    values = release_values(run(lambda: ClusterAutoscaler("cluster-autoscaler", autoscaler)))
    assert values["image"] == {
        "tag": f"v1.33.6@{DIGESTS['registry.k8s.io/autoscaling/cluster-autoscaler:v1.33.6']}"}
    assert values["awsRegion"] == "us-east-1"
    assert helm_value_errors("cluster-autoscaler", "9.53.0", values) == []
