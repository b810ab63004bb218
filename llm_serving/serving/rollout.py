"""Rollout strategies, peak capacity, node-update timing and scale-up time from the GPUs a stack can get.

Pure (no Pulumi import). Every replica is one tensor-parallel group and needs TP GPUs on ONE node,
so capacity is a packing problem (first-fit decreasing over nodes), not a GPU sum: 4 free GPUs on
each of two nodes hold two TP4 replicas but not one TP8 replica.

Length: the packing, the strategy decision with its rejection messages, node-update timing and the
scale-up dynamics belong together; each is a few lines over the same model footprints.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal

# Defaults for the dynamics; stacks override them (gpuNodeGroup.nodeReadySeconds, imagePullSeconds)
# with what they measure. No authoritative figure exists for a GPU node: a node registers about 75 s
# after launch (aws/karpenter-provider-aws#6128) and the device plugin advertises GPUs about 90 s
# later (NVIDIA/k8s-device-plugin#291); p5 adds NVMe RAID and a larger boot, so 5 minutes.
DEFAULT_NODE_READY_SECONDS = 300
# The vLLM image is about 12-13 GB compressed (vllm-project/vllm#27154); AWS measures 4-6 minutes for
# a standard pull of a 15-20 GB image (AWS ML blog, "Reducing container cold start times using SOCI
# index on DLAMI and DLC"), so 5 minutes.
DEFAULT_IMAGE_PULL_SECONDS = 300

# A rollout step is done when the new pod is Ready and then available for minReadySeconds
# (llm_serving/serving/deployment.py).
MIN_READY_SECONDS = 30
# Pulumi deletes a replaced node group at the end of the update, once the drain barrier has gone; EKS
# then drains its (by then empty) nodes for at most 5 minutes and terminates them (EKS user guide,
# https://docs.aws.amazon.com/eks/latest/userguide/delete-managed-node-group.html).
OLD_GROUP_DELETE_SECONDS = 5 * 60


class RolloutError(ValueError):
    """The models cannot run, or roll out, within the GPUs the node group can supply.

    `nodes_needed` is how many nodes would make it work (None when no node count can).
    """

    def __init__(self, message: str, nodes_needed: int | None = None) -> None:
        super().__init__(message)
        self.nodes_needed = nodes_needed


@dataclass(frozen=True)
class Footprint:
    """What one model needs from the node group."""

    name: str
    tensor_parallel_size: int
    min_replicas: int
    max_replicas: int
    cold_start_seconds: int
    shared_weights: bool = True  # ReadWriteMany: a surge pod on another node can mount the weights
    nodes_per_replica: int = 1  # > 1: a LeaderWorkerSet group, one pod of TP GPUs on each of that many nodes
    # With a shared compile cache: the cold start of a replica that loads it (capacity.compile_cache_hit_seconds).
    cached_cold_start_seconds: int | None = None

    @property
    def scale_up_cold_start_seconds(self) -> int:
        """The cold start of a replica added while the model serves: its cache is produced by then."""
        return self.cold_start_seconds if self.cached_cold_start_seconds is None else self.cached_cold_start_seconds

    def pods(self, replicas: int) -> list[int]:
        """The GPUs of each pod `replicas` replicas run (a group is nodes_per_replica pods)."""
        return [self.tensor_parallel_size] * (replicas * self.nodes_per_replica)

    @property
    def shape(self) -> str:
        tp = f"TP{self.tensor_parallel_size}"
        return tp if self.nodes_per_replica == 1 else f"{tp} x PP{self.nodes_per_replica} group"


@dataclass(frozen=True)
class Supply:
    """GPU nodes the stack can count on during a rollout or at peak."""

    gpus_per_node: int
    nodes: int  # with a node autoscaler: maxNodes; without one: the nodes that exist (desiredNodes)
    instance_type: str
    autoscaled: bool

    def describe(self) -> str:
        source = "maxNodes, with a node autoscaler" if self.autoscaled else "desiredNodes, no node autoscaler"
        return f"{self.nodes} x {self.instance_type} ({self.gpus_per_node} GPUs each; {source})"


@dataclass(frozen=True)
class Strategy:
    """A Deployment strategy and the reason it was chosen."""

    type: Literal["RollingUpdate", "Recreate"]
    max_surge: int = 0
    max_unavailable: int = 0
    reason: str = ""

    def manifest(self) -> dict:
        if self.type == "Recreate":
            return {"type": "Recreate"}
        return {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": self.max_surge,
                                                           "maxUnavailable": self.max_unavailable}}


def fits(groups: list[int], gpus_per_node: int, nodes: int) -> bool:
    """Whether replicas needing `groups` GPUs each still fit when the scheduler spreads them.

    Pessimistic on purpose: kube-scheduler's default scoring (LeastAllocated) puts a pod on the node
    with the most room, and Cluster Autoscaler never moves a vLLM pod to defragment (safe-to-evict:
    false). So the smallest replicas go first, each onto the emptiest node (worst fit): if a large
    replica still finds a node, it finds one however the others were placed.
    """
    free = [gpus_per_node] * nodes
    for size in sorted(groups):
        if not free:
            return False
        index = max(range(len(free)), key=lambda i: free[i])
        if free[index] < size:
            return False
        free[index] -= size
    return True


def nodes_needed(groups: list[int], gpus_per_node: int) -> int:
    """Fewest nodes on which the replicas fit even when spread (see `fits`); 0 for no replicas."""
    count = 0
    while not fits(groups, gpus_per_node, count):
        count += 1
    return count


def _peak_groups(models: list[Footprint]) -> list[int]:
    return [gpus for m in models for gpus in m.pods(m.max_replicas)]


def _peak_text(models: list[Footprint]) -> str:
    return " + ".join(f"{m.name} {m.max_replicas} x {m.shape}" for m in models)


def check_peak(models: list[Footprint], supply: Supply) -> None:
    """Every model at its maximum replicas must pack onto the supply, else RolloutError with the numbers."""
    for m in models:
        if m.tensor_parallel_size > supply.gpus_per_node:
            raise RolloutError(f"{m.name}: one replica needs {m.tensor_parallel_size} GPUs on one node but "
                               f"{supply.instance_type} has {supply.gpus_per_node}")
    groups = _peak_groups(models)
    if not fits(groups, supply.gpus_per_node, supply.nodes):
        needed = nodes_needed(groups, supply.gpus_per_node)
        raise RolloutError(
            f"at peak the models need {needed} nodes ({_peak_text(models)} = {sum(groups)} GPUs, each replica on "
            f"one node) but the node group supplies {supply.describe()}",
            needed,
        )


def choose_strategies(models: list[Footprint], supply: Supply, environment: str) -> dict[str, Strategy]:
    """Per model, the rollout the supply allows while every model runs at its maximum replicas.

    All models may roll in one `pulumi up`, so surge replicas are reserved in config order:
    - room for one more replica: surge 1, take none away (capacity stays whole);
    - no room but two or more replicas: surge 0, one unavailable at a time (the PDB's floor);
    - no room and one replica, or a ReadWriteOnce weights claim: Recreate, which stops serving
      for a cold start, so only dev may do it.
    """
    check_peak(models, supply)
    groups = _peak_groups(models)
    chosen: dict[str, Strategy] = {}
    for m in models:
        if not m.shared_weights:
            chosen[m.name] = Strategy("Recreate", reason="a ReadWriteOnce weights claim cannot follow a surge pod "
                                                         "to another node")
        elif fits([*groups, *m.pods(1)], supply.gpus_per_node, supply.nodes):
            groups += m.pods(1)
            chosen[m.name] = Strategy("RollingUpdate", max_surge=1, max_unavailable=0,
                                      reason=f"room for one more {m.shape} replica at peak")
        elif m.min_replicas >= 2:
            chosen[m.name] = Strategy("RollingUpdate", max_surge=0, max_unavailable=1,
                                      reason="no room for a surge replica at peak; one replica at a time is "
                                             f"replaced, {m.min_replicas - 1} keep serving")
        else:
            chosen[m.name] = Strategy("Recreate", reason="no room for a surge replica at peak and a single replica")
        if chosen[m.name].type == "Recreate" and environment != "dev":
            raise RolloutError(
                f"{m.name}: a rollout would stop serving for a cold start ({chosen[m.name].reason}; at peak "
                f"{_peak_text(models)} on {supply.describe()}); give it room for one more "
                f"{m.shape} replica or run at least 2 replicas",
                nodes_needed([*groups, *m.pods(1)], supply.gpus_per_node) if m.shared_weights else None,
            )
    return chosen


def describe_strategy(strategy: Strategy) -> str:
    if strategy.type == "Recreate":
        return "Recreate (every replica stops, then all start)"
    return f"RollingUpdate maxSurge {strategy.max_surge}, maxUnavailable {strategy.max_unavailable}"


def _nodes_for_alone_strategy(models: list[Footprint], model: Footprint, alone: Strategy, supply: Supply,
                              environment: str) -> int:
    """The fewest nodes on which the stack gives `model` the strategy it has alone. Counted by choosing again at each
    size, since at more nodes an earlier model may take a surge it was denied and with it the room again."""
    nodes = supply.nodes
    limit = supply.nodes + nodes_needed(_peak_groups(models), supply.gpus_per_node) + len(models) + 1
    while nodes < limit:
        nodes += 1
        try:
            chosen = choose_strategies(models, replace(supply, nodes=nodes), environment)[model.name]
        except RolloutError:
            continue
        if chosen.manifest() == alone.manifest():
            return nodes
    return limit


def crowded_out(models: list[Footprint], supply: Supply, environment: str) -> dict[str, str]:
    """Per model whose rollout is slower beside the others than it would be alone in the node group: why.

    Adding a model to a stack can take the room another model's surge replica needed, which turns that
    model's rollout from a surge into one-at-a-time, or in dev into Recreate (a cold start of downtime on
    every rollout). The preview and `plan --stack` say so with the numbers, instead of the strategy
    changing silently. Call with models whose peak fits (choose_strategies checks it)."""
    together = choose_strategies(models, supply, environment)
    found: dict[str, str] = {}
    for index, m in enumerate(models):
        # "dev" lets the lone model's Recreate through; it can only be roomier than the stack's choice.
        alone = choose_strategies([m], supply, "dev")[m.name]
        if alone.manifest() == together[m.name].manifest():
            continue
        first = [o.name for o in models[:index] if together[o.name].max_surge]
        reserved = (f"; the surge replicas of {', '.join(first)} (earlier in models[]) are reserved first"
                    if first else "")
        needed = _nodes_for_alone_strategy(models, m, alone, supply, environment)
        found[m.name] = (f"{m.name}: rollout {describe_strategy(together[m.name])}, not "
                         f"{describe_strategy(alone)} as alone: at peak {_peak_text(models)} on "
                         f"{supply.describe()} leaves no room for one more {m.shape} replica{reserved}; "
                         f"{needed} nodes would give it room")
    return found


@dataclass(frozen=True)
class ProducerRoom:
    """Where the shared compile caches' producer Jobs fit while an `up` rolls the models out."""

    nodes_needed: int  # every model at peak, the rollouts' surge replicas and the producers that fit
    producers: tuple[str, ...]  # the models whose producer fits, in config order
    refused: dict[str, tuple[str, int]]  # model -> (why its producer has no room, the nodes it would need)


