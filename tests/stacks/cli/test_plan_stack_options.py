"""`plan --stack`: every option either overrides the stack's own value (and the plan says so) or is
refused naming the option; a bare plan and a stack model with the same settings plan the same."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from llm_serving.gpu import known_instance_type_names
from llm_serving.serving import known_model_ids, offload_init_seconds
from llm_serving.stack import planning, timing
from stacks.cli import plan as plan_cli
from stacks.config.files import PROJECT_DIR, stack_file_path
from stacks.environment import load_stack_file


def _run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = plan_cli.main(list(argv), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def _json(*argv: str) -> dict:
    code, out, err = _run(*argv, "--json")
    assert (code, err) == (0, "")
    return json.loads(out)


def _tier_fill_seconds(path: Path) -> int:
    """What filling the CPU KV tier the planner gives the stack's one model adds to its engine start."""
    config = load_stack_file(path)[1]
    return offload_init_seconds(planning.kv_offload_gib(config, config.models[0]))


def test_the_issue_command_refuses_the_one_option_a_stack_cannot_take():
    code, out, err = _run("--stack", "prod", "--model", "llama-70b", "--gpu", "p4d.24xlarge", "--tp", "8",
                          "--max-model-len", "4096", "--replicas", "5", "--itl-slo-ms", "50",
                          "--available-kv-gib", "30")
    assert (code, out) == (2, "")
    assert err == ("python -m stacks plan: argument --available-kv-gib: not a stack setting with --stack; plan the "
                   "measured figure without --stack: --model <id> --gpu <type> --tp N --available-kv-gib X\n")


@pytest.mark.parametrize(("option", "value"), [
    ("--available-kv-gib", "30"), ("--storage-read-mib-per-second", "900"), ("--max-nodes-per-replica", "2"),
])
def test_options_without_a_config_key_are_refused_with_stack(option, value):
    code, _, err = _run("--stack", "prod", "--model", "llama-70b", option, value)
    assert code == 2 and err.startswith(f"python -m stacks plan: argument {option}: not a stack setting with --stack")


def test_command_line_values_override_the_stack_and_are_listed():
    data = _json("--stack", "prod", "--model", "llama-70b", "--tp", "8", "--max-model-len", "4096",
                 "--itl-slo-ms", "50", "--max-num-seqs", "128")
    assert (data["tensor_parallel_size"], data["max_model_len"], data["max_num_seqs"]) == (8, 4096, 128)
    assert data["performance"]["itl_slo_ms"] == 50.0
    assert data["from_command_line"] == {
        "models[llama-70b].tensorParallelSize": {"option": "--tp", "value": 8},
        "models[llama-70b].maxModelLen": {"option": "--max-model-len", "value": 4096},
        "models[llama-70b].slo.itlP95Seconds": {"option": "--itl-slo-ms", "value": 0.05},
        "models[llama-70b].maxNumSeqs": {"option": "--max-num-seqs", "value": 128},
    }
    code, out, _ = _run("--stack", "prod", "--model", "llama-70b", "--tp", "8")
    assert code == 0
    assert out.splitlines()[0] == ("from the command line (over the stack's values): "
                                   "models[llama-70b].tensorParallelSize=8 (--tp)")


def test_node_group_and_dynamics_options_override_the_stack():
    data = _json("--stack", "prod", "--model", "llama-70b", "--nodes", "2", "--max-nodes", "5",
                 "--node-ready-seconds", "600", "--image-pull-seconds", "60", "--max-replicas", "6")
    assert sorted(data["from_command_line"]) == [
        "gpuNodeGroup.imagePullSeconds", "gpuNodeGroup.nodeReadySeconds", "gpuNodeGroup.scaling.desiredNodes",
        "gpuNodeGroup.scaling.maxNodes", "models[llama-70b].autoscaling.maxReplicas"]
    base = _json("--stack", "prod", "--model", "llama-70b")
    # The new node's pull follows --image-pull-seconds, and its wait --node-ready-seconds; a running node holds
    # the image either way.
    pulls = (base["dynamics"]["image_pull_seconds_new_node"], data["dynamics"]["image_pull_seconds_new_node"])
    assert pulls == (300, 60)
    # The cold start (torch.compile from the shared cache) is the stack's own: only the node and the pull change.
    cold = base["dynamics"]["replica_add_cold_start_seconds"]
    assert cold == data["dynamics"]["replica_add_cold_start_seconds"] == base["cold_start_cached_seconds"]
    assert data["dynamics"]["replica_add_seconds_new_node"] == 600 + 60 + cold + 30
    assert base["dynamics"]["replica_add_seconds_running_node"] == \
        data["dynamics"]["replica_add_seconds_running_node"]


def test_engine_flags_override_the_stacks_extra_args():
    eager = _json("--stack", "prod", "--model", "llama-70b", "--enforce-eager")
    assert eager["from_command_line"] == {
        "models[llama-70b].extraArgs": {"option": "--enforce-eager", "value": ["--enforce-eager"]}}
    base = _json("--stack", "prod", "--model", "llama-70b")
    assert eager["cold_start_seconds"] < base["cold_start_seconds"]  # no CUDA-graph capture


