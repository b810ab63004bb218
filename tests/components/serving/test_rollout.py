"""llm_serving/serving/rollout.py: packing, the strategy decision, node-update timing and scale-up time."""

from __future__ import annotations

import pytest

from llm_serving.serving import rollout
from llm_serving.serving.rollout import Footprint, RolloutError, Strategy, Supply, Timing

TIMING = Timing(node_ready_seconds=300, image_pull_seconds=300)
LLAMA_70B = Footprint("llama-70b", tensor_parallel_size=4, min_replicas=2, max_replicas=4, cold_start_seconds=1317)
P5 = Supply(gpus_per_node=8, nodes=4, instance_type="p5.48xlarge", autoscaled=True)


@pytest.mark.parametrize(("groups", "nodes", "fit"), [
    ([4, 4, 4, 4], 2, True),
    ([4, 4, 4], 1, False),
    ([8], 2, True),
    ([4, 4], 1, True),
    ([6, 6], 1, False),  # 12 GPUs on 8: no
    ([6, 2, 6, 2], 2, True),
    # Spread first: the scheduler puts each TP4 on its own node, and no node keeps 8 free for the TP8.
    ([8, 4, 4], 2, False),
    ([8, 4, 4], 3, True),
    ([2, 2, 2, 2, 8], 2, False),
])
def test_packing_keeps_each_replica_on_one_node_even_when_the_scheduler_spreads(groups, nodes, fit):
    assert rollout.fits(groups, 8, nodes) is fit


def test_enough_gpus_in_total_is_not_enough():
    # 16 GPUs on 2 x 8, but the TP4 replica must join a TP6 one on some node: 10 > 8.
    assert rollout.fits([6, 6, 4], 8, 2) is False
    assert rollout.nodes_needed([6, 6, 4], 8) == 3
    assert rollout.nodes_needed([], 8) == 0


@pytest.mark.parametrize(("supply_nodes", "models", "environment", "expected"), [
    # prod: 4 x TP4 at peak fill 2 of 4 nodes; a surge replica fits.
    (4, [LLAMA_70B], "prod", {"llama-70b": ("RollingUpdate", 1, 0)}),
    # Two nodes are full at peak: roll one replica at a time, the other keeps serving.
    (2, [LLAMA_70B], "prod", {"llama-70b": ("RollingUpdate", 0, 1)}),
    # A single replica with no room stops serving during a rollout: dev only.
    (1, [Footprint("big", 8, 1, 1, 900)], "dev", {"big": ("Recreate", 0, 0)}),
    # A ReadWriteOnce claim cannot follow a surge pod to another node.
    (4, [Footprint("rwo", 1, 1, 1, 300, shared_weights=False)], "dev", {"rwo": ("Recreate", 0, 0)}),
    # Surges are reserved in order: the first model takes the last free TP4 slot.
    (4, [LLAMA_70B, Footprint("second", 4, 2, 3, 600)], "prod",
     {"llama-70b": ("RollingUpdate", 1, 0), "second": ("RollingUpdate", 0, 1)}),
])
def test_strategy_follows_the_gpus_free_at_peak(supply_nodes, models, environment, expected):
    supply = Supply(8, supply_nodes, "p5.48xlarge", autoscaled=True)
    chosen = rollout.choose_strategies(models, supply, environment)
    assert {name: (s.type, s.max_surge, s.max_unavailable) for name, s in chosen.items()} == expected


