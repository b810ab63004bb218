"""Tests for llm_serving/observability/scraping.py: the PodMonitor every autoscaling query, alert and
dashboard depends on for its namespace, pod and node labels."""

from __future__ import annotations

import re

import pytest

from llm_serving.observability.scraping import pod_monitor
from llm_serving.platform import NODE_LABEL
from tests.support.reference import custom_resource_errors

TARGET_LABELS = {"namespace", "pod", "node"}


SELECTOR = {"app.kubernetes.io/name": "llama-70b", "app.kubernetes.io/component": "vllm"}


def test_pod_monitor_is_exactly_as_designed() -> None:
    monitor = pod_monitor(
        name="llama-70b",
        namespace="llm-serving",
        selector=SELECTOR,
        port_name="http",
        labels={"release": "kube-prometheus-stack"},
    )
    assert monitor == {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": {"name": "llama-70b", "namespace": "llm-serving", "labels": {"release": "kube-prometheus-stack"}},
        "spec": {
            "selector": {"matchLabels": SELECTOR},
            "namespaceSelector": {"matchNames": ["llm-serving"]},
            "podMetricsEndpoints": [
                {
                    "port": "http",
                    "path": "/metrics",
                    "interval": "15s",
                    "relabelings": [
                        {"sourceLabels": ["__meta_kubernetes_pod_name"], "targetLabel": "pod", "action": "replace"},
                        {
                            "sourceLabels": ["__meta_kubernetes_pod_node_name"],
                            "targetLabel": "node",
                            "action": "replace",
                        },
                    ],
                }
            ],
        },
    }
    assert custom_resource_errors(monitor) == []


def test_pod_monitor_target_labels_are_the_ones_the_queries_rely_on() -> None:
    relabeled = {
        r["targetLabel"]
        for r in pod_monitor(name="m", namespace="n", selector={"a": "b"}, port_name="http", labels={})["spec"][
            "podMetricsEndpoints"
        ][0]["relabelings"]
    }
    # namespace is the operator's own target label on PodMonitor targets; pod and node are ours.
    assert relabeled | {"namespace"} == TARGET_LABELS
    assert NODE_LABEL == "node"


def test_pod_monitor_does_not_share_the_callers_dicts() -> None:
    labels = {"release": "x"}
    monitor = pod_monitor(name="m", namespace="n", selector=SELECTOR, port_name="http", labels=labels)
    monitor["metadata"]["labels"]["extra"] = "y"
    assert labels == {"release": "x"}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"selector": {}}, "selector is empty"),
        ({"port_name": "metrics-port-too-long"}, "port_name="),
        ({"namespace": "Bad"}, "namespace='Bad'"),
    ],
)
def test_pod_monitor_rejects_nonsense(kwargs: dict, message: str) -> None:
    base = {"name": "m", "namespace": "n", "selector": {"a": "b"}, "port_name": "http", "labels": {}}
    with pytest.raises(ValueError, match=re.escape(message)):
        pod_monitor(**{**base, **kwargs})
