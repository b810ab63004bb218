"""The one clock: the stream bound, the drains it implies, and the timing rules with their numbers."""

from __future__ import annotations

import pytest

from llm_serving import serving
from llm_serving.routing import objects as routing_objects
from llm_serving.serving import timing


@pytest.mark.parametrize(("max_model_len", "itl", "ttft", "bound"), [
    (16384, 0.1, 2, 1805),  # prod: 1,638.4 s + 2 s, plus 10 %
    (8192, 0.1, 2, 904),  # dev
    (4096, 0.1, 2, 600),  # 412 s planned: the floor
    (131072, 0.1, 2, 3600),  # 14,420 s planned: no load balancer could drain it; the ceiling
])
def test_stream_bound_is_max_model_len_at_the_itl_objective_with_headroom(max_model_len, itl, ttft, bound):
    assert serving.derived_stream_seconds(max_model_len, itl, ttft) == bound


def test_every_drain_of_a_routed_model_follows_the_bound():
    bound = 1805
    drains = serving.model_drains("llama-70b", bound, routed=True)
    # Every timeout on the path holds the bound; the pod's grace covers its preStop, the drain and an exit.
    assert drains.route_timeout_seconds == drains.vllm_shutdown_seconds == drains.picker_drain_seconds == bound
    assert drains.vllm_grace_seconds > serving.PRE_STOP_SECONDS + bound
    assert drains.picker_grace_seconds > bound and drains.worker_pre_stop_seconds is None
    # Pulumi's delete waits for the longest grace of the workloads that drain.
    assert drains.delete_timeout_seconds > max(drains.vllm_grace_seconds, drains.picker_grace_seconds)
    assert serving.timing_problems(serving.drain_relations(drains)) == []


def test_a_multinode_model_s_workers_outlast_the_leaders_drain():
    drains = serving.model_drains("llama-405b", 1807, multinode=True)
    # A worker leaves only after the leader's preStop and drain: never under a stream the leader still serves.
    assert drains.worker_pre_stop_seconds == serving.PRE_STOP_SECONDS + drains.vllm_shutdown_seconds
    assert drains.picker_drain_seconds is None


def test_a_shutdown_override_shorter_than_the_bound_is_the_one_broken_rule():
    drains = serving.model_drains("llama-70b", 1805, vllm_shutdown_seconds=300, routed=True)
    (broken,) = serving.timing_problems(serving.drain_relations(drains))
    assert broken.text() == "llama-70b: vLLM --shutdown-timeout 300 s >= stream bound 1,805 s"
    assert broken.key == "models[llama-70b].shutdownTimeoutSeconds"


@pytest.mark.parametrize(("mode", "envoy", "grace", "deregistration"), [
    ((True, True), 1805, 2105, 1805),  # gateway: Envoy drains, and adds 300 s to its grace; the NLB keeps flows
    ((False, True), None, None, 1805),  # alb: the ALB's targets are the vLLM pods
    ((False, False), None, None, None),  # ingress-nginx: neither proxy nor load balancer is ours
])
def test_the_edge_holds_the_longest_stream_of_any_route(mode, envoy, grace, deregistration):
    edge = serving.edge_drains([904, 1805], envoy=mode[0], load_balancer_targets=mode[1])
    assert (edge.stream_seconds, edge.envoy_drain_seconds, edge.envoy_grace_seconds,
            edge.deregistration_delay_seconds) == (1805, envoy, grace, deregistration)


def test_edge_rules_refuse_an_idle_timeout_the_nlb_would_hit_first_and_keep_alive_above_it():
    edge = serving.edge_drains([1805], envoy=True, load_balancer_targets=True)
    assert serving.timing_problems(serving.edge_relations(edge, 300, 350)) == []
    broken = serving.timing_problems(serving.edge_relations(edge, 10, 350))
    assert [r.text() for r in broken] == ["vLLM --sse-keep-alive-interval 15 s < stream idle timeout 10 s"]
    (nlb,) = serving.timing_problems(serving.edge_relations(edge, 350, 350))
    assert nlb.text() == "edge: stream idle timeout 350 s < the NLB's TCP idle timeout 350 s"