def test_strategy_manifests():
    assert Strategy("RollingUpdate", 1, 0).manifest() == {
        "type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    assert Strategy("Recreate").manifest() == {"type": "Recreate"}


def test_peak_that_does_not_pack_is_rejected_with_the_numbers():
    with pytest.raises(RolloutError) as raised:
        rollout.choose_strategies([LLAMA_70B], Supply(8, 1, "p5.48xlarge", autoscaled=False), "prod")
    assert str(raised.value) == (
        "at peak the models need 2 nodes (llama-70b 4 x TP4 = 16 GPUs, each replica on one node) but the node "
        "group supplies 1 x p5.48xlarge (8 GPUs each; desiredNodes, no node autoscaler)")
    assert raised.value.nodes_needed == 2


def test_a_replica_wider_than_a_node_is_rejected():
    with pytest.raises(RolloutError, match="one replica needs 8 GPUs on one node but p5.4xlarge has 1"):
        rollout.check_peak([Footprint("x", 8, 1, 1, 60)], Supply(1, 8, "p5.4xlarge", autoscaled=True))


def test_recreate_outside_dev_is_rejected_and_names_the_nodes_that_would_fix_it():
    with pytest.raises(RolloutError) as raised:
        rollout.choose_strategies([Footprint("big", 8, 1, 1, 900)], Supply(8, 1, "p5.48xlarge", True), "staging")
    assert str(raised.value).startswith("big: a rollout would stop serving for a cold start")
    assert raised.value.nodes_needed == 2


def test_rollout_time_is_steps_of_pull_plus_cold_start():
    step = 300 + 1317 + 30
    surge = Strategy("RollingUpdate", 1, 0)
    assert rollout.rollout_seconds(LLAMA_70B, surge, 2, TIMING) == 2 * step
    # The first surge pod waits for a node once; later steps use the room replaced pods free.
    assert rollout.rollout_seconds(LLAMA_70B, surge, 2, TIMING, needs_node=True) == 300 + 2 * step
    assert rollout.rollout_seconds(LLAMA_70B, Strategy("RollingUpdate", 0, 1), 3, TIMING) == 3 * step
    assert rollout.rollout_seconds(LLAMA_70B, Strategy("Recreate"), 4, TIMING) == step


def test_adding_a_replica_costs_a_node_only_when_one_is_needed():
    assert rollout.replica_add_seconds(LLAMA_70B, TIMING, needs_node=False) == 300 + 1317 + 30
    assert rollout.replica_add_seconds(LLAMA_70B, TIMING, needs_node=True) == 300 + 300 + 1317 + 30
    # prod's two TP4 replicas share one node at minimum; the surge fits beside them.
    assert rollout.rollout_needs_node([LLAMA_70B], LLAMA_70B, 8, 2) is False
    dev = Footprint("llama-8b", 1, 1, 1, 363)
    assert rollout.rollout_needs_node([dev], dev, 1, 1) is True


@pytest.mark.parametrize(("model", "strategy", "running", "drain", "minutes", "extra_nodes"), [
    # prod: 2 replicas surge one at a time: 5 min node + 2 x 27.5 min + the 1,850 s drain + 5 min old group.
    (LLAMA_70B, Strategy("RollingUpdate", 1, 0), 2, 1850, 96, 2),
    # No surge room: one unavailable at a time takes as long, with one replica serving.
    (LLAMA_70B, Strategy("RollingUpdate", 0, 1), 2, 1850, 96, 2),
    # dev's 8B: one step, and a 10-minute stream bound's drain (600 + 15 + 30 s).
    (Footprint("llama-8b", 1, 1, 1, 363), Strategy("RollingUpdate", 1, 0), 1, 645, 32, 1),
])
def test_node_update_moves_pods_to_a_new_group_waits_for_their_drain_then_deletes_the_old(
        model, strategy, running, drain, minutes, extra_nodes):
    update = rollout.node_update([model], {model.name: strategy}, P5, running, TIMING, drain_wait_seconds=drain)
    assert round(update.seconds / 60) == minutes
    assert update.extra_nodes_at_peak == extra_nodes
    assert update.steps[0].startswith(f"create the new node group: {extra_nodes} node(s)")
    assert update.steps[2] == f"let the last replaced pods drain (the old generation's drain barrier): {drain:,} s"
    assert update.steps[3] == f"delete the old group's {running} emptied node(s): about 5 min"
