"""The drain barrier's preStop: hold the pod only while its own Deployment is being deleted.

Shipped byte for byte in the barrier's pod spec (`python -c <this file> WAIT_SECONDS DEPLOYMENT`, drain.py) and
run by the pinned slim Python image: standard library only. The wait exists for one event: Pulumi deleting the old
node generation's barrier before the old node group. pulumi-kubernetes deletes in the foreground unless told
otherwise (pulumi/pulumi-kubernetes provider/pkg/metadata/overrides.go, DeletionPropagation), so the Deployment
keeps its deletionTimestamp and the foregroundDeletion finalizer until the garbage collector has deleted its
ReplicaSet and, through it, this pod (https://kubernetes.io/docs/concepts/architecture/garbage-collection/
#foreground-deletion; kubernetes pkg/controller/garbagecollector/garbagecollector.go, attemptToDeleteItem, deletes
the dependent of an owner deleted in the foreground in the foreground too). The collector acts on the pod only
after the Deployment's deletionTimestamp is stored, and a GET without resourceVersion reads the latest state
(https://kubernetes.io/docs/reference/using-api/api-concepts/#semantics-for-get-and-list): this read sees it.

Every other way the pod goes leaves its Deployment as it is: an eviction (`kubectl drain`, an EKS managed node
group update of the CPU nodes, Cluster Autoscaler or Karpenter removing a CPU node) or a rollout of the barrier
itself. Then the script returns at once, the container exits on SIGTERM and the Deployment starts a new pod on
another node (issue #42: a fixed sleep held every such drain for the whole wait, and EKS fails a node update with
PodEvictionFailure after 15 minutes per node,
https://docs.aws.amazon.com/eks/latest/userguide/managed-node-update-behavior.html). A Deployment that is gone
(404) holds nothing either: whatever deleted it is not waiting for this pod.

When the Deployment cannot be read (no answer, a refused connection, 401, 403, a 5xx, a missing token), the script
retries every few seconds and, if no read succeeds, holds until the wait is over. It cannot tell a drain from a node
update then, and the two mistakes differ: exiting early in a node update lets EKS terminate the old nodes under
streams still draining, unseen; holding a CPU node's drain is bounded by the same wait as before this check and
shows as a failed or slow drain.
"""

from __future__ import annotations

import argparse
import json
import os
import ssl
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

# Where the kubelet mounts the pod's ServiceAccount token, the cluster's CA and the pod's namespace
# (https://kubernetes.io/docs/tasks/run-application/access-api-from-pod/#without-using-a-proxy).
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
RETRY_SECONDS = 5.0
REQUEST_TIMEOUT_SECONDS = 5.0


def _say(message: str) -> None:
    print(f"drain barrier: {message}", flush=True)


def deployment_url(namespace: str, name: str) -> str:
    # The kubelet gives every container the `kubernetes` Service's address, enableServiceLinks or not (kubernetes
    # pkg/kubelet/kubelet_pods.go, getServiceEnvVarMap); client-go's rest.InClusterConfig reads the same two. An
    # address, so no DNS is needed.
    host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"]
    if ":" in host:  # an IPv6 cluster
        host = f"[{host}]"
    return f"https://{host}:{port}/apis/apps/v1/namespaces/{namespace}/deployments/{name}"


def read_deployment(account: Path, name: str, timeout: float) -> tuple[bool, str]:
    """One read of the Deployment: (hold, why). Raises when it cannot be read."""
    namespace = (account / "namespace").read_text().strip()
    # Read at each attempt: the kubelet rotates the projected token, and a client must reload it
    # (https://kubernetes.io/docs/tasks/configure-pod-container/configure-service-account/
    # #serviceaccount-token-volume-projection).
    token = (account / "token").read_text().strip()
    context = ssl.create_default_context(cafile=str(account / "ca.crt"))
    # Straight to the Service address, whatever proxy variables the image might carry.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context))
    request = urllib.request.Request(  # noqa: S310 - an https URL built above, never a caller's scheme
        deployment_url(namespace, name), headers={"Authorization": f"Bearer {token}", "Accept": "application/json"})
    try:
        with opener.open(request, timeout=timeout) as response:
            deployment = json.load(response)
    except urllib.error.HTTPError as error:
        error.close()
        if error.code == 404:
            return False, f"Deployment {namespace}/{name} is gone"
        raise
    stamp = deployment.get("metadata", {}).get("deletionTimestamp")
    if stamp:
        return True, f"Deployment {namespace}/{name} is being deleted (deletionTimestamp {stamp})"
    return False, f"Deployment {namespace}/{name} is not being deleted (an eviction, a drain or a rollout)"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="drain-barrier-prestop",
                                     description="Hold while the barrier's Deployment is being deleted.")
    parser.add_argument("wait_seconds", type=float, help="the longest vLLM grace period: the most this holds")
    parser.add_argument("deployment", help="the barrier's Deployment, in the pod's own namespace")
    parser.add_argument("--service-account-dir", default=SERVICE_ACCOUNT_DIR)
    parser.add_argument("--retry-seconds", type=float, default=RETRY_SECONDS)
    args = parser.parse_args(argv)
    # Counted from the preStop's start, as the fixed sleep was: the pod's grace period is this wait plus a margin.
    deadline = time.monotonic() + args.wait_seconds
    account = Path(args.service_account_dir)
    said = ""
    while True:
        remaining = deadline - time.monotonic()
        try:
            hold, why = read_deployment(account, args.deployment, max(0.1, min(REQUEST_TIMEOUT_SECONDS, remaining)))
        except Exception as error:  # noqa: BLE001 - any failed read holds: the module docstring says why
            remaining = deadline - time.monotonic()
            failure = f"cannot read Deployment {args.deployment}: {error}"
            if remaining <= 0:
                _say(f"{failure}; held the whole {args.wait_seconds:g} s")
                return 0
            if failure != said:  # once per distinct failure, not every retry
                _say(f"{failure}; retrying, holding at most {remaining:.0f} s more")
                said = failure
            time.sleep(min(args.retry_seconds, remaining))
            continue
        if not hold:
            _say(f"{why}: exiting at once")
            return 0
        remaining = max(0.0, deadline - time.monotonic())
        _say(f"{why}: holding {remaining:.0f} s more, so the old node group's deletion waits for the last replaced "
             "vLLM pod")
        time.sleep(remaining)
        return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
