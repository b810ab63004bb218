"""The drain barrier: what holds a replaced node group's deletion until the last replaced pod has drained (pure).

EKS gives a node of a deleted managed node group 5 minutes to drain, then terminates it (EKS user
guide, "Delete a managed node group": https://docs.aws.amazon.com/eks/latest/userguide/delete-managed-node-group.html),
so a vLLM pod still draining when Pulumi deletes the old group loses every stream past those 5 minutes.
The barrier is a one-pod Deployment per node generation that depends on that generation's node group:
Pulumi deletes a resource only after everything that depends on it (pulumi/pulumi
pkg/resource/deploy/step_generator.go, ScheduleDeletes), so the old barrier goes first, and its pod's
preStop holds it the longest vLLM grace period before it exits. Every replaced pod started draining
before its rollout completed, which is before the deletions begin, so it has exited by then.

The pod runs on a CPU node, so it is also evicted whenever a CPU node is drained (an EKS managed node group
update, Cluster Autoscaler or Karpenter removing the node, `kubectl drain`). A fixed sleep held each of those
drains for the whole wait (issue #42). The preStop (barrier_prestop.py) therefore holds only while its own
Deployment is being deleted, which it reads from the API server with a token of its own: a ServiceAccount whose
Role may `get` that one Deployment, and a NetworkPolicy that lets it reach the API server and nothing else.
Evicted, the pod exits at once and its Deployment starts another on a remaining CPU node. No
PodDisruptionBudget selects it, so an eviction is never refused either.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from . import barrier_prestop
from .scheduling import NODE_GENERATION_LABEL

COMPONENT = "node-drain-barrier"
# After the preStop's hold the container exits on SIGTERM at once; the margin covers the preStop's Python start
# (before its hold is counted) and the kubelet.
EXIT_MARGIN_SECONDS = 30
# What a delete waits beyond the barrier's grace period: API round trips and the garbage collector.
DELETE_MARGIN_SECONDS = 300
RUN_AS_ID = 65532
# PID 1 ignores SIGTERM without a handler, which would hold the pod to its full grace period.
_MAIN = "import signal, sys; signal.signal(signal.SIGTERM, lambda *_: sys.exit(0)); signal.pause()"
# The preStop, byte for byte: a change to it rolls the barrier's pod, which costs no wait from this version on
# (an old pod whose Deployment is not being deleted exits at once); the first roll onto it still waits out the
# replaced pod's old fixed sleep once.
PRE_STOP_SOURCE = Path(barrier_prestop.__file__).read_text(encoding="utf-8")
# The EKS control plane serves the API on TCP 443, the `kubernetes` Service's port and its endpoints' (the nodes'
# minimum rules: TCP 443 out to the cluster security group, https://docs.aws.amazon.com/eks/latest/userguide/
# sec-group-reqs.html#security-group-restricting-cluster-traffic); the endpoint pickers reach it the same way.
API_SERVER_PORT = 443


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


def barrier_pre_stop(generation: str, wait_seconds: int) -> list[str]:
    """The preStop command: hold up to `wait_seconds` while the generation's barrier Deployment is being deleted."""
    return ["python", "-c", PRE_STOP_SOURCE, str(wait_seconds), barrier_name(generation)]


