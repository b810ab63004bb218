"""The image pre-pull DaemonSet: every GPU node pulls the vLLM images before a replica needs them (pure).

One pod per GPU node: an init container per image that exits at once (its pull is the point) and a
main container per image that sleeps, so the image stays in use and kubelet's image garbage collection
never removes it. Restricted like every pod of ours; a few millicores and MiB, tolerating the GPU taint.

Why a DaemonSet, not a launch-template user-data pull or SOCI (docs/components.md, "Images already on the
node"): it works unchanged on both EKS GPU AMI families of a managed node group (AL2023 and Bottlerocket),
needs no launch template of our own (a user-data change replaces the node group's template and rolls
every node) and no registry-side index; SOCI's parallel pull ships in Bottlerocket (v1.44.0 release
notes: "Add soci-snapshotter support to kubernetes variants") but not in the AL2023 NVIDIA AMI this
stack pins by default, and SOCI lazy loading needs an index pushed beside an image we do not publish.
A DaemonSet pod starts only once its node has joined, so it races the first replica on a new node; it
buys the second and later replicas, restarts after an eviction and rollouts with the same image.
"""

from __future__ import annotations

from typing import Any

from . import engine

COMPONENT = "image-prepull"
# Enough for `sleep`: the requests only have to make the pod schedulable beside the vLLM pods, which
# take their node share (engine.pod_resources); a limit keeps a runaway from touching the GPU pods.
PREPULL_RESOURCES = {"requests": {"cpu": "1m", "memory": "8Mi"}, "limits": {"cpu": "10m", "memory": "16Mi"}}
LABELS = {"app.kubernetes.io/name": COMPONENT, "app.kubernetes.io/part-of": "llm-serving"}


def prepull_name(namespace: str) -> str:
    return f"{namespace}-{COMPONENT}"


def prepull_daemonset(*, namespace: str, images: list[str], node_selector: dict[str, str],
                      tolerations: list[dict[str, Any]]) -> dict[str, Any]:
    """The DaemonSet manifest; `images` each by the reference the Deployments use (digest when set)."""
    if not images:
        raise ValueError("a pre-pull DaemonSet needs at least one image")
    unique = sorted(set(images))
    labels = LABELS
    security = engine.container_security_context()

    def container(role: str, index: int, image: str, command: list[str]) -> dict[str, Any]:
        return {"name": f"{role}-{index}", "image": image, "imagePullPolicy": "IfNotPresent",
                "command": command, "resources": PREPULL_RESOURCES, "securityContext": security}

    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": prepull_name(namespace), "namespace": namespace, "labels": labels,
                     # Best effort, and nothing waits for it: pulumi-kubernetes awaits a DaemonSet's rollout
                     # (10 minutes by default), and an image change rolls one node at a time, a full pull
                     # each, which on a few nodes outlasts any fixed timeout and would fail the `up`.
                     "annotations": {"pulumi.com/skipAwait": "true"}},
        "spec": {
            "selector": {"matchLabels": labels},
            # One node at a time when the image changes: every other node keeps the old image in use
            # until its own pod is replaced, and the new pull never takes all nodes' disk bandwidth at once.
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": node_selector,
                    "tolerations": tolerations,
                    "automountServiceAccountToken": False,
                    "enableServiceLinks": False,
                    "terminationGracePeriodSeconds": 1,
                    "securityContext": engine.pod_security_context(),
                    "initContainers": [container("pull", i, image, ["/bin/sh", "-c", "exit 0"])
                                       for i, image in enumerate(unique)],
                    "containers": [container("hold", i, image, ["sleep", "infinity"])
                                   for i, image in enumerate(unique)],
                },
            },
        },
    }


def prepull_network_policy(namespace: str) -> dict[str, Any]:
    """The pre-pull pods talk to nothing and nothing talks to them (the kubelet pulls, not the pod): every
    ingress and egress denied, so a compromised image gains no network from this pod."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": prepull_name(namespace), "namespace": namespace, "labels": LABELS},
        "spec": {"podSelector": {"matchLabels": LABELS}, "policyTypes": ["Ingress", "Egress"]},
    }
