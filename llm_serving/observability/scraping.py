"""The PodMonitor that scrapes every vLLM pod's /metrics (pure, no Pulumi import).

Its target labels (namespace, pod, node) are the ones every autoscaling query, alert and dashboard
of this project selects on, so they are set here explicitly rather than left to operator defaults.
"""

from __future__ import annotations

import re
from typing import Any

from llm_serving.platform import NODE_LABEL, POD_LABEL, check_dns_label

SCRAPE_INTERVAL = "15s"


def pod_monitor(
    *,
    name: str,
    namespace: str,
    selector: dict[str, str],
    port_name: str,
    labels: dict[str, str],
    model_name_from_workload: bool = False,
) -> dict[str, Any]:
    """monitoring.coreos.com/v1 PodMonitor for vLLM pods: /metrics every 15 s.

    Pod-level rather than a ServiceMonitor: each replica is scraped at its own address and the
    Deployment needs no metrics Service. vLLM's --api-key guards only the /v1 routes, so /metrics
    needs no credentials (vLLM security guide, vllm-project/vllm PR #29922).
    """
    check_dns_label("name", name)
    check_dns_label("namespace", namespace)
    if not selector:
        raise ValueError("selector is empty: the PodMonitor would scrape every pod in the namespace")
    # A named container port is an IANA service name: at most 15 characters (core/v1 ContainerPort).
    if not re.match(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", port_name or "") or len(port_name) > 15:
        raise ValueError(f"port_name={port_name!r}: expected a container port name (<= 15 characters)")
    # A model's second revision serves the model's name first, which vLLM puts in its metrics' `model_name`; set from
    # the pod's workload name instead, every query of this project keeps one revision's series apart from the other's.
    # A target label wins over a scraped one of the same name, which becomes `exported_model_name` (Prometheus
    # scrape_config `honor_labels: false`, the PodMonitor's default).
    workload = ([{"sourceLabels": ["__meta_kubernetes_pod_label_app_kubernetes_io_name"], "targetLabel": "model_name",
                  "action": "replace"}] if model_name_from_workload else [])
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
        "spec": {
            "selector": {"matchLabels": dict(selector)},
            "namespaceSelector": {"matchNames": [namespace]},
            "podMetricsEndpoints": [
                {
                    "port": port_name,
                    "path": "/metrics",
                    "interval": SCRAPE_INTERVAL,
                    # The operator already sets `namespace` and `pod` on PodMonitor targets; the pod
                    # rule makes that explicit (the autoscaling and alert queries depend on it), and
                    # `node` lets a serving problem be matched with the GPU alerts of that node.
                    "relabelings": [
                        {"sourceLabels": ["__meta_kubernetes_pod_name"], "targetLabel": POD_LABEL, "action": "replace"},
                        {
                            "sourceLabels": ["__meta_kubernetes_pod_node_name"],
                            "targetLabel": NODE_LABEL,
                            "action": "replace",
                        },
                        *workload,
                    ],
                }
            ],
        },
    }