def barrier_network_policy(generation: str, namespace: Any) -> dict[str, Any]:
    """Nothing talks to the barrier; it talks to the Kubernetes API server only (TCP 443, no DNS: the preStop
    connects to the address in KUBERNETES_SERVICE_HOST).

    By address it is every address, as for the endpoint pickers (llm_serving/routing/objects.py): the pod reaches
    the API server through the `kubernetes` Service's cluster IP, which kube-proxy rewrites to the control plane's
    network interfaces in the cluster's subnets, and whether a NetworkPolicy sees the address before or after that
    rewrite is the network plugin's choice (https://kubernetes.io/docs/concepts/services-networking/
    network-policies/, "Behavior of to and from selectors"); neither address is known when the stack renders
    (the Service range is the cluster's, the interfaces are EKS's own and change with it). What the pod could do
    with it is bounded by its token: `get` on its own Deployment."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": barrier_name(generation), "namespace": namespace},
        "spec": {
            "podSelector": {"matchLabels": barrier_labels(generation)},
            "policyTypes": ["Ingress", "Egress"],
            "egress": [{"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}, {"ipBlock": {"cidr": "::/0"}}],
                        "ports": [{"protocol": "TCP", "port": API_SERVER_PORT}]}],
        },
    }


def barrier_service_account(generation: str, namespace: Any) -> dict[str, Any]:
    """The preStop's identity. No token in pods that name it unless they ask (the barrier's pod does): a pod's
    automountServiceAccountToken overrides its ServiceAccount's (https://kubernetes.io/docs/tasks/
    configure-pod-container/configure-service-account/#opt-out-of-api-credential-automounting)."""
    name = barrier_name(generation)
    return {"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": name, "namespace": namespace, "labels": barrier_labels(generation)},
            "automountServiceAccountToken": False}


def barrier_role(generation: str, namespace: Any) -> dict[str, Any]:
    """`get` on the barrier's own Deployment and nothing else: RBAC's resourceNames narrows a rule to named
    objects (https://kubernetes.io/docs/reference/access-authn-authz/rbac/#referring-to-resources)."""
    name = barrier_name(generation)
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": name, "namespace": namespace, "labels": barrier_labels(generation)},
            "rules": [{"apiGroups": ["apps"], "resources": ["deployments"], "resourceNames": [name],
                       "verbs": ["get"]}]}


def barrier_role_binding(generation: str, namespace: Any) -> dict[str, Any]:
    name = barrier_name(generation)
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": name, "namespace": namespace, "labels": barrier_labels(generation)},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]}


def barrier_manifest(generation: str, namespace: Any, wait_seconds: int, image: str,
                     container_security: dict[str, Any]) -> dict[str, Any]:
    """The barrier's Deployment. One replica, so an evicted pod comes back; deleted in the foreground
    (pulumi-kubernetes' default, provider/pkg/metadata/overrides.go; the `pulumi.com/deletionPropagationPolicy`
    annotation states it so a provider default change cannot silently turn the wait off), so the Deployment keeps
    its deletionTimestamp, which is what the preStop holds on, and is gone only once its pod has held and exited,
    which is what Pulumi's delete waits for."""
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
                    # runs the hold whatever happens to the old group.
                    "terminationGracePeriodSeconds": barrier_grace_seconds(wait_seconds),
                    # The preStop reads its Deployment with this token; the Role allows nothing more.
                    "serviceAccountName": barrier_name(generation),
                    "automountServiceAccountToken": True,
                    # No other Service's variables; the API server's are set regardless (barrier_prestop.py).
                    "enableServiceLinks": False,
                    # It writes nothing and shares no files: a high UID of its own (Checkov CKV_K8S_40).
                    "securityContext": {"runAsNonRoot": True, "runAsUser": RUN_AS_ID, "runAsGroup": RUN_AS_ID,
                                        "seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [{
                        "name": "barrier",
                        "image": image,
                        "imagePullPolicy": "Always",  # a small image; a restart may wait for the registry
                        "command": ["python", "-c", _MAIN],
                        "lifecycle": {"preStop": {"exec": {"command": barrier_pre_stop(generation, wait_seconds)}}},
                        "livenessProbe": probe,
                        "readinessProbe": probe,
                        # Peak resident memory, both processes together: about 32 MB of the 64 Mi (the idle main
                        # one 9.5 MB, the preStop 22 MB with ssl and urllib loaded, measured on CPython 3.11).
                        "resources": {"requests": {"cpu": "10m", "memory": "32Mi"},
                                      "limits": {"cpu": "100m", "memory": "64Mi"}},
                        "securityContext": container_security,
                    }],
                },
            },
        },
    }
