"""`python -m stacks plan`: JSON and table output, and exit code 2 with one line (never a traceback)
for rejected plans, unknown models or GPUs, and bad arguments.
"""

from __future__ import annotations

import io
import json

from llm_serving import serving
from llm_serving.stack import planning, timing
from stacks.cli import plan as plan_cli
from stacks.config.files import stack_file_path
from stacks.environment import load_stack_file
from tests.components.serving.test_capacity import AGREED_JSON_KEYS

PROD = ["--model", "meta-llama/Llama-3.1-70B-Instruct", "--gpu", "p5.48xlarge", "--max-model-len", "16384"]


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = plan_cli.main(argv, stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def test_json_output_has_the_agreed_keys_sorted() -> None:
    code, out, err = _run([*PROD, "--gpu-memory-utilization", "0.92", "--json"])
    assert (code, err) == (0, "")
    data = json.loads(out)
    assert AGREED_JSON_KEYS <= set(data)
    assert data["tensor_parallel_size"] == 4
    assert data["kv_cache_tokens"] == 445_568
    assert out == json.dumps(data, sort_keys=True, indent=2) + "\n"


def test_table_output_shows_the_tensor_parallel_size() -> None:
    code, out, _ = _run(PROD)
    assert code == 0
    line = next(line for line in out.splitlines() if line.startswith("tensor parallel size"))
    assert line.split()[3] == "4"
    assert "445,568" in out and "27.20x at 16,384 tokens per request" in out


def test_rejected_plan_exits_2_with_one_line_on_stderr() -> None:
    code, out, err = _run(
        [
            "--model",
            "meta-llama/Llama-3.1-405B-Instruct",
            "--gpu",
            "p5.4xlarge",
            "--max-model-len",
            "8192",
            "--tp",
            "1",
        ]
    )
    assert code == 2 and out == ""
    assert err.count("\n") == 1
    assert err.startswith("plan rejected: meta-llama/Llama-3.1-405B-Instruct needs 755.96 GiB")
    assert "Traceback" not in err


def test_kv_cache_too_small_for_one_request_is_rejected_with_numbers() -> None:
    code, _, err = _run(
        [
            "--model",
            "meta-llama/Llama-3.1-8B-Instruct",
            "--gpu",
            "p5.4xlarge",
            "--max-model-len",
            "16384",
            "--tp",
            "1",
            "--available-kv-gib",
            "1.5",
        ]
    )
    assert code == 2
    assert "KV cache holds 12,288 tokens but one request at --max-model-len 16384 needs 16,384" in err


def test_measured_kv_budget_is_used_as_given() -> None:
    code, out, _ = _run([*PROD, "--tensor-parallel-size", "4", "--available-kv-gib", "30", "--json"])
    data = json.loads(out)
    # 30 GiB / 81,920 B = 393,216 tokens (whole blocks)
    assert code == 0
    assert (data["kv_source"], data["kv_cache_tokens"]) == ("measured", 393_216)
    assert data["runtime_overhead_gib_per_gpu"] is None


def test_unknown_model_lists_known_ones_and_exits_2() -> None:
    code, _, err = _run(["--model", "meta-llama/Llama-3.1-70B", "--gpu", "p5.48xlarge", "--max-model-len", "8192"])
    assert code == 2
    assert err.startswith("python -m stacks plan: argument --model: unknown model 'meta-llama/Llama-3.1-70B'")
    assert "Qwen/Qwen3-8B" in err and "openai/gpt-oss-120b" in err


def test_unknown_gpu_lists_known_instance_types_and_exits_2() -> None:
    code, _, err = _run(["--model", "Qwen/Qwen3-8B", "--gpu", "p5.48xl", "--max-model-len", "8192"])
    assert code == 2
    assert 'did you mean "p5.48xlarge"' in err and "g6e.xlarge" in err


def test_max_model_len_has_one_meaning_per_spelling() -> None:
    # 16K = 16 x 1024 = 16,384. vLLM reads 16k as 16,000, which is rarely meant: refused, naming both readings.
    _, binary, _ = _run([*PROD[:-1], "16K", "--json"])
    assert json.loads(binary)["max_model_len"] == 16_384
    code, _, err = _run([*PROD[:-1], "16k"])
    assert code == 2 and "'16k' is ambiguous (vLLM reads it as 16 x 1000, most people mean 16 x 1024): write 16K" in err
    for bad in ("16.5", "1.5k5", "infk", "16x"):
        code, _, err = _run([*PROD[:-1], bad])
        assert code == 2 and "--max-model-len" in err, bad


def test_bad_tensor_parallel_value_is_a_usage_error() -> None:
    code, _, _ = _run([*PROD, "--tp", "four"])
    assert code == 2


def test_non_finite_numbers_are_rejected_without_a_traceback() -> None:
    for flag, allowed in (("--available-kv-gib", "a number > 0"), ("--gpu-memory-utilization", "a number > 0"),
                          ("--storage-read-mib-per-second", "a number > 0")):
        code, _, err = _run([*PROD, "--tp", "4", flag, "nan"])
        assert (code, err) == (2, f"python -m stacks plan: argument {flag}: expected {allowed}, got 'nan'\n")


def test_auto_tp_with_measured_kv_budget_exits_2() -> None:
    code, _, err = _run([*PROD, "--available-kv-gib", "30"])
    assert code == 2 and "give that --tensor-parallel-size" in err


def test_a_model_no_tensor_parallel_size_fits_is_one_line_without_a_traceback() -> None:
    code, out, err = _run(["--model", "meta-llama/Llama-3.1-405B-Instruct", "--gpu", "p5.48xlarge",
                           "--max-model-len", "16384"])
    assert (code, out) == (2, "")
    assert "Traceback" not in err
    assert err.startswith("plan rejected: no --tensor-parallel-size in 1, 2, 4, 8 fits")


def test_dynamics_for_prods_replicas_and_nodes() -> None:
    code, out, err = _run([*PROD, "--replicas", "2", "--max-replicas", "4", "--nodes", "2", "--max-nodes", "4",
                           "--json"])
    assert (code, err) == (0, "")
    # The drain barrier holds the old group until the last replaced pod's grace period is over.
    # The planner's defaults: a 16,384-token answer at the 100 ms ITL after the 2 s TTFT objectives.
    grace = serving.model_drains("model", serving.derived_stream_seconds(16384, 0.1, 2.0)).vllm_grace_seconds
    assert json.loads(out)["dynamics"] == {
        # Cold start 510 s (EFS, 500 MiB/s) + minReadySeconds 30 s; a running node has 4 GPUs free and,
        # pre-pulled, the image.
        "replica_add_seconds": 540,
        "replica_add_needs_node": False,
        "node_seconds": 300,
        "image_pull_seconds_running_node": 0,
        "image_pull_seconds_new_node": 300,
        "image_pre_pull": "daemonSet",
        "compile_cache": "off",
        "compile_cache_reason": "off",
        "compile_seconds": 67,
        "compile_cached_seconds": 10,
        "compile_seconds_saved_per_replica": 57,
        "replica_add_seconds_running_node": 540,
        "replica_add_seconds_new_node": 1140,
        "replica_add_cold_start_seconds": 510,
        "rollout": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
        "rollout_needs_node": False,
        "rollout_seconds": 2 * 840,
        # New group's 2 nodes (300 s) + both replicas rolled (1,680 s) + the drain barrier's wait for the
        # last replaced pod's grace + 300 s to delete the old group.
        "node_update_seconds": 300 + 1680 + grace + 300,
        "node_update_extra_nodes": 2,
    }


def test_dynamics_count_a_new_node_when_no_running_node_has_room() -> None:
    code, out, _ = _run([*PROD, "--replicas", "2", "--nodes", "1", "--max-nodes", "2",
                         "--node-ready-seconds", "420", "--image-pull-seconds", "120"])
    assert code == 0
    assert "add one replica             18 min (1,080 s) (needs a new node)" in out
    # 420 s for the first surge pod's node, then two steps of 120 + 510 + 30 s.
    assert ("rollout                     maxSurge 1, maxUnavailable 0: 29 min (1,740 s), surge pod needs a new "
            "node") in out
    assert "weights read speed          500 MiB/s (EFS Elastic, the default weights storage)" in out


def test_a_rollout_with_no_room_and_one_replica_is_reported_not_raised() -> None:
    code, out, _ = _run([*PROD, "--replicas", "1", "--nodes", "1", "--max-nodes", "1", "--tp", "8"])
    assert code == 1  # planned, printed, and not deployable as asked
    assert "rollout                     rejected: model: a rollout would stop serving for a cold start" in out


def test_replica_bounds_are_checked() -> None:
    code, _, err = _run([*PROD, "--replicas", "3", "--max-replicas", "2"])
    assert code == 2
    assert err == ("plan rejected: --replicas 3 and --max-replicas 2: expected 1 <= replicas <= max replicas\n")


def test_stack_plan_is_exactly_what_prod_deploys(rendered) -> None:
    code, out, err = _run(["--stack", "prod", "--model", "llama-70b", "--json"])
    assert (code, err) == (0, "")
    data = json.loads(out)
    deployment = rendered["prod"].manifest("Deployment", "llama-70b")
    (vllm,) = deployment["spec"]["template"]["spec"]["containers"]
    args = vllm["args"]
    assert str(data["tensor_parallel_size"]) == args[args.index("--tensor-parallel-size") + 1] == "4"
    assert str(data["max_num_seqs"]) == args[args.index("--max-num-seqs") + 1] == "256"
    probe = vllm["startupProbe"]
    config = load_stack_file(stack_file_path("prod"))[1]
    plan = planning.model_plan(config, config.models[0])
    assert data["startup_budget_seconds"] == probe["failureThreshold"] * probe["periodSeconds"] == (
        plan.startup_budget_seconds)
    # The CPU KV tier the plan prints is the one vLLM gets.
    tier = planning.kv_offload_gib(config, config.models[0])
    assert data["dynamics"]["kv_offload"]["size_gib"] == tier
    assert args[args.index("--kv-offloading-size") + 1] == str(tier)
    assert data["storage_read_mib_per_second"] == 500.0
    assert data["cost"] == {
        "usd_per_replica_hour": 27.52, "usd_per_node_hour": 55.04,
        "price_source": "On-Demand, us-east-1, 2026-07-20, llm_serving/gpu/prices.json",
        "stack_nodes_at_min_replicas": 2, "stack_nodes_at_max_replicas": 2,
        "stack_usd_per_hour_at_min": 110.08, "stack_usd_per_hour_at_max": 110.08,
        "stack_price_note": "On-Demand, us-east-1, 2026-07-20",
        # The compile cache's producer during an `up`: 4 replicas x TP4 at peak + a surge + the producer.
        "stack_nodes_producing_compile_cache": 3, "compile_cache_producers": 1,
    }
    # The catalog form with the same settings gives the same memory plan.
    _, catalog, _ = _run([*PROD, "--gpu-memory-utilization", "0.92", "--max-num-seqs", "256", "--json"])
    assert json.loads(catalog)["kv_cache_tokens"] == data["kv_cache_tokens"] == 445_568


def test_stack_plan_prints_the_timing_rules_with_the_numbers_the_render_carries(rendered) -> None:
    code, out, err = _run(["--stack", "prod", "--model", "llama-70b"])
    assert (code, err) == (0, "")
    table = out.split("timing (stream bound, drains, awaits):\n", 1)[1].splitlines()
    rows = {" ".join(line.split()[:-1]): line.split()[-1] for line in table}
    assert rows["llama-70b: vLLM --shutdown-timeout 1,805 s >= stream bound 1,805 s"] == "ok"
    assert rows["edge: NLB deregistration delay 1,805 s >= longest stream bound 1,805 s"] == "ok"
    assert rows["llama-70b: picker queue wait 2 s < Envoy stream idle timeout 300 s"] == "ok"
    grace = rendered["prod"].manifest("Deployment", "llama-70b")["spec"]["template"]["spec"][
        "terminationGracePeriodSeconds"]
    assert rows[f"node update: drain barrier before the old group's deletion {grace:,} s >= longest vLLM "
                f"terminationGracePeriodSeconds {grace:,} s"] == "ok"
    assert set(rows.values()) == {"ok"} and len(rows) == 17
    picker = rendered["prod"].manifest("ConfigMap", "llama-70b-epp")["data"]["config.yaml"]
    assert "  defaultRequestTTL: 2s\n" in picker
    # The same numbers as the render: the vLLM pods' shutdown timeout, the Envoy drain, the rollout await.
    (vllm,) = rendered["prod"].manifest("Deployment", "llama-70b")["spec"]["template"]["spec"]["containers"]
    assert vllm["args"][vllm["args"].index("--shutdown-timeout") + 1] == "1805"
    envoy = rendered["prod"].manifest("EnvoyProxy", "llm-serving-proxy")["spec"]
    assert envoy["shutdown"]["drainTimeout"] == "1805s"
    wiring = rendered["prod"].wiring["kubernetes:apps/v1:Deployment::llama-70b-deployment"]
    config = load_stack_file(stack_file_path("prod"))[1]
    model = config.models[0]
    awaited, planned = timing.rollout_await_seconds(config, model), timing.planned_rollout_seconds(config, model)
    assert timing.rollout_steps(config, model)[0] == 4
    assert f"llama-70b: Pulumi rollout await {awaited:,} s >= planned rollout (4 steps) {planned:,} s" in rows
    assert wiring["customTimeouts"]["update"] == f"{awaited}s"
    # The barrier's preStop holds (while its Deployment is being deleted) as long as the vLLM pod's grace period.
    (barrier,) = [r for r in rendered["prod"].resources if r["name"].startswith("node-drain-barrier-")
                  and r["type"] == "kubernetes:apps/v1:Deployment"]
    (container,) = barrier["inputs"]["spec"]["template"]["spec"]["containers"]
    assert container["lifecycle"]["preStop"]["exec"]["command"][3] == str(grace)
    data = json.loads(_run(["--stack", "prod", "--model", "llama-70b", "--json"])[1])
    assert data["timing"][1] == {"rule": "llama-70b: vLLM --shutdown-timeout",
                                 "numbers": "1,805 s >= stream bound 1,805 s", "holds": True}


def test_engine_options_change_the_plan_as_vllm_would() -> None:
    def kv(*extra: str) -> int:
        return json.loads(_run([*PROD, "--json", *extra])[1])["kv_cache_tokens"]
    # Fewer sequences: a smaller sampler warm-up, so more KV.
    assert kv("--max-num-seqs", "256") > kv("--max-num-seqs", "1024")
    # fp8 online quantization halves the Linear weights in memory (embeddings and lm_head stay 16-bit),
    # leaving much more for KV at the same TP; `auto` then settles on TP2.
    fp8 = json.loads(_run([*PROD, "--json", "--quantization", "fp8", "--tp", "4"])[1])
    assert fp8["weights_gib_per_gpu"] == 16.92
    assert kv("--quantization", "fp8", "--tp", "4") > kv("--tp", "4") * 1.4
    assert json.loads(_run([*PROD, "--json", "--quantization", "fp8"])[1])["tensor_parallel_size"] == 2
    # KV is counted in whole blocks.
    assert kv("--block-size", "32") % 32 == 0


def test_without_a_stack_the_gpu_and_context_are_required() -> None:
    code, _, err = _run(["--model", "meta-llama/Llama-3.1-70B-Instruct"])
    assert (code, err) == (2, "plan rejected: --gpu and --max-model-len are required without --stack\n")
    code, _, err = _run(["--stack", "prod", "--model", "llama-7b"])
    assert code == 2 and err.startswith(
        "python -m stacks plan: argument --model: unknown model of stack prod 'llama-7b' (did you mean \"llama-70b\"?)")


def test_enforce_eager_and_speculative_config_are_plan_options() -> None:
    eager = json.loads(_run([*PROD, "--tp", "4", "--enforce-eager", "--json"])[1])
    # EFS Elastic (the CLI default, 500 MiB/s): 510 s with graph capture, 450 s without.
    assert (eager["kv_cache_tokens"], eager["cold_start_seconds"]) == (465_232, 450)
    code, out, _ = _run([*PROD, "--tp", "4", "--speculative-config", '{"method": "eagle3"}'])
    assert code == 0 and "note: speculative decoding: the draft model's weights" in out


def test_stack_plan_follows_engine_flags_passed_through_extra_args() -> None:
    from llm_serving.stack.planning import extra_arg_knobs
    assert extra_arg_knobs(["--enforce-eager", "--block-size=32", '--speculative-config={"method":"ngram"}']) == {
        "enforce_eager": True, "block_size": 32, "speculative_decoding": True,
    }
    # Flags the planner has no use for change nothing; a value on a switch is not the switch.
    assert extra_arg_knobs(["--disable-log-requests", "--enforce-eager=false"]) == {}


def test_a_model_larger_than_a_node_is_planned_across_nodes_on_request() -> None:
    base = ["--model", "meta-llama/Llama-3.1-405B-Instruct", "--gpu", "p5.48xlarge", "--max-model-len", "16384"]
    code, _, err = _run(base)
    assert code == 2 and err.endswith("or more nodes per replica (--max-nodes-per-replica)\n")
    code, out, _ = _run([*base, "--max-nodes-per-replica", "4"])
    assert code == 0
    assert "tensor parallel size        8 x pipeline 2 (16 GPUs per replica on 2 nodes)\n" in out
    assert "price per replica           $110.08/hour" in out
    data = json.loads(_run([*base, "--pp", "2", "--tp", "8", "--json"])[1])
    assert (data["pipeline_parallel_size"], data["nodes_per_replica"], data["kv_cache_tokens"]) == (2, 2, 652_480)
    assert data["performance"] == {"note": "the roofline models single-node replicas; pipeline stages are not modelled"}


def test_pipeline_stages_without_efa_are_warned_with_the_bytes_each_boundary_carries() -> None:
    from llm_serving.serving import lookup_model

    model = lookup_model("meta-llama/Llama-3.1-70B-Instruct")
    assert model is not None
    data = json.loads(_run(["--model", model.model_id, "--gpu", "g6e.xlarge", "--max-model-len", "8192",
                            "--max-nodes-per-replica", "4", "--json"])[1])
    per_token = model.hidden_size * 2  # bf16 activations
    (note,) = [n for n in data["notes"] if "has no EFA" in n]
    boundaries = data["pipeline_parallel_size"] - 1
    assert f"the {boundaries} stage boundaries carry every token's hidden state ({per_token:,} bytes) over TCP" in note
    assert f"{per_token * 8192 / 1e6:,.0f} MB per boundary for one 8,192-token prefill" in note
    # EFA nodes carry the same stages without the warning.
    efa = json.loads(_run(["--model", "meta-llama/Llama-3.1-405B-Instruct", "--gpu", "p5.48xlarge", "--max-model-len",
                           "16384", "--max-nodes-per-replica", "4", "--json"])[1])
    assert efa["pipeline_parallel_size"] > 1 and not [n for n in efa["notes"] if "EFA" in n]