def producer_room(models: list[Footprint], strategies: dict[str, Strategy], producers: list[Footprint],
                  supply: Supply) -> ProducerRoom:
    """Reserve one replica's GPUs for each model's compile-cache producer (in config order), after every model
    at peak and the surge replica each strategy took.

    A producer runs during the `up` that changes its key (a first deploy, a new revision, image or engine
    flag), which is also the `up` that rolls the model: it holds TP GPUs on one node until it finishes
    (up to its deadline). Pessimistic on purpose, like the surge reservation: the `up` may come at peak,
    and a producer with no room either stays Pending until its deadline fails the `up`, or takes the
    GPUs a surge replica was counting on and stalls the rollout.
    """
    groups = _peak_groups(models) + [gpus for m in models if strategies[m.name].max_surge > 0 for gpus in m.pods(1)]
    fitted: list[str] = []
    refused: dict[str, tuple[str, int]] = {}
    for producer in producers:
        trial = [*groups, producer.tensor_parallel_size]
        if fits(trial, supply.gpus_per_node, supply.nodes):
            groups, fitted = trial, [*fitted, producer.name]
            continue
        needed, gpus = nodes_needed(trial, supply.gpus_per_node), producer.tensor_parallel_size
        refused[producer.name] = (
            f"no room for its producer Job ({gpus} GPU{'s' if gpus > 1 else ''} on one node while it compiles) beside "
            f"{_peak_text(models)} and the rollouts' surge replicas: that needs {needed} nodes, the node group "
            f"supplies {supply.describe()}", needed)
    return ProducerRoom(nodes_needed(groups, supply.gpus_per_node), tuple(fitted), refused)


