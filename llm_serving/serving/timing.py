"""One clock: the stream bound and every drain, grace period and await derived from it (pure).

The longest request the edge admits (the stream bound) decides how long every stage that holds a
stream must keep it through a planned disruption: vLLM's --shutdown-timeout, the pods' grace
periods, the endpoint picker's drain, Envoy's drain and the load balancer's deregistration delay.
`relations` lists each rule (drain >= bound, grace >= preStop + drain + exit, idle timeouts along
the path, scale-down window >= add-a-replica, Pulumi's awaits vs Kubernetes' deadlines) with its
numbers, so the preview check, `plan --stack` and the docs read the same figures.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .engine import EXIT_MARGIN_SECONDS, PRE_STOP_SECONDS, SSE_KEEP_ALIVE_SECONDS, termination_grace_seconds
from .multinode import LEADER_CONNECT_TIMEOUT_SECONDS, LEADER_POLL_SECONDS

# Planned generation time x this: queueing and a slower decode under load come on top of the ITL
# objective, which is a p95 rather than a ceiling.
STREAM_HEADROOM = 1.1
# No stream bound under 10 minutes (queueing and prefill under load come on top of decode time;
# the policy pack's `edge-non-buffering` rule holds the same floor) nor over an hour: an NLB or ALB
# target group's deregistration delay is at most 3600 s (ELB guides, "Deregistration delay":
# "The range is 0-3600 seconds"), so a longer stream could not survive an Envoy or pod replacement.
MIN_STREAM_SECONDS = 600
MAX_STREAM_SECONDS = 3600
# Beyond its drain window the picker stops its servers and the kubelet sees it exit (the same margin
# llm_serving/routing/objects.py adds; tests/components/serving/test_timing.py keeps them equal).
PICKER_EXIT_MARGIN_SECONDS = 30
# Envoy Gateway sets the Envoy pods' terminationGracePeriodSeconds to drainTimeout + 300 s
# (gitlab-org/charts/gitlab MR 5625, from envoyproxy/gateway internal/infrastructure/kubernetes).
ENVOY_GRACE_EXTRA_SECONDS = 300
# What a delete waits beyond the longest grace period: API round trips and finalizers.
DELETE_MARGIN_SECONDS = 300
# Kubernetes' Deployment progress deadline resets with every step of progress; Pulumi's own await
# keeps waiting after ProgressDeadlineExceeded (pulumi-kubernetes provider/pkg/await/deployment.go logs
# the condition as a warning and waits for its timeout), so the await is what ends a stuck `up`.
AWAIT_MARGIN_SECONDS = 120
# The producer Job's terminationGracePeriodSeconds and a margin: past its deadline the kubelet kills it.
PRODUCER_KILL_SECONDS = 60


def derived_stream_seconds(max_model_len: int, itl_seconds: float, ttft_seconds: float) -> int:
    """The default stream bound: max-model-len tokens at the ITL objective after the TTFT objective,
    with headroom, within [MIN_STREAM_SECONDS, MAX_STREAM_SECONDS]."""
    planned = max_model_len * itl_seconds + ttft_seconds
    return min(MAX_STREAM_SECONDS, max(MIN_STREAM_SECONDS, math.ceil(planned * STREAM_HEADROOM)))


def picker_grace_seconds(drain_seconds: int) -> int:
    return drain_seconds + PICKER_EXIT_MARGIN_SECONDS


@dataclass(frozen=True)
class ModelDrains:
    """Every number of one model's path that must hold a stream of `stream_seconds` to its end."""

    model: str
    stream_seconds: int  # the bound: the route's request timeout
    route_timeout_seconds: int  # HTTPRoute timeouts.request and the BackendTrafficPolicy's requestTimeout
    vllm_shutdown_seconds: int  # --shutdown-timeout
    vllm_grace_seconds: int  # the leader's (or the Deployment's) and the workers' terminationGracePeriodSeconds
    worker_pre_stop_seconds: int | None  # LeaderWorkerSet workers: how long a rank outlives the leader's drain
    picker_drain_seconds: int | None  # --drain-timeout; None without an InferencePool
    picker_grace_seconds: int | None
    delete_timeout_seconds: int  # Pulumi's delete timeout of the workloads that drain


