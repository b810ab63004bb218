"""The drain barrier: what holds a replaced node group's deletion until the last replaced pod has drained (pure).

EKS gives a node of a deleted managed node group 5 minutes to drain, then terminates it (EKS user
guide, "Delete a managed node group": https://docs.aws.amazon.com/eks/latest/userguide/delete-managed-node-group.html),
so a vLLM pod still draining when Pulumi deletes the old group loses every stream past those 5 minutes.
The barrier is a one-pod Deployment per node generation that depends on that generation's node group:
Pulumi deletes a resource only after everything that depends on it (pulumi/pulumi
pkg/resource/deploy/step_generator.go, ScheduleDeletes), so the old barrier goes first, and its pod's
preStop sleeps the longest vLLM grace period before it exits. Every replaced pod started draining
before its rollout completed, which is before the deletions begin, so it has exited by then.
"""

from __future__ import annotations

from typing import Any

from .scheduling import NODE_GENERATION_LABEL

COMPONENT = "node-drain-barrier"
# After the preStop sleep the container exits on SIGTERM at once; the margin only covers the kubelet.
EXIT_MARGIN_SECONDS = 30
# What a delete waits beyond the barrier's grace period: API round trips and the garbage collector.
DELETE_MARGIN_SECONDS = 300
RUN_AS_ID = 65532
# PID 1 ignores SIGTERM without a handler, which would hold the pod to its full grace period.
_MAIN = "import signal, sys; signal.signal(signal.SIGTERM, lambda *_: sys.exit(0)); signal.pause()"


def barrier_name(generation: str) -> str:
    return f"{COMPONENT}-{generation}"


def barrier_grace_seconds(wait_seconds: int) -> int:
    return wait_seconds + EXIT_MARGIN_SECONDS


def barrier_delete_timeout_seconds(wait_seconds: int) -> int:
    """Pulumi's delete timeout of the barrier: its grace period and a margin (the default 10 minutes would
    fail the update while the barrier still holds the old group)."""
    return barrier_grace_seconds(wait_seconds) + DELETE_MARGIN_SECONDS


def barrier_labels(generation: str) -> dict[str, str]:
    return {"app.kubernetes.io/component": COMPONENT, NODE_GENERATION_LABEL: generation}


def barrier_network_policy(generation: str, namespace: str) -> dict[str, Any]:
    """The barrier talks to nothing and nothing talks to it: every ingress and egress denied."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": barrier_name(generation), "namespace": namespace},
        "spec": {"podSelector": {"matchLabels": barrier_labels(generation)}, "policyTypes": ["Ingress", "Egress"]},
    }


def barrier_manifest(generation: str, namespace: str, wait_seconds: int, image: str,
                     container_security: dict[str, Any]) -> dict[str, Any]:
    """The barrier's Deployment. One replica, so an evicted pod comes back; deleted in the foreground
    (pulumi-kubernetes' default; the `pulumi.com/deletionPropagationPolicy` annotation states it so a
    provider default change cannot silently turn the wait off), so the Deployment is gone only once its
    pod has finished the preStop sleep and exited, which is what Pulumi's delete waits for."""
    labels = barrier_labels(generation)
    probe = {"exec": {"command": ["true"]}, "periodSeconds": 60}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": barrier_name(generation),
            "namespace": namespace,
            "labels": labels,
            "annotations": {"pulumi.com/deletionPropagationPolicy": "foreground"},
        },
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    # Not on the GPU nodes it guards (their taint keeps it off): a CPU node's kubelet
                    # runs the sleep whatever happens to the old group.
                    "terminationGracePeriodSeconds": barrier_grace_seconds(wait_seconds),
                    "automountServiceAccountToken": False,
                    "enableServiceLinks": False,
                    # It writes nothing and shares no files: a high UID of its own (Checkov CKV_K8S_40).
                    "securityContext": {"runAsNonRoot": True, "runAsUser": RUN_AS_ID, "runAsGroup": RUN_AS_ID,
                                        "seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [{
                        "name": "barrier",
                        "image": image,
                        "imagePullPolicy": "Always",  # a small image; a restart may wait for the registry
                        "command": ["python", "-c", _MAIN],
                        "lifecycle": {"preStop": {"exec": {"command": ["sleep", str(wait_seconds)]}}},
                        "livenessProbe": probe,
                        "readinessProbe": probe,
                        "resources": {"requests": {"cpu": "10m", "memory": "32Mi"},
                                      "limits": {"cpu": "100m", "memory": "64Mi"}},
                        "securityContext": container_security,
                    }],
                },
            },
        },
    }