@dataclass(frozen=True)
class Timing:
    """Seconds for the steps of adding capacity; the defaults and their sources are in `DYNAMICS`."""

    node_ready_seconds: int
    image_pull_seconds: int
    # A pre-pull DaemonSet holds the vLLM image on every GPU node that has run one (llm_serving/serving/prepull.py).
    image_prepulled: bool = False


def image_pull_term(timing: Timing, *, new_node: bool) -> int:
    """Seconds a replica waits for its image: none on a running node that holds it, the whole pull on a new
    node (the pre-pull pod starts only once the node has joined, so it races the replica's own pull)."""
    return timing.image_pull_seconds if new_node or not timing.image_prepulled else 0


def replica_add_seconds(model: Footprint, timing: Timing, *, needs_node: bool) -> int:
    """From a scale-up decision to a new replica serving: node (if needed), image pull, cold start."""
    node = timing.node_ready_seconds if needs_node else 0
    return (node + image_pull_term(timing, new_node=needs_node) + model.scale_up_cold_start_seconds
            + MIN_READY_SECONDS)


@dataclass(frozen=True)
class ColdStart:
    """From a scale-up decision to a new replica serving, term by term (replica_add_seconds is the sum)."""

    node_seconds: int  # a new GPU node joining and advertising GPUs; 0 on a free node
    image_pull_seconds: int  # pulling the vLLM image onto the node
    weights_seconds: int  # reading the weights at the storage's planned speed
    engine_init_seconds: int  # process start, NCCL, profiling, KV allocation, CUDA-graph capture
    compile_seconds: int  # torch.compile (a shared compile cache shortens it; CUDA graphs are in engine init)
    ready_seconds: int = MIN_READY_SECONDS  # minReadySeconds before the pod counts as available

    @property
    def total_seconds(self) -> int:
        return (self.node_seconds + self.image_pull_seconds + self.weights_seconds + self.engine_init_seconds
                + self.compile_seconds + self.ready_seconds)

    def terms(self) -> tuple[tuple[str, int], ...]:
        return (("node", self.node_seconds), ("image pull", self.image_pull_seconds),
                ("weights", self.weights_seconds), ("engine init", self.engine_init_seconds),
                ("compile", self.compile_seconds), ("ready", self.ready_seconds))

    def text(self) -> str:
        return " + ".join(f"{label} {seconds:,} s" for label, seconds in self.terms()) + \
            f" = {self.total_seconds:,} s"