def model_drains(model: str, stream_seconds: int, *, vllm_shutdown_seconds: int | None = None,
                 multinode: bool = False, routed: bool = False) -> ModelDrains:
    """The drains that follow from the bound; `vllm_shutdown_seconds` is an operator's override (the
    preview refuses one shorter than the bound)."""
    shutdown = stream_seconds if vllm_shutdown_seconds is None else vllm_shutdown_seconds
    grace = termination_grace_seconds(shutdown)
    picker_drain = stream_seconds if routed else None
    picker_grace = picker_grace_seconds(stream_seconds) if routed else None
    return ModelDrains(
        model=model, stream_seconds=stream_seconds, route_timeout_seconds=stream_seconds,
        vllm_shutdown_seconds=shutdown, vllm_grace_seconds=grace,
        worker_pre_stop_seconds=PRE_STOP_SECONDS + shutdown if multinode else None,
        picker_drain_seconds=picker_drain, picker_grace_seconds=picker_grace,
        delete_timeout_seconds=max(grace, picker_grace or 0) + DELETE_MARGIN_SECONDS,
    )


@dataclass(frozen=True)
class EdgeDrains:
    """The shared edge: Envoy (gateway mode) or the ALB's targets hold the longest stream of any route."""

    stream_seconds: int  # the longest bound over the routes
    envoy_drain_seconds: int | None  # EnvoyProxy shutdown.drainTimeout; None without Envoy (ALB, nginx)
    envoy_grace_seconds: int | None
    deregistration_delay_seconds: int | None  # the NLB's (gateway) or the ALB's target group; None for nginx


def edge_drains(stream_seconds: list[int], *, envoy: bool, load_balancer_targets: bool) -> EdgeDrains:
    """`envoy`: Envoy proxies stand in front (gateway mode); `load_balancer_targets`: an NLB or ALB target group
    deregisters the pods that serve (gateway and alb modes)."""
    longest = max(stream_seconds)
    drain = longest if envoy else None
    return EdgeDrains(
        stream_seconds=longest, envoy_drain_seconds=drain,
        envoy_grace_seconds=drain + ENVOY_GRACE_EXTRA_SECONDS if drain is not None else None,
        deregistration_delay_seconds=longest if load_balancer_targets else None,
    )


def progress_deadline_seconds(startup_budget_seconds: int, pre_start_seconds: int) -> int:
    """A Deployment's progressDeadlineSeconds: the startup budget plus what a surge pod may wait for first
    (a new node, an image pull) plus 5 minutes; past it Kubernetes marks the rollout failed."""
    return startup_budget_seconds + pre_start_seconds + 300


@dataclass(frozen=True)
class ProducerTimeouts:
    """The compile cache's producer Job: its deadline, when its lock counts as abandoned, Pulumi's await."""

    deadline_seconds: int  # activeDeadlineSeconds: a node, an image pull and one cold start with a compile
    stale_lock_seconds: int  # no writer of the Job outlives its deadline plus the kubelet's kill
    await_seconds: int  # Pulumi's create/update timeout: the deadline and the margin every await has


def producer_timeouts(pre_start_seconds: int, startup_budget_seconds: int) -> ProducerTimeouts:
    deadline = pre_start_seconds + startup_budget_seconds
    return ProducerTimeouts(deadline_seconds=deadline, stale_lock_seconds=deadline + PRODUCER_KILL_SECONDS,
                            await_seconds=deadline + DELETE_MARGIN_SECONDS)


def rollout_await_seconds(steps: int, planned_step_seconds: int, progress_deadline_seconds: int) -> int:
    """How long `pulumi up` waits for a rollout: every step but the last as planned, the last up to
    Kubernetes' progress deadline. A rollout stuck at its last step fails the `up` AWAIT_MARGIN_SECONDS
    after Kubernetes marks it ProgressDeadlineExceeded; one stuck earlier, at most the planned steps
    after it later."""
    return max(0, steps - 1) * planned_step_seconds + progress_deadline_seconds + AWAIT_MARGIN_SECONDS


# How long a worker of a multi-node group outlives its leader's exit: its preStop's next poll (a refused or
# timed-out connection to the leader's engine), then vLLM's rank exits (multinode.WORKER_PRE_STOP).
WORKER_EXIT_SECONDS = LEADER_POLL_SECONDS + LEADER_CONNECT_TIMEOUT_SECONDS + EXIT_MARGIN_SECONDS


