"""Multi-node replicas as LeaderWorkerSet groups (pure, no Pulumi import).

A model larger than one node runs as pipeline stages, one pod of all the node's GPUs per stage
(TP within a node, PP across nodes: capacity.plan). LeaderWorkerSet v0.10.0 (kubernetes-sigs/lws) keeps
the pods of one replica together as a group: the leader (worker index 0) runs vLLM's OpenAI server
and backs the Service, the workers run headless ranks, and when any pod of a group restarts the
whole group is recreated (restartPolicy RecreateGroupOnPodRestart), because an engine missing a rank
cannot serve. Field names and defaults: the CRD (tests/fixtures/reference/crds) and
api/leaderworkerset/v1/leaderworkerset_types.go at v0.10.0.
"""

from __future__ import annotations

from typing import Any

LWS_API = "leaderworkerset.x-k8s.io/v1"
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
WORKER_COMPONENT = "vllm-worker"
# Pulumi waits on a custom resource only when told what to wait for (pulumi-kubernetes 4.18+):
# LeaderWorkerSet sets `Available` once every group is ready on the current revision. An update is not taken for
# done on the old status: the provider's condition check refuses a status whose observedGeneration is older than
# metadata.generation (pulumi-kubernetes provider/pkg/await/condition/kubectl.go, getObservedGeneration), and lws
# writes status.observedGeneration with the conditions of the same reconcile (its v0.10.0 CRD carries the field;
# pkg/controllers/leaderworkerset_controller.go updateStatus).
WAIT_FOR = "condition=Available"
# NCCL over EFA through libfabric (aws/aws-ofi-nccl#67, NVIDIA/TensorRT-LLM#17208,
# aws/sagemaker-hyperpod-cli#306): the EFA provider, GPUDirect RDMA, and fork safety for the Python
# workers vLLM forks; NCCL_DEBUG=INFO logs "NET/OFI" once at start, the only sign that NCCL uses EFA
# rather than falling back to TCP sockets (NVIDIA-NeMo/RL#1973).
EFA_ENV: tuple[dict[str, str], ...] = (
    {"name": "FI_PROVIDER", "value": "efa"},
    {"name": "FI_EFA_USE_DEVICE_RDMA", "value": "1"},
    {"name": "FI_EFA_FORK_SAFE", "value": "1"},
    {"name": "NCCL_DEBUG", "value": "INFO"},
)
EFA_RESOURCE = "vpc.amazonaws.com/efa"
# Huge pages libfabric registers buffers in: AWS's NCCL example on p5 requests 5120Mi (EKS user
# guide, node-efa); the EFA-enabled AMIs pre-allocate 5128 x 2 MiB.
EFA_HUGEPAGES = "5120Mi"


def efa_resources(resources: dict[str, Any], efa_interfaces: int) -> dict[str, Any]:
    """The container's resources plus every EFA interface of the node and its huge pages (extended
    resources and huge pages need requests equal to limits)."""
    if efa_interfaces == 0:
        return resources
    extra = {EFA_RESOURCE: str(efa_interfaces), "hugepages-2Mi": EFA_HUGEPAGES}
    return {
        "requests": {**resources.get("requests", {}), **extra},
        "limits": {**resources.get("limits", {}), **extra},
    }


