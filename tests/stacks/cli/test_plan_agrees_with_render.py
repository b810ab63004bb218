"""`plan --stack S --model M` and the render of S agree on every figure the workload carries, for every model of
every stack and example; and adding a model never changes another's rollout without saying why."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from llm_serving import serving
from llm_serving.stack import planning, stack
from llm_serving.stack import timing as stack_timing
from stacks.cli import plan as plan_cli
from stacks.environment import load_stack_file
from stacks.offline import consequences, render
from tests.conftest import PROJECT_DIR, STACK_FILES, render_file
from tests.support import stack_variants
from tests.support.cli import run_stacks

EXAMPLES = sorted((PROJECT_DIR / "examples").glob("Pulumi.*.yaml"))
FILES = [*STACK_FILES, *EXAMPLES]


def _plan(path: Path, model: str) -> dict[str, Any]:
    ran = run_stacks("plan", "--stack", str(path), "--model", model, "--json")
    assert (ran.returncode, ran.stderr) == (0, ""), ran.stderr
    return json.loads(ran.stdout)


def _flag(args: list[str], flag: str) -> str | None:
    return args[args.index(flag) + 1] if flag in args else None


def _workload(render: Any, name: str) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any] | None]:
    """(the vLLM container, its pod spec, the Deployment's strategy or None for a LeaderWorkerSet)."""
    try:
        deployment = render.manifest("Deployment", name)
    except KeyError:
        group = render.manifest("LeaderWorkerSet", name)["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]
        return next(c for c in group["containers"] if "args" in c), group, None
    pod = deployment["spec"]["template"]["spec"]
    return next(c for c in pod["containers"] if c["name"] == "vllm"), pod, deployment["spec"]["strategy"]


def _engine_args(container: dict[str, Any]) -> list[str]:
    # A multi-node leader starts vLLM from a shell line; single-node pods pass the flags as args.
    return " ".join(container.get("args", []) + container.get("command", [])).split()


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_the_plan_and_the_render_agree_for_every_model(path: Path):
    render = render_file(path)
    _, config = load_stack_file(path)
    for model in config.models:
        data = _plan(path, model.name)
        container, pod, strategy = _workload(render, model.name)
        args = _engine_args(container)
        assert _flag(args, "--tensor-parallel-size") == str(data["tensor_parallel_size"]), model.name
        assert int(_flag(args, "--pipeline-parallel-size") or 1) == data["pipeline_parallel_size"], model.name
        assert _flag(args, "--max-num-seqs") == str(data["max_num_seqs"]), model.name
        assert _flag(args, "--max-model-len") == str(data["max_model_len"]), model.name
        assert float(_flag(args, "--gpu-memory-utilization") or "nan") == data["gpu_memory_utilization"], model.name
        tier = data["dynamics"].get("kv_offload", {}).get("size_gib") if data["dynamics"] else None
        assert _flag(args, "--kv-offloading-size") == (None if tier is None else str(tier)), model.name
        probe = container["startupProbe"]
        assert probe["failureThreshold"] * probe["periodSeconds"] == data["startup_budget_seconds"], model.name
        assert pod["terminationGracePeriodSeconds"] == stack_timing.model_drains(config, model).vllm_grace_seconds
        if strategy is not None:
            # The strategy the plan prints is the one the Deployment rolls out with.
            assert data["dynamics"]["rollout"] == strategy, model.name
        # Every timing rule the plan prints holds, with the numbers the render was built from.
        assert all(row["holds"] for row in data["timing"]), model.name
        assert data["cost"]["usd_per_replica_hour"] == planning.usd_per_replica_hour(planning.model_plan(config, model))


def _second_model(directory: Path) -> Path:
    """dev serving a second 8B model beside llama-8b: two 1-GPU nodes at most hold both at peak, no surge."""
    return stack_variants.write(directory, "dev-two-models", {
        "grafanaAdminPassword": {"secure": "v1:x"},
        "models": [{"name": "qwen-8b", "modelId": "Qwen/Qwen3-8B",
                    "revision": "9c925d64d72725edaf899c6cb9c377fd0709d9c5", "replicas": 1, "maxModelLen": 8192,
                    "tensorParallelSize": 1, "route": {"pathPrefix": "/qwen"}}],
    }, extends="dev")


def test_a_second_model_that_takes_the_surge_room_is_named_by_the_plan_the_preview_and_the_diff(
        variants_dir: Path, monkeypatch: pytest.MonkeyPatch):
    path = _second_model(variants_dir)
    _, config = load_stack_file(path)
    alone = planning.rollout_strategies(load_stack_file(PROJECT_DIR / "Pulumi.dev.yaml")[1])["llama-8b"]
    beside = planning.rollout_strategies(config)["llama-8b"]
    assert (alone.type, beside.type) == ("RollingUpdate", "Recreate")
    # plan --stack prints the strategy the stack deploys, and why it is not the one the model has alone.
    data = _plan(path, "llama-8b")
    warned: list[str] = []
    monkeypatch.setattr(stack.pulumi.log, "warn", lambda message, *_, **__: warned.append(message))
    rendered = render.render_stack(path)  # not the session's cached render: this one's warnings are the test's
    assert data["dynamics"]["rollout"] == beside.manifest() == rendered.manifest(
        "Deployment", "llama-8b")["spec"]["strategy"]
    why = data["dynamics"]["rollout_crowded_out"]
    assert why.startswith("llama-8b: rollout Recreate") and "qwen-8b 1 x TP1" in why
    supply = planning.supply(config)
    needed = int(why.rsplit("; ", 1)[1].split()[0])
    assert needed > supply.nodes  # the fix it names is more nodes than the group may have
    text = io.StringIO()
    assert plan_cli.main(["--stack", str(path), "--model", "llama-8b"], text, io.StringIO()) == 0
    assert f"rollout beside the others   {why}" in text.getvalue()
    # The preview (ServingStack) warns with the same line, once per crowded model.
    assert why in warned
    assert sum(line.startswith("qwen-8b: rollout ") for line in warned) == 1
    # The diff of the Deployment's strategy says the same.
    lines = consequences.for_change(config, "kubernetes:apps/v1:Deployment", "llama-8b-deployment", "update",
                                    ["inputs.spec.strategy.type", "inputs.spec.strategy.rollingUpdate"], None)
    assert lines[0].startswith("rollout strategy: now Recreate (every replica stops, then all start): ")
    assert lines[1] == f"beside the other models: {why}"


def test_a_model_alone_in_its_node_group_is_never_said_to_be_crowded_out():
    for path in FILES:
        _, config = load_stack_file(path)
        if len(config.models) == 1:
            assert planning.rollout_crowded_out(config) == {}, path.name


def test_crowding_is_judged_against_the_same_supply_and_order_the_strategies_use():
    supply = serving.Supply(8, 1, "p5.48xlarge", autoscaled=True)
    big = serving.Footprint("big", 2, 1, 1, 600)
    small = serving.Footprint("small", 2, 2, 2, 300)
    # At peak 6 of the 8 GPUs: big surges first (config order) and takes the last 2; small, alone, would have
    # surged, and rolls one replica at a time instead.
    notes = serving.crowded_out([big, small], supply, "prod")
    assert set(notes) == {"small"}
    assert notes["small"].startswith("small: rollout RollingUpdate maxSurge 0, maxUnavailable 1, not RollingUpdate "
                                     "maxSurge 1, maxUnavailable 0 as alone")
    assert "the surge replicas of big (earlier in models[]) are reserved first; 2 nodes would give it room" in (
        notes["small"])
    # The other order in dev: small's surge comes first, and big, with one replica, stops for its rollout.
    reversed_notes = serving.crowded_out([small, big], supply, "dev")
    assert set(reversed_notes) == {"big"}
    assert reversed_notes["big"].startswith("big: rollout Recreate (every replica stops, then all start), not "
                                            "RollingUpdate maxSurge 1, maxUnavailable 0 as alone")


def test_the_nodes_that_would_give_room_are_counted_with_the_earlier_models_surges_taken_first():
    supply = serving.Supply(8, 2, "p5.48xlarge", autoscaled=True)
    a, b = serving.Footprint("a", 8, 1, 1, 600), serving.Footprint("b", 8, 1, 1, 600)
    notes = serving.crowded_out([a, b], supply, "dev")
    # At 3 nodes a, first in models[], takes the one surge node; b needs a fourth.
    assert notes["a"].endswith("; 3 nodes would give it room")
    assert notes["b"].endswith("; 4 nodes would give it room")
    import dataclasses

    for name, nodes in (("a", 3), ("b", 4)):
        chosen = serving.choose_strategies([a, b], dataclasses.replace(supply, nodes=nodes), "dev")[name]
        assert chosen.max_surge == 1