@dataclass(frozen=True)
class GroupRollout:
    """A pod-template change of a LeaderWorkerSet, at its worst.

    How lws v0.10.0 rolls (kubernetes-sigs/lws pkg/controllers/leaderworkerset_controller.go,
    `rollingUpdateParameters`, `rollingUpdatePartition`, `calculateRollingUpdateReplicas` as changed by PR #778):
    it first adds `maxSurge` groups with the new template (the leader StatefulSet's replicas grow to replicas +
    maxSurge, partition unchanged), and with `maxUnavailable` 0 only once they are ready moves the partition down
    from the highest index. A group is updated in place: its leader pod is deleted and the StatefulSet recreates it
    under the same name only once the old one is gone, that is after the old leader's whole drain; its workers
    belong to the old leader and go after it (multinode.WORKER_PRE_STOP). So unlike a Deployment, whose surge pods
    take new names and start while the old ones drain, every in-place step waits out a drain before its cold
    start. The surge groups stay while more groups are unready than `maxUnavailable` allows (`unready -
    maxUnavailable` of them), so with `maxUnavailable` 0 the model never serves on fewer groups than its replicas.

    One group per step whatever lws asks: the leader StatefulSet gets lws's `maxUnavailable`, but a StatefulSet
    honours it only with the MaxUnavailableStatefulSet feature gate (alpha, off, through Kubernetes 1.34: KEP-961
    and the field's API reference, "only honored by servers that enable MaxUnavailableStatefulSet"), and otherwise
    replaces one pod at a time, each after the one before is Ready. So even a Recreate (every group unavailable)
    rolls group after group on the clusters this project runs.
    """

    groups: int  # the replicas rolled (the model's most)
    surge_groups: int
    batch: int  # groups recreated in place per step
    in_place_steps: int
    surge_seconds: int  # new nodes for the surge groups, the image pull and a cold start
    leader_grace_seconds: int  # the old leader's drain at worst: its terminationGracePeriodSeconds
    start_seconds: int  # the image pull and a cold start
    step_seconds: int  # one in-place step: the leader's drain, its workers' exit, a start

    @property
    def seconds(self) -> int:
        return self.surge_seconds + self.in_place_steps * self.step_seconds


def group_rollout(groups: int, max_surge: int, max_unavailable: int, *, node_ready_seconds: int,
                  image_pull_seconds: int, cold_start_seconds: int, leader_grace_seconds: int,
                  parallel_pods: bool = False) -> GroupRollout:
    """`max_unavailable` in groups (lws scales a percentage of the replicas down: "100%" is every group);
    `parallel_pods`: the StatefulSet honours maxUnavailable (the MaxUnavailableStatefulSet gate is on)."""
    surge = min(max_surge, groups)  # lws: "No need to burst more than the replicas."
    batch = max(1, max_unavailable + surge) if parallel_pods else 1
    start = image_pull_seconds + cold_start_seconds
    return GroupRollout(
        groups=groups, surge_groups=surge, batch=batch, in_place_steps=math.ceil(groups / batch),
        surge_seconds=node_ready_seconds + start if surge else 0, leader_grace_seconds=leader_grace_seconds,
        start_seconds=start, step_seconds=leader_grace_seconds + WORKER_EXIT_SECONDS + start,
    )


def group_rollout_await_seconds(rollout: GroupRollout) -> int:
    """Pulumi's create/update timeout of a LeaderWorkerSet: its worst rollout and the margin every await has.
    LeaderWorkerSet has no progress deadline, so this is also what ends a stuck rollout's `up`."""
    return rollout.seconds + AWAIT_MARGIN_SECONDS


def group_rollout_timeline(model: str, rollout: GroupRollout, await_seconds: int) -> list[tuple[str, str]]:
    """(mm:ss from the start of `pulumi up`, what happens) of a LeaderWorkerSet rollout, every drain at its
    longest."""
    rows: list[tuple[str, str]] = []
    at = 0
    if rollout.surge_groups:
        rows += [(_clock(0), f"`pulumi up` updates the LeaderWorkerSet; lws adds {rollout.surge_groups} surge "
                             f"group(s) with the new template ({model}-{rollout.groups} on), on new nodes"),
                 (_clock(rollout.surge_seconds - rollout.start_seconds),
                  "the new nodes have joined; the surge group's pods pull the image and cold start")]
        at = rollout.surge_seconds
    first = rollout.groups - 1
    for step in range(1, rollout.in_place_steps + 1):
        last = max(0, first - rollout.batch + 1)
        names = f"{model}-{first}" if last == first else f"{model}-{last} to {model}-{first}"
        what = (f"step {step} of {rollout.in_place_steps}: lws deletes the leader of {names}; it stops taking "
                f"requests after its {PRE_STOP_SECONDS} s preStop and drains its streams")
        if rollout.surge_groups and step == 1:
            what = "the surge group is ready; " + what
        rows.append((_clock(at), what))
        drained = at + rollout.leader_grace_seconds
        rows.append((_clock(drained), f"the old leader has exited at the latest ({rollout.leader_grace_seconds:,} s "
                                      f"grace); its workers follow within {WORKER_EXIT_SECONDS} s, and the group "
                                      "is recreated under the same names on the nodes they free"))
        at = drained + WORKER_EXIT_SECONDS + rollout.start_seconds
        first = last - 1
    done = (f"every group is ready on the new template: the LeaderWorkerSet is Available and Pulumi's wait ends "
            f"({await_seconds:,} s allowed)")
    if rollout.surge_groups:
        done += "; lws then removes the surge group, whose pods drain like any other"
    rows.append((_clock(at), done))
    return rows