def _copied(value: Any) -> Any:
    """A copy of the dicts and lists of a container spec, sharing what they hold: an S3 stack's env holds
    Pulumi Outputs (the bucket's region), which refuse to be deep-copied outside serialization."""
    if isinstance(value, dict):
        return {k: _copied(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copied(v) for v in value]
    return value


# A worker's preStop: wait while the leader's engine still runs, at most `bound` seconds. What vLLM 0.33.0 does
# (the vllm==0.33.0 wheel): with --nnodes > 1 every rank joins torch.distributed at tcp://--master-addr:--master-port
# (distributed/parallel_state.py init_distributed_environment), so global rank 0 - the leader's first GPU worker -
# hosts the TCPStore on the master port, listening on every interface, and every rank of this pod holds a client
# connection to it for the engine's life (torch rendezvous.py: TCPStore(is_master=rank == 0)); the store closes
# only when the engine's workers shut down (destroy_distributed_environment, from WorkerProc.shutdown), after the
# API server's --shutdown-timeout drain. So the leader is the remote end of this pod's connections to that port
# (/proc/net/tcp, tcp6), and a refused or unanswered connection to it means its engine is gone.
# Any TCP state counts, not only ESTABLISHED: once the old leader has exited, the ranks' sockets sit in
# CLOSE_WAIT (torch does not close them), and that is exactly when lws deletes the workers. Never the group's
# leader name (LWS_LEADER_ADDRESS): lws recreates the leader under it as soon as the old one is gone, the new
# rank 0 opens its store before its workers join, and this rank would wait out the bound while holding the name
# the new group needs (issue #42). No such connection at all: this rank's engine is connected to no leader, so
# there is nothing to drain. Standard library only: the image's python3.
WORKER_PRE_STOP = """\
import socket, sys, time
bound, port, every, wait = float(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])


def leader_of_this_engine():
    found = {}
    for path, family in (("/proc/net/tcp", socket.AF_INET), ("/proc/net/tcp6", socket.AF_INET6)):
        try:
            rows = open(path).read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            address, remote_port = fields[2].rsplit(":", 1)
            if int(remote_port, 16) == port:
                raw = bytes.fromhex(address)  # little-endian 32-bit words
                raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
                found.setdefault(fields[3] == "01", socket.inet_ntop(family, raw))  # 01: ESTABLISHED first
    return found.get(True) or found.get(False)


leader = leader_of_this_engine()
end = time.monotonic() + bound
while leader and time.monotonic() < end:
    try:
        socket.create_connection((leader, port), timeout=wait).close()
    except OSError:
        break
    time.sleep(max(0.0, min(every, end - time.monotonic())))
"""
LEADER_POLL_SECONDS = 5
# A leader whose pod is gone answers nothing: the connection attempt times out rather than being refused.
LEADER_CONNECT_TIMEOUT_SECONDS = 2


def worker_pre_stop(drain_seconds: int, master_port: int) -> list[str]:
    return ["python3", "-c", WORKER_PRE_STOP, str(drain_seconds), str(master_port), str(LEADER_POLL_SECONDS),
            str(LEADER_CONNECT_TIMEOUT_SECONDS)]


def worker_container(leader: dict[str, Any], worker_args: list[str], drain_seconds: int,
                     master_port: int) -> dict[str, Any]:
    """A headless rank: the leader's container without the API server's port and probes (a worker
    answers no HTTP; the leader's probes stand for the group).

    The drain: a rank that exits at SIGTERM takes the engine down under the leader's in-flight streams, so a
    worker's preStop waits while the leader's engine runs, for at most the leader's own drain (its preStop plus
    vLLM's --shutdown-timeout). Bounded on the leader, not a fixed sleep: in lws v0.10.0 a rolling update deletes
    the leader and the workers are garbage-collected after it, and a worker sleeping the whole bound would hold its
    name for half an hour after its leader is gone, so the group's same-named replacement could not start and the
    new leader's startup budget ran out (issue #42). The shared terminationGracePeriodSeconds covers both.
    """
    worker = {k: _copied(v) for k, v in leader.items()
              if k not in ("ports", "startupProbe", "readinessProbe", "livenessProbe", "lifecycle", "args")}
    worker["args"] = list(worker_args)
    worker["lifecycle"] = {"preStop": {"exec": {"command": worker_pre_stop(drain_seconds, master_port)}}}
    return worker


def rollout_strategy(deployment_strategy: dict[str, Any] | None) -> dict[str, Any]:
    """The rollout planner's Deployment strategy in LeaderWorkerSet's terms (groups, not pods).
    LeaderWorkerSet has no Recreate: every group unavailable at once is its equivalent."""
    if deployment_strategy and deployment_strategy.get("type") == "Recreate":
        surge, unavailable = 0, "100%"  # every group, however many the autoscaler runs
    else:
        rolling = (deployment_strategy or {}).get("rollingUpdate", {"maxSurge": 1, "maxUnavailable": 0})
        surge, unavailable = rolling["maxSurge"], rolling["maxUnavailable"]
    return {"type": "RollingUpdate", "rollingUpdateConfiguration": {"maxSurge": surge, "maxUnavailable": unavailable}}


def leader_worker_set(
    *,
    name: str,
    namespace: Any,
    labels: dict[str, str],
    replicas: int,
    size: int,
    leader_template: dict[str, Any],
    worker_template: dict[str, Any],
    strategy: dict[str, Any] | None,
) -> dict[str, Any]:
    return {
        "apiVersion": LWS_API,
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "namespace": namespace, "labels": labels,
                     "annotations": {"pulumi.com/waitFor": WAIT_FOR}},
        "spec": {
            "replicas": replicas,
            # Workers start with the leader: the leader's server becomes Ready only once every rank
            # has joined, so waiting for a Ready leader first (LeaderReady) would never finish.
            "startupPolicy": "LeaderCreated",
            "rolloutStrategy": rollout_strategy(strategy),
            # One headless Service per group, named after its leader pod (<name>-<group>). With `Shared`
            # LeaderWorkerSet would name a single headless Service after the LeaderWorkerSet, which is
            # also the model's own ClusterIP Service: it skips creating it when that name exists, so
            # LWS_LEADER_ADDRESS would never resolve and no group could rendezvous (lws v0.10.0
            # leaderworkerset_controller.go CreateHeadlessServiceIfNotExists; pod_controller.go).
            "networkConfig": {"subdomainPolicy": "UniquePerReplica"},
            "leaderWorkerTemplate": {
                "size": size,
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": leader_template,
                "workerTemplate": worker_template,
            },
        },
    }


def group_network_policy(model_name: str, namespace: Any) -> dict[str, Any]:
    """The ranks of a model's groups reach each other on any port (torch.distributed's rendezvous on
    the leader, NCCL's bootstrap and socket channels) and DNS; EFA traffic itself bypasses IP. Added
    to the serving fence (NetworkPolicies add up), it also fences the workers, which serve nothing."""
    group = {"podSelector": {"matchLabels": {LWS_NAME_LABEL: model_name}}}
    dns = {"to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                   "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
           "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]}
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": f"{model_name}-group", "namespace": namespace,
                     "labels": {"app.kubernetes.io/part-of": "llm-serving"}},
        "spec": {
            "podSelector": {"matchLabels": {LWS_NAME_LABEL: model_name}},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": [group]}],
            "egress": [{"to": [group]}, dns],
        },
    }