def test_rollout_await_waits_for_planned_steps_and_the_last_up_to_the_progress_deadline():
    deadline = serving.progress_deadline_seconds(1020, 600)
    assert deadline == 1920
    assert serving.rollout_await_seconds(4, 840, deadline) == 3 * 840 + 1920 + 120 == 4560
    assert serving.rollout_await_seconds(1, 601, 1500) == 1620


def _seconds(clock: str) -> int:
    minutes, seconds = clock.split(":")
    return int(minutes) * 60 + int(seconds)


def test_a_group_rollout_waits_out_each_in_place_drain_before_its_cold_start():
    rollout = serving.group_rollout(2, 1, 0, node_ready_seconds=300, image_pull_seconds=300, cold_start_seconds=1789,
                                    leader_grace_seconds=1852)
    # The surge group first, on new nodes; then each old group in place, one at a time (maxUnavailable 0 +
    # maxSurge 1): a recreated leader takes the old one's name, so its cold start begins after the old drain.
    assert (rollout.surge_groups, rollout.batch, rollout.in_place_steps) == (1, 1, 2)
    assert rollout.surge_seconds == 300 + rollout.start_seconds
    assert rollout.step_seconds == rollout.leader_grace_seconds + serving.WORKER_EXIT_SECONDS + rollout.start_seconds
    assert rollout.seconds == rollout.surge_seconds + 2 * rollout.step_seconds
    wait = serving.group_rollout_await_seconds(rollout)
    assert wait == rollout.seconds + serving.AWAIT_MARGIN_SECONDS
    rows = serving.group_rollout_timeline("m", rollout, wait)
    # The timeline ends when the rollout does, within Pulumi's wait; the highest index rolls first, and the surge
    # group goes only once every group is ready (maxUnavailable 0: never fewer groups than the replicas).
    assert _seconds(rows[-1][0]) == rollout.seconds < wait
    assert [_seconds(at) for at, _ in rows] == sorted(_seconds(at) for at, _ in rows)
    steps = [what for _, what in rows if "lws deletes the leader" in what]
    assert ["m-1" in steps[0], "m-0" in steps[1]] == [True, True]
    assert [what for _, what in rows if "removes the surge group" in what] == [rows[-1][1]]


def test_every_group_unavailable_still_rolls_one_group_at_a_time_without_the_statefulset_gate():
    # A Recreate asks lws for every group at once, but the leader StatefulSet replaces one pod at a time unless
    # the MaxUnavailableStatefulSet gate is on (alpha through Kubernetes 1.34).
    timing_args = dict(node_ready_seconds=300, image_pull_seconds=60, cold_start_seconds=900, leader_grace_seconds=600)
    rollout = serving.group_rollout(3, 0, 3, **timing_args)
    assert (rollout.surge_groups, rollout.in_place_steps, rollout.surge_seconds) == (0, 3, 0)
    rows = serving.group_rollout_timeline("m", rollout, serving.group_rollout_await_seconds(rollout))
    assert not [what for _, what in rows if "surge" in what]
    assert _seconds(rows[-1][0]) == rollout.seconds
    gated = serving.group_rollout(3, 0, 3, parallel_pods=True, **timing_args)
    assert gated.in_place_steps == 1 and gated.seconds < rollout.seconds
    rows = serving.group_rollout_timeline("m", gated, serving.group_rollout_await_seconds(gated))
    assert "m-0 to m-2" in rows[0][1]


def test_a_group_rollout_surges_no_more_groups_than_the_model_has():
    rollout = serving.group_rollout(1, 2, 0, node_ready_seconds=300, image_pull_seconds=60, cold_start_seconds=900,
                                    leader_grace_seconds=600)
    assert (rollout.surge_groups, rollout.in_place_steps) == (1, 1)


def test_timing_table_marks_what_does_not_hold():
    rows = serving.timing_table(serving.drain_relations(serving.model_drains("m", 900, vllm_shutdown_seconds=300)))
    assert rows[1] == ("m: vLLM --shutdown-timeout", "300 s >= stream bound 900 s", "VIOLATED")
    assert rows[0] == ("m: route request timeout", "900 s <= stream bound 900 s", "ok")


def test_picker_exit_margin_is_the_routing_package_s():
    assert timing.PICKER_EXIT_MARGIN_SECONDS == routing_objects.TERMINATION_MARGIN_SECONDS