@dataclass(frozen=True)
class Relation:
    """One timing rule with its numbers: `left` (what the stack sets) against `right` (what it must cover)."""

    path: str  # the stage, e.g. "llama-70b vLLM --shutdown-timeout"
    left_seconds: int
    op: str  # ">=", ">", "<", "<="
    right_seconds: int
    right_label: str  # what the right side is, e.g. "stream bound"
    why: str  # what breaks when it does not hold
    key: str = ""  # the config key an operator changes, where one exists

    @property
    def holds(self) -> bool:
        a, b = self.left_seconds, self.right_seconds
        return {">=": a >= b, ">": a > b, "<": a < b, "<=": a <= b}[self.op]

    def text(self) -> str:
        return f"{self.path} {self.left_seconds:,} s {self.op} {self.right_label} {self.right_seconds:,} s"


def drain_relations(drains: ModelDrains) -> list[Relation]:
    """Drain >= bound on every stage of one model's path, grace >= preStop + drain + exit."""
    m, bound = drains.model, drains.stream_seconds
    cut = "a planned disruption cuts every stream still running when it ends"
    rows = [
        Relation(f"{m}: route request timeout", drains.route_timeout_seconds, "<=", bound, "stream bound",
                 "a stream longer than the bound would outlive every drain"),
        Relation(f"{m}: vLLM --shutdown-timeout", drains.vllm_shutdown_seconds, ">=", bound, "stream bound", cut,
                 f"models[{m}].shutdownTimeoutSeconds"),
        Relation(f"{m}: vLLM terminationGracePeriodSeconds", drains.vllm_grace_seconds, ">=",
                 PRE_STOP_SECONDS + drains.vllm_shutdown_seconds + EXIT_MARGIN_SECONDS, "preStop + shutdown + exit",
                 "SIGKILL ends the drain early", f"models[{m}].shutdownTimeoutSeconds"),
    ]
    if drains.worker_pre_stop_seconds is not None:
        rows.append(Relation(f"{m}: LeaderWorkerSet worker preStop", drains.worker_pre_stop_seconds, ">=",
                             PRE_STOP_SECONDS + bound, "leader preStop + stream bound",
                             "a rank that exits first takes the engine down under the leader's streams",
                             f"models[{m}].shutdownTimeoutSeconds"))
    if drains.picker_drain_seconds is not None and drains.picker_grace_seconds is not None:
        rows += [
            Relation(f"{m}: endpoint picker --drain-timeout", drains.picker_drain_seconds, ">=", bound,
                     "stream bound", "responses stream through the picker; " + cut),
            Relation(f"{m}: endpoint picker terminationGracePeriodSeconds", drains.picker_grace_seconds, ">=",
                     drains.picker_drain_seconds + PICKER_EXIT_MARGIN_SECONDS, "drain + exit",
                     "SIGKILL ends the picker's drain early"),
        ]
    rows.append(Relation(f"{m}: delete timeout of the draining workloads", drains.delete_timeout_seconds, ">",
                         max(drains.vllm_grace_seconds, drains.picker_grace_seconds or 0), "longest grace period",
                         "destroy or a routing switch fails while pods still drain"))
    return rows