def cold_start(weights_seconds: int, engine_init_seconds: int, compile_seconds: int, timing: Timing, *,
               needs_node: bool) -> ColdStart:
    """The terms of adding one replica: the image term is image_pull_term's (0 on a node that holds the
    pre-pulled image, the whole pull on a new one), and `compile_seconds` the caller's (the full compile,
    or the load from a shared compile cache)."""
    return ColdStart(node_seconds=timing.node_ready_seconds if needs_node else 0,
                     image_pull_seconds=image_pull_term(timing, new_node=needs_node), weights_seconds=weights_seconds,
                     engine_init_seconds=engine_init_seconds, compile_seconds=compile_seconds)


def rollout_needs_node(models: list[Footprint], model: Footprint, gpus_per_node: int, nodes_running: int) -> bool:
    """Whether the model's surge replica, with every model at its minimum, needs a node that is not running."""
    groups = [gpus for m in models for gpus in m.pods(m.min_replicas)]
    return not fits([*groups, *model.pods(1)], gpus_per_node, nodes_running)


def rollout_seconds(model: Footprint, strategy: Strategy, replicas: int, timing: Timing, *,
                    needs_node: bool = False) -> int:
    """One pod-template change of the model at `replicas`: steps of surge (or unavailable) pods in a row.

    The image is usually cached on the node, but a surge pod can land on a node that never ran it.
    When the first surge pod needs a new node, later steps reuse the room the replaced pods free.
    """
    per_step = timing.image_pull_seconds + model.cold_start_seconds + MIN_READY_SECONDS
    node = timing.node_ready_seconds if needs_node else 0
    if strategy.type == "Recreate":
        return per_step
    batch = max(strategy.max_surge, strategy.max_unavailable, 1)
    return node + math.ceil(replicas / batch) * per_step


