"""Manifests of the deploy gate (pure): per model a ConfigMap holding the probe and its settings and
the Job that runs them, and one NetworkPolicy fencing every verification pod to DNS, the edge and
the vLLM pods. llm_serving/verification/job.py declares them.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from . import eval_gate, probe

NAMESPACE_LABEL = "kubernetes.io/metadata.name"  # set on every namespace by the API server

PROBE_SOURCE = Path(probe.__file__).read_text()
# The accuracy gate's program and the hashed lock of its harness (tools/stage_lock.py writes it): the eval Job runs
# the one from its ConfigMap after installing the other's wheels, staged on the weights volume.
EVAL_SOURCE = Path(eval_gate.__file__).read_text()
EVAL_REQUIREMENTS = Path(eval_gate.__file__).with_name("eval-requirements.txt").read_text()
SELECTOR = {"app.kubernetes.io/component": "verify"}
CONFIG_DIR = "/etc/verify"
KEY_DIR = "/var/run/secrets/llm-serving"
TERMINATION_LOG = "/dev/termination-log"
# `nobody` in the Debian-based python image: any non-root UID works, the probe writes nothing but
# its termination message (a file the kubelet mounts writable).
RUN_AS_UID = 65534
EDGE_PORT = 443


def fingerprint(*parts: str) -> str:
    """Ten hex digits naming what a Job verifies: a new probe, new settings or a new deploy of the
    model is a new Job (its pod template is immutable, and a Job runs once)."""
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:10]


def configmap(name: str, namespace: str, model_name: str, settings: probe.Settings) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace,
                     "labels": {"app.kubernetes.io/name": model_name, **SELECTOR}},
        "data": {"probe.py": PROBE_SOURCE, "settings.json": json.dumps(settings.to_json(), indent=2, sort_keys=True)},
    }


# Every gate container: the `restricted` profile with a read-only root filesystem.
CONTAINER_SECURITY = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "privileged": False,
                      "readOnlyRootFilesystem": True, "runAsNonRoot": True}


def pod_security(*, fs_group: bool = True) -> dict[str, Any]:
    """A gate pod's user: `nobody`, RuntimeDefault seccomp; `fs_group` for a pod whose volumes are all its own."""
    return {"runAsNonRoot": True, "runAsUser": RUN_AS_UID, "runAsGroup": RUN_AS_UID,
            **({"fsGroup": RUN_AS_UID} if fs_group else {}), "seccompProfile": {"type": "RuntimeDefault"}}


def key_volume(api_key_secret: str) -> dict[str, Any]:
    """The key as a file: never in the pod spec, the environment or an argument."""
    return {"name": "api-key", "secret": {"secretName": api_key_secret,
                                          "items": [{"key": "api-key", "path": "api-key"}], "defaultMode": 0o440}}


def one_shot_job(*, labels: dict[str, str], deadline_seconds: int, security: dict[str, Any],
                 pod: dict[str, Any]) -> dict[str, Any]:
    """A gate's Job: one attempt (backoffLimit 0): a gate that retried would hide a flaky endpoint, and a second run
    would only repeat its requests. It is kept after it ends (no TTL): its log and termination message are the record
    of the deploy until the next one replaces it. `pod` is the rest of the pod spec (placement, containers, volumes)."""
    return {
        "backoffLimit": 0,
        "activeDeadlineSeconds": deadline_seconds,
        "template": {
            "metadata": {"labels": labels},
            "spec": {"restartPolicy": "Never", "automountServiceAccountToken": False, "enableServiceLinks": False,
                     "securityContext": security, **pod},
        },
    }


def job_spec(*, model_name: str, configmap_name: str, image: str, mode: str, api_key_secret: str,
             deadline_seconds: int) -> dict[str, Any]:
    """The deploy gate's Job (`one_shot_job`): the probe from its ConfigMap, the key as a file."""
    return one_shot_job(labels={"app.kubernetes.io/name": model_name, **SELECTOR}, deadline_seconds=deadline_seconds,
                        security=pod_security(), pod={
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "containers": [{
            "name": "verify",
            "image": image,
            # Pinned by digest, so Always costs one manifest check and runs the same bytes.
            "imagePullPolicy": "Always",
            "command": ["python3", f"{CONFIG_DIR}/probe.py", "--settings", f"{CONFIG_DIR}/settings.json",
                        "--api-key-file", f"{KEY_DIR}/api-key", "--mode", mode,
                        "--termination-log", TERMINATION_LOG],
            "env": [{"name": "PYTHONDONTWRITEBYTECODE", "value": "1"},
                    {"name": "PYTHONUNBUFFERED", "value": "1"}],
            # The failing lines, where pulumi-kubernetes' Job await prints them when the Job fails.
            "terminationMessagePath": TERMINATION_LOG,
            "terminationMessagePolicy": "FallbackToLogsOnError",
            # One thread per concurrent stream: CPU for parsing a few thousand events a second.
            "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "1Gi"}},
            "securityContext": CONTAINER_SECURITY,
            "volumeMounts": [{"name": "probe", "mountPath": CONFIG_DIR, "readOnly": True},
                             {"name": "api-key", "mountPath": KEY_DIR, "readOnly": True}],
        }],
        "volumes": [{"name": "probe", "configMap": {"name": configmap_name}}, key_volume(api_key_secret)],
    })


def dns_egress() -> dict[str, Any]:
    """The cluster's DNS (CoreDNS in kube-system, label k8s-app: kube-dns), over UDP and TCP."""
    return {"to": [{"namespaceSelector": {"matchLabels": {NAMESPACE_LABEL: "kube-system"}},
                    "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
            "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]}


def network_policy(*, namespace: str, edge_namespace: str, model_selector: dict[str, str], port: int,
                   edge_pod_ports: tuple[int, ...] = ()) -> dict[str, Any]:
    """Nothing in; out only to DNS, the edge's HTTPS listener and the vLLM pods' API port.

    The edge is reached as clients reach it, through its load balancer, whose addresses AWS assigns
    (an NLB's or ALB's IPs, public for internet-facing): no selector can name them, so HTTPS goes to
    any address; the edge's own pods also match, for a Gateway address that resolves inside.
    """
    dns = dns_egress()
    edge = {"to": [{"namespaceSelector": {"matchLabels": {NAMESPACE_LABEL: edge_namespace}}},
                   {"ipBlock": {"cidr": "0.0.0.0/0"}}, {"ipBlock": {"cidr": "::/0"}}],
            "ports": [{"protocol": "TCP", "port": EDGE_PORT}]}
    service = {"to": [{"podSelector": {"matchLabels": dict(model_selector)}}],
               "ports": [{"protocol": "TCP", "port": port}]}
    # The edge's proxies reached through an in-cluster Service: a policy sees the pod's own port after the
    # Service's translation (Kubernetes docs, Network Policies: rules name pod ports), only in the edge namespace.
    inside = [{"to": [{"namespaceSelector": {"matchLabels": {NAMESPACE_LABEL: edge_namespace}}}],
               "ports": [{"protocol": "TCP", "port": p} for p in edge_pod_ports]}] if edge_pod_ports else []
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "verification", "namespace": namespace},
        "spec": {"podSelector": {"matchLabels": dict(SELECTOR)}, "policyTypes": ["Ingress", "Egress"],
                 "ingress": [], "egress": [dns, edge, *inside, service]},
    }