def edge_relations(edge: EdgeDrains, stream_idle_seconds: int, lb_idle_seconds: int | None) -> list[Relation]:
    """Envoy and the load balancer hold the longest stream; Envoy's idle timeout closes before the NLB's
    (`lb_idle_seconds`: the NLB in front of Envoy; None without one)."""
    rows: list[Relation] = []
    bound = edge.stream_seconds
    if edge.envoy_drain_seconds is not None and edge.envoy_grace_seconds is not None:
        rows += [
            Relation("edge: Envoy shutdown.drainTimeout", edge.envoy_drain_seconds, ">=", bound,
                     "longest stream bound", "an Envoy rollout or node drain cuts the streams it holds"),
            Relation("edge: Envoy terminationGracePeriodSeconds", edge.envoy_grace_seconds, ">",
                     edge.envoy_drain_seconds, "Envoy drain", "SIGKILL ends Envoy's drain early"),
        ]
    if edge.deregistration_delay_seconds is not None:
        lb = "NLB" if edge.envoy_drain_seconds is not None else "ALB"
        rows.append(Relation(f"edge: {lb} deregistration delay", edge.deregistration_delay_seconds, ">=", bound,
                             "longest stream bound",
                             f"the {lb} resets a removed target's open flows when the delay ends"))
    if lb_idle_seconds is not None:
        rows.append(Relation("edge: stream idle timeout", stream_idle_seconds, "<", lb_idle_seconds,
                             "the NLB's TCP idle timeout", "the NLB drops a silent flow without telling Envoy",
                             "edge.streamIdleTimeoutSeconds"))
    rows.append(Relation("vLLM --sse-keep-alive-interval", SSE_KEEP_ALIVE_SECONDS, "<", stream_idle_seconds,
                         "stream idle timeout", "a queued or slow stream looks idle and is cut",
                         "edge.streamIdleTimeoutSeconds"))
    return rows


def node_update_relation(drain_wait_seconds: int, longest_grace_seconds: int) -> Relation:
    """The old group's deletion waits out every replaced pod: the barrier's wait starts once the last
    rollout completed, when the last replaced pod had already begun its grace period (and the drain
    relations hold each stream within that grace period)."""
    return Relation("node update: drain barrier before the old group's deletion", drain_wait_seconds, ">=",
                    longest_grace_seconds, "longest vLLM terminationGracePeriodSeconds",
                    "EKS terminates a deleted group's nodes 5 minutes into their drain, cutting the streams "
                    "of the last replaced pods")


def _clock(seconds: int) -> str:
    return f"{seconds // 60}:{seconds % 60:02d}"


def node_update_timeline(node_ready_seconds: int, steps: int, step_seconds: int, stream_seconds: int,
                         grace_seconds: int, drain_wait_seconds: int, delete_seconds: int) -> list[tuple[str, str]]:
    """(mm:ss from the start of `pulumi up`, what happens) of a node update of one model rolled in
    `steps` steps, each `step_seconds`: every old pod starts draining when its step completes, and its
    last stream is one admitted just before its preStop ends."""
    rolled = node_ready_seconds + steps * step_seconds
    rows = [(_clock(0), "`pulumi up` creates the new node group beside the old one and the new generation's "
                        "drain barrier"),
            (_clock(node_ready_seconds), "the new nodes have joined; the Deployment rolls onto them")]
    for step in range(1, steps + 1):
        done = node_ready_seconds + step * step_seconds
        what = (f"step {step} of {steps}: a new replica is available; an old one stops taking requests after "
                f"its {PRE_STOP_SECONDS} s preStop and drains its streams")
        if step == steps:
            what += ("; the rollout is complete, so Pulumi starts its deletions: the old generation's drain "
                     f"barrier first, whose pod sleeps {drain_wait_seconds:,} s before it goes")
        rows.append((_clock(done), what))
    rows += [
        (_clock(rolled + PRE_STOP_SECONDS + stream_seconds),
         f"the last stream the last old replica admitted ends at the latest (its preStop + the {stream_seconds:,} s "
         "stream bound)"),
        (_clock(rolled + grace_seconds), f"the last old replica has exited at the latest ({grace_seconds:,} s grace)"),
        (_clock(rolled + drain_wait_seconds), "the barrier is gone; Pulumi deletes the old node group, whose nodes "
                                              "host no replica"),
        (_clock(rolled + drain_wait_seconds + delete_seconds),
         "EKS has drained (at most 5 min) and terminated the old nodes; the update ends"),
    ]
    return rows


def timing_problems(relations: list[Relation]) -> list[Relation]:
    """The relations that do not hold."""
    return [r for r in relations if not r.holds]


def timing_table(relations: list[Relation]) -> list[tuple[str, str, str]]:
    """(rule, numbers, ok/VIOLATED) rows for `plan --stack` and the docs."""
    return [(r.path, f"{r.left_seconds:,} s {r.op} {r.right_label} {r.right_seconds:,} s",
             "ok" if r.holds else "VIOLATED") for r in relations]