def test_an_override_that_breaks_the_stack_is_reported_as_the_stacks_problem():
    code, out, err = _run("--stack", "prod", "--model", "llama-70b", "--tp", "3")
    assert (code, out) == (2, "")
    assert err.startswith("llm-serving:models[llama-70b]: cannot serve on p5.48xlarge: --tensor-parallel-size 3 "
                          "is not one of 1, 2, 4, 8")


def test_a_bare_plan_with_a_stack_models_settings_plans_the_same():
    stack = _json("--stack", "prod", "--model", "llama-70b")
    bare = _json("--model", stack["model_id"], "--gpu", "p5.48xlarge", "--max-model-len", str(stack["max_model_len"]),
                 "--tp", str(stack["tensor_parallel_size"]))
    # Both default --max-num-seqs to 256 (models[].maxNumSeqs); vLLM's own 1024 made the bare plan 289.
    assert (bare["max_num_seqs"], bare["kv_cache_tokens"]) == (stack["max_num_seqs"], stack["kv_cache_tokens"])
    assert bare["performance"]["slo_concurrency"] == stack["performance"]["slo_concurrency"] == 256


def test_stack_may_be_a_path_and_an_unknown_stack_names_the_option():
    assert _json("--stack", "examples/Pulumi.prod-405b.yaml", "--model", "llama-405b")["pipeline_parallel_size"] == 2
    code, _, err = _run("--stack", "nope", "--model", "llama-70b")
    assert code == 2 and err.startswith("llm-serving:--stack: no stack file Pulumi.nope.yaml")


def test_list_models_and_gpus_print_the_catalogs():
    code, out, _ = _run("--list-models")
    assert code == 0 and [line.split()[0] for line in out.splitlines()] == list(known_model_ids())
    gpus = _json("--list-gpus")
    assert list(gpus) == sorted(known_instance_type_names())
    assert gpus["p5.48xlarge"] == "8 x NVIDIA-H100-80GB-HBM3 79.2 GiB"


def test_plan_without_a_model_says_what_is_missing():
    assert _run() == (2, "", "python -m stacks plan: --model is required (or --list-models, --list-gpus)\n")


def test_replicas_sets_the_models_low_bound():
    data = _json("--stack", "prod", "--model", "llama-70b", "--replicas", "3")
    assert data["from_command_line"] == {
        "models[llama-70b].replicas": {"option": "--replicas", "value": 3},
        "models[llama-70b].autoscaling.minReplicas": {"option": "--replicas", "value": 3},
    }
    # prod rolls one replica at a time, each step the image pull, the cold start and minReadySeconds (about
    # 15 minutes): three take three steps, two took two.
    config = load_stack_file(stack_file_path("prod"))[1]
    step = timing.rollout_steps(config, config.models[0])[1]
    assert step == 300 + planning.model_plan(config, config.models[0]).cold_start_seconds + 30
    assert (data["dynamics"]["rollout_seconds"], _json("--stack", "prod", "--model", "llama-70b")["dynamics"][
        "rollout_seconds"]) == (3 * step, 2 * step)


def test_plan_stack_breaks_adding_a_replica_into_its_terms_on_a_free_and_a_new_node():
    # EFS with the shared compile cache: a free node holds the pre-pulled image, and the replica loads its
    # compile from the cache (10 s instead of 67 s of torch.compile). Engine init is 173 s plus filling the CPU
    # KV tier the planner gives the model.
    engine = 173 + _tier_fill_seconds(stack_file_path("prod"))
    terms = {"weights_seconds": 270, "engine_init_seconds": engine, "compile_seconds": 10, "ready_seconds": 30}
    assert _json("--stack", "prod", "--model", "llama-70b")["dynamics"]["cold_start"] == {
        "free_node": {"node_seconds": 0, "image_pull_seconds": 0, **terms, "total_seconds": 310 + engine},
        "new_node": {"node_seconds": 300, "image_pull_seconds": 300, **terms, "total_seconds": 910 + engine},
        "storage": "EFS Elastic, 500 MiB/s per pod"}
    code, out, _ = _run("--stack", "examples/Pulumi.prod-s3.yaml", "--model", "llama-70b")
    rows = {line.split("  ", 1)[0]: line.split("  ", 1)[1].strip() for line in out.splitlines() if "  " in line}
    assert code == 0
    assert rows["weights read speed"] == ("S3 (a bucket of its own) through the Run:ai Model Streamer at concurrency "
                                          "32, 2,931 MiB/s per pod (cited, bound by the streamer: 15 GB in 4.88 s at "
                                          "concurrency 32)")
    # S3 shares the compile cache too (its prefix in the bucket): 10 s of torch.compile on either node. Its tier
    # is smaller than EFS's by the streamer's buffer, so its fill may be too.
    engine = 173 + _tier_fill_seconds(PROJECT_DIR / "examples" / "Pulumi.prod-s3.yaml")
    free, new = 86 + engine, 686 + engine
    assert rows["add a replica, free node"] == (f"{free / 60:.0f} min ({free} s): node 0 s + image pull 0 s + "
                                                f"weights 46 s + engine init {engine} s + compile 10 s + ready 30 s")
    assert rows["add a replica, new node"] == (f"{new / 60:.0f} min ({new} s): node 300 s + image pull 300 s + "
                                               f"weights 46 s + engine init {engine} s + compile 10 s + ready 30 s")