@dataclass(frozen=True)
class NodeUpdate:
    """How long a node-group update (AMI, Kubernetes version, launch template) takes, and what it needs."""

    seconds: int
    extra_nodes_at_peak: int  # nodes running beside the old group while pods move (quota for both)
    steps: tuple[str, ...]


def node_update(models: list[Footprint], strategies: dict[str, Strategy], supply: Supply, nodes_running: int,
                timing: Timing, *, drain_wait_seconds: int) -> NodeUpdate:
    """A new node group beside the old one, every model rolled onto it, the last replaced pods' drain
    (the drain barrier waits `drain_wait_seconds`, the longest grace period), then the old group deleted.

    The generation label on the nodes changes with the update, and the vLLM pods select it, so the
    Deployments roll with their own strategy (never below the serving floor) instead of EKS draining
    nodes under a PodDisruptionBudget, which fails after 15 minutes (PodEvictionFailure) whenever a
    cold start is longer. Models roll in parallel; the longest decides. Replicas at the minimum.
    """
    groups = [gpus for m in models for gpus in m.pods(m.min_replicas)]
    # The new group starts at the configured size; the autoscaler adds what the pods need beyond it.
    new_nodes = max(nodes_running, nodes_needed(groups, supply.gpus_per_node))
    slowest = max(rollout_seconds(m, strategies[m.name], m.min_replicas, timing) for m in models)
    total = timing.node_ready_seconds + slowest + drain_wait_seconds + OLD_GROUP_DELETE_SECONDS
    steps = (
        f"create the new node group: {new_nodes} node(s) ready in about {timing.node_ready_seconds // 60} min",
        f"roll every model onto it with its own strategy: about {math.ceil(slowest / 60)} min (slowest model)",
        f"let the last replaced pods drain (the old generation's drain barrier): {drain_wait_seconds:,} s",
        f"delete the old group's {nodes_running} emptied node(s): about {OLD_GROUP_DELETE_SECONDS // 60} min",
    )
    return NodeUpdate(seconds=total, extra_nodes_at_peak=new_nodes, steps=steps)
