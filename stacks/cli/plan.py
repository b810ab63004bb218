"""`python -m stacks plan`: size one vLLM replica of a catalog model on a catalog GPU instance type.
Prints tensor-parallel size, KV-cache tokens, concurrency, the startup-probe budget, dynamics and
cost as a table or JSON; an impossible plan is one line on stderr and exit code 2, never a traceback.
With `--stack <stack> --model <name>` it prints exactly the plan that stack deploys for that model.

Length: one command's argument parsing, its two modes (catalog and stack) and the table and JSON
forms of the same four parts (memory plan, dynamics, cost, latency) read best together.
"""

from __future__ import annotations

import argparse
import difflib
import json
import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from llm_serving import serving, storage
from llm_serving.gpu import instance_price, known_instance_type_names, lookup_instance_type
from llm_serving.serving import (
    DEFAULT_MAX_NUM_SEQS,
    CapacityError,
    CapacityPlan,
    known_model_ids,
    lookup_model,
)
from llm_serving.stack import planning, revisions
from stacks.cli import calibration, model_config
from stacks.cli.arguments import non_negative, positive
from stacks.config import overrides
from stacks.config.problems import CommandLineParser, ConfigError, Problem

EXIT_OK = 0
EXIT_REJECTED = 1  # the plan was computed, and it cannot be deployed as asked
EXIT_USAGE = 2  # argparse's own code for bad arguments; a rejected plan is the same kind of answer


_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30}


def _token_count(value: str) -> int:
    """An integer, or a binary multiple: 32K = 32,768 (decimals allowed). The lower-case form is refused: vLLM
    reads 32k as 32,000 (its human-readable counts, decimal lower case and binary upper case), which is rarely what
    is meant by a 32k context, and one spelling must not mean two lengths."""
    text = value.strip()
    if text[-1:] in ("k", "m", "g"):
        digits = text[:-1]
        raise argparse.ArgumentTypeError(
            f"{value!r} is ambiguous (vLLM reads it as {digits} x 1000, most people mean {digits} x 1024): write "
            f"{digits}{text[-1].upper()} for the binary multiple or the whole number of tokens")
    scale = _BINARY.get(text[-1:])
    try:
        number = float(text[:-1]) * scale if scale else int(text)
        whole = int(number)
    except (ValueError, OverflowError):
        raise argparse.ArgumentTypeError(f"expected a token count such as 16384 or 16K, got {value!r}") from None
    if number != whole:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number of tokens")
    return whole


def _tensor_parallel(value: str) -> int | str:
    if value == "auto":
        return value
    return positive(value)


def _positive_float(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {value!r}") from None
    if not math.isfinite(number) or number <= 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {value!r}")
    return number


def _fraction(value: str) -> float:
    number = _positive_float(value)
    if number > 1:
        raise argparse.ArgumentTypeError(f"expected a fraction in (0, 1], got {value!r}")
    return number


def _positive_tokens(value: str) -> int:
    number = _token_count(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"expected at least one token, got {value!r}")
    return number


def _block_size(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number not in serving.VLLM_BLOCK_SIZES:
        raise argparse.ArgumentTypeError(
            f"expected one of vLLM's block sizes {', '.join(map(str, serving.VLLM_BLOCK_SIZES))}, got {value!r}")
    return number


def _json_object(value: str) -> str:
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as error:
        raise argparse.ArgumentTypeError(f"not valid JSON ({error.msg} at column {error.colno}): {value!r}") from None
    if not isinstance(parsed, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object such as '{{\"method\": \"ngram\"}}', got {value!r}")
    return value


def _model_config_source(value: str) -> str:
    if not value.strip():
        raise argparse.ArgumentTypeError("expected a config.json, a directory holding one, or 'hub'")
    return value


_REVISION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$")


def _revision(value: str) -> str:
    """A branch, tag or commit as the Hub resolves it, checked before it goes into a URL."""
    if not _REVISION.match(value) or ".." in value:
        raise argparse.ArgumentTypeError(f"expected a branch, tag or commit such as main or 0e9e39f, got {value!r}")
    return value


def _parser() -> CommandLineParser:
    parser = CommandLineParser(
        prog="python -m stacks plan",
        description=(
            "Plan one vLLM replica: tensor-parallel size, KV-cache tokens, concurrency at "
            "--max-model-len and the startup-probe budget. Memory model: llm_serving/serving/capacity.py."
        ),
    )
    parser.add_argument("--model",
                        help="Hugging Face id from the model catalog; with --stack, the model's name in that stack.")
    parser.add_argument("--list-models", action="store_true", help="List the catalog's models and exit.")
    parser.add_argument("--list-gpus", action="store_true", help="List the catalog's GPU instance types and exit.")
    parser.add_argument("--stack", help="Plan a model exactly as this stack deploys it (its file's settings).")
    parser.add_argument("--model-config", metavar="SOURCE", type=_model_config_source,
                        help="Plan a model the catalog lacks from its config.json: a file, a directory holding one "
                             "(and model.safetensors.index.json or the .safetensors files), or 'hub' for --model's "
                             "files on the Hugging Face Hub (HF_TOKEN for a gated model). Prints the stack file's "
                             "models[].architecture block.")
    parser.add_argument("--revision", default="main", type=_revision,
                        help="With --model-config hub: the revision (default main).")
    parser.add_argument("--hf-token-file", help="With --model-config hub: a file holding the Hub token "
                        "(default: the HF_TOKEN environment variable).")
    parser.add_argument("--gpu", help="EC2 instance type from the GPU catalog, e.g. p5.48xlarge.")
    parser.add_argument(
        "--max-model-len",
        type=_positive_tokens,
        help="Tokens per request (prompt + output); 16384 or 16K (16,384); 16k is refused as ambiguous.",
    )
    parser.add_argument(
        "--tp",
        "--tensor-parallel-size",
        dest="tp",
        type=_tensor_parallel,
        default="auto",
        help="GPUs per replica (1, 2, 4, 8) or 'auto' for the smallest that fits (default).",
    )
    parser.add_argument(
        "--pp",
        "--pipeline-parallel-size",
        dest="pp",
        type=_tensor_parallel,
        default="auto",
        help="Pipeline stages, one whole node each, or 'auto' (default): 1, or with --max-nodes-per-replica > 1 "
        "the fewest nodes for a model that fits no single node.",
    )
    parser.add_argument(
        "--max-nodes-per-replica",
        type=positive,
        default=None,
        help="Most nodes one replica may span (default: --pp if given, else 1).",
    )
    parser.add_argument(
        "--gpu-memory-utilization",
        type=_fraction,
        default=serving.DEFAULT_GPU_MEMORY_UTILIZATION,
        help=f"Fraction of each GPU vLLM may use (default {serving.DEFAULT_GPU_MEMORY_UTILIZATION}).",
    )
    parser.add_argument(
        "--kv-cache-dtype",
        default="auto",
        choices=("auto", *serving.KV_CACHE_DTYPE_BYTES),
        help=f"auto (model dtype) or one of {', '.join(serving.KV_CACHE_DTYPE_BYTES)}.",
    )
    parser.add_argument(
        "--max-num-batched-tokens",
        type=_positive_tokens,
        default=serving.DEFAULT_MAX_NUM_BATCHED_TOKENS,
        help=f"Tokens per engine step; drives the activation estimate "
        f"(default {serving.DEFAULT_MAX_NUM_BATCHED_TOKENS}).",
    )
    # The stack's default, not vLLM's (1024 on >= 70 GiB GPUs): a bare plan and a stack model with the
    # same settings must plan the same concurrency (issue 21 found 289 against 256).
    parser.add_argument("--max-num-seqs", type=positive, default=DEFAULT_MAX_NUM_SEQS,
                        help=f"`--max-num-seqs` (default {DEFAULT_MAX_NUM_SEQS}, what a stack sets: "
                        "models[].maxNumSeqs; vLLM's own default is 1024 on >= 70 GiB GPUs other than A100).")
    parser.add_argument("--block-size", type=_block_size, default=serving.DEFAULT_BLOCK_SIZE,
                        help=f"KV cache block size in tokens: {', '.join(map(str, serving.VLLM_BLOCK_SIZES))} "
                        f"(default {serving.DEFAULT_BLOCK_SIZE}).")
    parser.add_argument("--quantization", default=None, choices=serving.VLLM_QUANTIZATION_METHODS, metavar="METHOD",
                        help="`--quantization`, one of vLLM's methods; fp8 on a 16-bit checkpoint halves the Linear "
                        "weights in memory.")
    parser.add_argument("--enforce-eager", action="store_true",
                        help="`--enforce-eager`: no CUDA graphs, so no graph memory or capture time.")
    parser.add_argument("--speculative-config", default=None, metavar="JSON", type=_json_object,
                        help="`--speculative-config`: accepted so a deployed setting can be planned; the "
                        "draft's memory is not modelled (the plan says so).")
    parser.add_argument(
        "--available-kv-gib",
        type=_positive_float,
        default=None,
        help="Use vLLM's logged 'Available KV cache memory' instead of the estimate (needs --tp N).",
    )
    parser.add_argument(
        "--target-concurrency",
        type=positive,
        default=1,
        help="Full-length requests the KV cache must hold at once (default 1).",
    )
    parser.add_argument(
        "--storage-read-mib-per-second",
        type=_positive_float,
        default=storage.EFS_READ_MIB_PER_SECOND,
        help="Read throughput of the weights volume in MiB/s per pod (default "
        f"{storage.EFS_READ_MIB_PER_SECOND:g}: EFS Elastic, the default backend; see docs/capacity-planner.md).",
    )
    dynamics = parser.add_argument_group(
        "dynamics", "How long capacity takes to change (defaults and sources: docs/capacity-planner.md#dynamics)."
    )
    dynamics.add_argument("--replicas", type=positive, default=1, help="Replicas running (default 1).")
    dynamics.add_argument("--max-replicas", type=positive, default=None,
                          help="Most replicas (default --replicas).")
    dynamics.add_argument("--nodes", type=positive, default=None,
                          help="GPU nodes running (default: the fewest that hold --replicas).")
    dynamics.add_argument("--max-nodes", type=positive, default=None,
                          help="Most GPU nodes the autoscaler may run (default --nodes + 1).")
    dynamics.add_argument("--node-ready-seconds", type=non_negative, default=serving.DEFAULT_NODE_READY_SECONDS,
                          help=f"A new GPU node until its GPUs are allocatable "
                          f"(default {serving.DEFAULT_NODE_READY_SECONDS}).")
    dynamics.add_argument("--image-pull-seconds", type=non_negative, default=serving.DEFAULT_IMAGE_PULL_SECONDS,
                          help=f"Pulling the vLLM image onto a node (default {serving.DEFAULT_IMAGE_PULL_SECONDS}).")
    dynamics.add_argument("--image-pre-pull", choices=("daemonSet", "off"), default="daemonSet",
                          help="daemonSet (a stack's default): a running node already holds the image; off: every "
                          "replica pulls.")
    dynamics.add_argument("--compile-cache", choices=("shared", "off"), default="off",
                          help="shared: a replica added while the model serves loads the compile cache instead of "
                          "compiling; off (default without --stack, which does not know the storage).")
    load = parser.add_argument_group(
        "latency and cost", "A roofline estimate (docs/capacity-planner.md#latency-and-throughput)."
    )
    load.add_argument("--prompt-tokens", type=positive, default=1024,
                      help="Prompt length for TTFT and KV (default 1024).")
    load.add_argument("--output-tokens", type=positive, default=256,
                      help="Output length per request (default 256).")
    load.add_argument("--ttft-slo-ms", type=_positive_float, default=2000.0,
                      help="Time-to-first-token objective in ms (default 2000, the config's slo.ttftP95Seconds).")
    load.add_argument("--itl-slo-ms", type=_positive_float, default=100.0,
                      help="Inter-token latency objective in ms (default 100, the config's slo.itlP95Seconds).")
    load.add_argument("--concurrency", type=positive, default=None,
                      help="Also print the roofline at N concurrent requests per replica, to compare with a benchmark.")
    parser.add_argument("--calibration", type=Path, default=None, metavar="RESULTS.json",
                        help="A measured run (`python -m stacks verify --json`, or the verification Job's log): "
                        "its figures beside this plan, with the correction measured / planned.")
    parser.add_argument("--json", action="store_true", help="Print the plan as JSON.")
    return parser


def performance(result: CapacityPlan, model: serving.ModelArchitecture, product_label: str,
                args: argparse.Namespace, cost: dict[str, object]) -> dict[str, object]:
    """ITL, throughput and TTFT at the SLO-bound concurrency, and the cost per million output tokens."""
    gpu = serving.GPU_PERFORMANCE.get(product_label)
    if result.pipeline_parallel_size > 1:
        return {"note": "the roofline models single-node replicas; pipeline stages are not modelled"}
    if gpu is None:
        return {"note": f"no memory-bandwidth and FLOPs figures for {product_label}"}
    per_request = args.prompt_tokens + args.output_tokens
    fits = min(result.max_num_seqs, result.kv_cache_tokens // max(1, per_request))
    concurrency = serving.slo_concurrency(model, gpu, result.tensor_parallel_size, args.itl_slo_ms / 1000,
                                          args.prompt_tokens, args.output_tokens, fits, result.kv_cache_dtype,
                                          args.ttft_slo_ms / 1000, result.max_num_batched_tokens)
    found: dict[str, object] = {"slo_concurrency": concurrency, "itl_slo_ms": args.itl_slo_ms,
                                "ttft_slo_ms": args.ttft_slo_ms,
                                "prompt_tokens": args.prompt_tokens, "output_tokens": args.output_tokens}
    if concurrency == 0:
        return {**found, "note": "even one request misses the latency objectives"}
    at = serving.latency(model, gpu, result.tensor_parallel_size, concurrency, args.prompt_tokens,
                         args.output_tokens, result.kv_cache_dtype, result.max_num_batched_tokens)
    unqueued = serving.latency(model, gpu, result.tensor_parallel_size, 1, args.prompt_tokens,
                               args.output_tokens, result.kv_cache_dtype, result.max_num_batched_tokens)
    found.update({"itl_ms": round(at.itl_seconds * 1000, 1), "tpot_ms": round(at.tpot_seconds * 1000, 1),
                  "ttft_ms": round(at.ttft_seconds * 1000), "ttft_alone_ms": round(unqueued.ttft_seconds * 1000),
                  "output_tokens_per_second": round(at.output_tokens_per_second)})
    price = cost.get("usd_per_replica_hour")
    if isinstance(price, float | int):
        found["usd_per_million_output_tokens"] = serving.usd_per_million_output_tokens(
            float(price), at.output_tokens_per_second)
    return found


def measured(perf: dict[str, object], result: CapacityPlan, model: serving.ModelArchitecture, product_label: str,
             args: argparse.Namespace, replicas: int) -> dict[str, object]:
    """`perf` with the roofline at --concurrency and a --calibration run beside the plan."""
    extended = dict(perf)
    if args.concurrency is not None:
        at = calibration.roofline_at(result, model, product_label, args.concurrency, args.prompt_tokens,
                                     args.output_tokens)
        extended["at_concurrency"] = at if at is not None else {"note": "no roofline for this plan"}
    if args.calibration is not None:
        extended["calibration"] = calibration.corrections(
            result, model, product_label, calibration.read_results(args.calibration), replicas)
    return extended


def _performance_rows(found: dict[str, object]) -> list[tuple[str, str]]:
    if "itl_ms" not in found:
        return [("latency", str(found.get("note"))), *calibration.table_rows(found)]
    rows = [
        ("at the SLOs", f"{found['slo_concurrency']} requests: {found['tpot_ms']} ms per output token "
                        f"<= {found['itl_slo_ms']:g} ms (decode step {found['itl_ms']} ms), "
                        f"{found['output_tokens_per_second']:,} output tokens/s"),
        ("TTFT before queueing", f"{found['ttft_ms']} ms at that load <= {found['ttft_slo_ms']:g} ms "
                                 f"({found['ttft_alone_ms']} ms alone) for {found['prompt_tokens']:,} prompt tokens"),
    ]
    if "usd_per_million_output_tokens" in found:
        rows.append(("cost per 1M output tokens", f"${found['usd_per_million_output_tokens']:.2f} at that load"))
    return rows + calibration.table_rows(found)


def _minutes(seconds: int) -> str:
    return f"{seconds / 60:.0f} min ({seconds:,} s)"


@dataclass(frozen=True)
class StackRollout:
    """`plan --stack`: the model among the stack's others, as the render plans its rollout (planning.footprint,
    planning.rollout_strategies), so the plan never shows a strategy the stack does not deploy."""

    name: str
    footprints: list[serving.Footprint]  # every model of the stack, the planned one among them
    strategies: dict[str, serving.Strategy]
    crowded_out: str | None  # why the others make this model's rollout slower than alone (None: they do not)


def dynamics(result: CapacityPlan, args: argparse.Namespace, stack: StackRollout | None = None) -> dict[str, object]:
    """Scale-up time, rollout and node-update dynamics for `--replicas` of this plan (pure); with `stack`, among
    the stack's other models and with the strategy the stack deploys."""
    if result.pipeline_parallel_size > 1:
        return {}  # the rollout planner packs single-node replicas only (multi-node groups: issue #16)
    low = args.replicas
    high = args.max_replicas if args.max_replicas is not None else low
    shared_cache = args.compile_cache == "shared"
    model = serving.Footprint("model", result.tensor_parallel_size, low, high, result.cold_start_seconds,
                              cached_cold_start_seconds=result.cold_start_cached_seconds if shared_cache else None)
    models = [model]
    if stack is not None:
        model = next(f for f in stack.footprints if f.name == stack.name)
        models = stack.footprints
    nodes = args.nodes if args.nodes is not None else max(1, -(-low // result.replicas_per_node))
    max_nodes = args.max_nodes if args.max_nodes is not None else nodes + 1
    timing = serving.Timing(args.node_ready_seconds, args.image_pull_seconds,
                            image_prepulled=args.image_pre_pull == "daemonSet")
    supply = serving.Supply(result.gpus_per_node, max_nodes, result.gpu, autoscaled=True)
    needs_node = serving.rollout_needs_node(models, model, result.gpus_per_node, nodes)
    found: dict[str, object] = {
        "replica_add_seconds": serving.replica_add_seconds(model, timing, needs_node=needs_node),
        "replica_add_needs_node": needs_node,
        **cold_start_breakdown(result, timing, model, args),
    }
    if stack is not None:
        strategies = stack.strategies
        if stack.crowded_out:
            found["rollout_crowded_out"] = stack.crowded_out
    else:
        try:
            strategies = serving.choose_strategies(models, supply, "prod")
        except serving.RolloutError as error:
            found["rollout"] = f"rejected: {error}"
            return found
    strategy = strategies[model.name]
    update = serving.node_update(models, {m.name: strategies[m.name] for m in models}, supply, nodes, timing,
                                 drain_wait_seconds=args.drain_wait_seconds)
    found.update({
        "rollout": strategy.manifest(),
        "rollout_needs_node": needs_node,
        "rollout_seconds": serving.rollout_seconds(model, strategy, low, timing, needs_node=needs_node),
        "node_update_seconds": update.seconds,
        "node_update_extra_nodes": update.extra_nodes_at_peak,
    })
    return found


def _terms(cold: serving.ColdStart) -> dict[str, int]:
    """`--json`: each term as `<term>_seconds`, and their total."""
    return {f"{label.replace(' ', '_')}_seconds": value for label, value in cold.terms()} | {
        "total_seconds": cold.total_seconds}


def _cold_start_rows(breakdown: dict[str, Any]) -> list[tuple[str, str]]:
    """`plan --stack`: each term of adding a replica, on a free and a new node."""
    def line(terms: dict[str, int]) -> str:
        parts = " + ".join(f"{key.removesuffix('_seconds').replace('_', ' ')} {value:,} s"
                           for key, value in terms.items() if key != "total_seconds")
        return f"{_minutes(terms['total_seconds'])}: {parts}"
    return [("add a replica, free node", line(breakdown["free_node"])),
            ("add a replica, new node", line(breakdown["new_node"]))]


def cold_start_breakdown(result: CapacityPlan, timing: serving.Timing, model: serving.Footprint,
                         args: argparse.Namespace) -> dict[str, object]:
    """What adding a replica waits for, term by term, on a running node and on a new one (pure)."""
    cold = model.scale_up_cold_start_seconds
    return {
        "node_seconds": timing.node_ready_seconds,
        "image_pull_seconds_running_node": serving.image_pull_term(timing, new_node=False),
        "image_pull_seconds_new_node": serving.image_pull_term(timing, new_node=True),
        "image_pre_pull": args.image_pre_pull,
        "compile_cache": args.compile_cache,
        "compile_cache_reason": getattr(args, "compile_cache_reason", args.compile_cache),
        "compile_seconds": result.compile_seconds,
        "compile_cached_seconds": result.compile_cached_seconds,
        "compile_seconds_saved_per_replica": result.cold_start_seconds - result.cold_start_cached_seconds,
        "replica_add_seconds_running_node": serving.replica_add_seconds(model, timing, needs_node=False),
        "replica_add_seconds_new_node": serving.replica_add_seconds(model, timing, needs_node=True),
        "replica_add_cold_start_seconds": cold,
    }


def _breakdown_rows(found: dict[str, object]) -> list[tuple[str, str]]:
    prepulled = found["image_pre_pull"] == "daemonSet"
    shared = found["compile_cache"] == "shared"
    saved = int(found["compile_seconds_saved_per_replica"])  # type: ignore[call-overload]
    compile_text = (f"{found['compile_seconds']} s cold; {found['compile_cached_seconds']} s from the shared cache"
                    + (f", {saved} s saved per replica" if shared
                       else f" (cache {found['compile_cache_reason']}; a hit would save {saved} s per replica)"))
    return [
        ("image pull", f"{found['image_pull_seconds_running_node']} s on a running node"
                       + (" (pre-pulled)" if prepulled else "") + f", {found['image_pull_seconds_new_node']} s "
                       "on a new node"),
        ("torch.compile", compile_text),
        ("add a replica", f"{_minutes(int(found['replica_add_seconds_running_node']))} on a running node with room, "  # type: ignore[call-overload]
                          f"{_minutes(int(found['replica_add_seconds_new_node']))} with a new node"),  # type: ignore[call-overload]
    ]


# (`found` holds dynamics()'s figures typed as object: the ignores below take them as the ints and dict they are.)
def _dynamics_rows(found: dict[str, object]) -> list[tuple[str, str]]:
    node = " (needs a new node)" if found["replica_add_needs_node"] else " (fits on a running node)"
    rows = [("add one replica", _minutes(int(found["replica_add_seconds"])) + node)]  # type: ignore[call-overload]
    breakdown = _breakdown_rows(found)
    if isinstance(found.get("cold_start"), dict):
        # A stack's plan: the image and compile rows, then adding a replica term by term (its own rows).
        rows += breakdown[:2] + _cold_start_rows(found["cold_start"])  # type: ignore[arg-type]
    else:
        rows += breakdown
    tier = found.get("kv_offload")
    if isinstance(tier, dict):
        rows += [
            ("CPU KV tier", f"{tier['size_gib']:,} GiB per replica: {tier['cpu_kv_tokens']:,} tokens beside the GPUs' "
                            f"{tier['gpu_kv_tokens']:,} ({tier['conversations_of_max_model_len']:,} contexts of "
                            "max-model-len whose prefixes it keeps)"),
            ("host memory per pod", f"{tier['pod_memory_gib']:,} GiB: engine {tier['engine_gib']} + transport "
                                    f"{tier['transport_gib']} + S3 streamer {tier['streamer_gib']} + "
                                    + (f"LoRA adapters {tier['lora_gib']} + " if tier.get("lora_gib") else "")
                                    + "tier "
                                    f"{tier['size_gib']:,} + spare {tier['spare_gib']:,}"),
            ("host memory per node", f"{tier['pods_per_node']} pod(s): {tier['node_memory_gib_used']:,} GiB"),
        ]
    adapters = found.get("lora")
    if isinstance(adapters, dict):
        rows += [("LoRA adapters", f"{', '.join(adapters['adapters'])}"
                  + (f" (aliases {', '.join(adapters['aliases'])})" if adapters["aliases"] else "")
                  + f": {adapters['max_loras']} per batch at rank <= {adapters['max_lora_rank']}"),
                 ("LoRA host memory per pod", f"{adapters['host_gib_per_pod']:,} GiB pinned for "
                  f"{adapters['max_cpu_loras']} adapter(s) of the pod's {adapters['pod_memory_gib']:,} GiB")]
    idle = found.get("scale_to_zero")
    if isinstance(idle, dict):
        wake = idle["wake"]
        parts = " + ".join(f"{key.removesuffix('_seconds').replace('_', ' ')} {value:,} s"
                           for key, value in wake.items() if key != "total_seconds" and value)
        saved = idle["usd_saved_per_idle_hour"]
        rows += [("wake from zero", f"{_minutes(wake['total_seconds'])}: {parts}"),
                 ("idle to zero", f"after {idle['idle_seconds']:,} s without a request"
                  + (f"; saves ${saved:,.2f} per idle hour" if saved else ""))]
    rollout = found["rollout"]
    if isinstance(rollout, str):
        return [*rows, ("rollout", rollout)]
    surge = rollout.get("rollingUpdate", {})  # type: ignore[attr-defined]
    kind = (f"maxSurge {surge['maxSurge']}, maxUnavailable {surge['maxUnavailable']}" if surge else "Recreate")
    rows += [
        ("rollout", f"{kind}: {_minutes(int(found['rollout_seconds']))}"  # type: ignore[call-overload]
                    + (", surge pod needs a new node" if surge and found["rollout_needs_node"] else "")),
        *([("rollout beside the others", str(found["rollout_crowded_out"]))] if found.get("rollout_crowded_out")
          else []),
        ("node-group update", f"{_minutes(int(found['node_update_seconds']))}, "  # type: ignore[call-overload]
                              f"{found['node_update_extra_nodes']} extra node(s) while pods move"),
    ]
    return rows


def _unknown(option: str, kind: str, value: str, known: list[str]) -> str:
    close = difflib.get_close_matches(value, known, n=1, cutoff=0.6)
    hint = f' (did you mean "{close[0]}"?)' if close else ""
    return f"python -m stacks plan: argument {option}: unknown {kind} {value!r}{hint}; known: {', '.join(known)}"


def _storage_label(mib_per_second: float) -> str:
    if mib_per_second == storage.EFS_READ_MIB_PER_SECOND:
        return f"{mib_per_second:g} MiB/s (EFS Elastic, the default weights storage)"
    return f"{mib_per_second:g} MiB/s (--storage-read-mib-per-second)"


def _cost_rows(cost: dict[str, object]) -> list[tuple[str, str]]:
    if cost.get("usd_per_replica_hour") is None:
        return [("price", str(cost.get("price_source")))]
    rows = [("price per replica", f"${cost['usd_per_replica_hour']}/hour ({cost['price_source']})")]
    if "stack_usd_per_hour_at_min" in cost:
        rows.append(("stack GPU nodes", f"{cost['stack_nodes_at_min_replicas']} at min replicas: "
                                        f"${cost['stack_usd_per_hour_at_min']}/hour; "
                                        f"{cost['stack_nodes_at_max_replicas']} at max: "
                                        f"${cost['stack_usd_per_hour_at_max']}/hour"))
    if "stack_nodes_producing_compile_cache" in cost:
        count = cost["compile_cache_producers"]
        rows.append(("compile-cache producer", f"{count} Job(s), each one replica's GPUs while an `up` that changes "
                                               f"its key compiles: {cost['stack_nodes_producing_compile_cache']} "
                                               "nodes at peak with the rollouts' surge replicas"))
    return rows


def render_table(result: CapacityPlan, found: dict[str, object] | None = None,
                 cost: dict[str, object] | None = None, perf: dict[str, object] | None = None) -> str:
    """Aligned two-column text for a terminal."""
    overhead = (
        "measured by vLLM (--available-kv-gib)"
        if result.runtime_overhead_gib_per_gpu is None
        else f"{result.runtime_overhead_gib_per_gpu:.2f} GiB (estimate)"
    )
    rows = [
        ("model", result.model_id),
        ("gpu", f"{result.gpu}: {result.gpus_per_node} x {result.gpu_memory_gib:.2f} GiB"),
        (
            "tensor parallel size",
            f"{result.tensor_parallel_size} ({result.gpus_per_replica} GPU(s) per replica, "
            f"{result.replicas_per_node} replica(s) per node)"
            if result.pipeline_parallel_size == 1
            else f"{result.tensor_parallel_size} x pipeline {result.pipeline_parallel_size} "
            f"({result.gpus_per_replica} GPUs per replica on {result.nodes_per_replica} nodes)",
        ),
        ("gpu memory utilization", f"{result.gpu_memory_utilization}"),
        ("weights per GPU", f"{result.weights_gib_per_gpu:.2f} GiB"),
        ("runtime overhead per GPU", overhead),
        *([("LoRA buffers per GPU", f"{result.lora_gib_per_gpu:.2f} GiB, taken from the KV cache (without them: "
                                     f"{result.available_kv_gib_per_gpu + result.lora_gib_per_gpu:.2f} GiB)")]
          if result.lora_gib_per_gpu else []),
        ("KV cache per GPU", f"{result.available_kv_gib_per_gpu:.2f} GiB ({result.kv_cache_dtype})"),
        ("KV bytes per token per GPU", f"{result.kv_bytes_per_token_per_gpu:,}"),
        ("KV cache tokens", f"{result.kv_cache_tokens:,}"),
        ("max concurrency", f"{result.max_concurrency:.2f}x at {result.max_model_len:,} tokens per request"),
        ("weights read speed", str(found["cold_start"]["storage"])  # type: ignore[index]
         if found and isinstance(found.get("cold_start"), dict)
         else _storage_label(result.storage_read_mib_per_second)),
        ("cold start", f"{result.cold_start_seconds:,} s"),
        ("startup probe budget", f"{result.startup_budget_seconds:,} s"),
        *(_dynamics_rows(found) if found else []),
        *(_cost_rows(cost) if cost else []),
        *(_performance_rows(perf) if perf else []),
    ]
    width = max(len(label) for label, _ in rows)
    lines = [f"{label.ljust(width)}  {value}" for label, value in rows]
    lines += [f"note: {note}" for note in result.notes]
    return "\n".join(lines)


def _explicit(argv: list[str]) -> dict[str, object]:
    """The options the command line set itself (not their defaults), by destination."""
    parser = _parser()
    for action in parser._actions:  # noqa: SLF001 - argparse has no public way to suppress defaults
        action.default = argparse.SUPPRESS
    return vars(parser.parse_args(argv))


def _listing(as_json: bool, out: TextIO, models: bool) -> int:
    if models:
        rows = {mid: f"{lookup_model(mid).parameters_billion:g} B parameters" for mid in known_model_ids()}  # type: ignore[union-attr]
    else:
        rows = {}
        for name in known_instance_type_names():
            kind = lookup_instance_type(name)
            assert kind is not None
            rows[name] = f"{kind.gpu_count} x {kind.gpu.product_label} {kind.gpu.memory_gib:.1f} GiB"
    if as_json:
        print(json.dumps(rows, indent=2, sort_keys=True), file=out)
    else:
        width = max(map(len, rows))
        print("\n".join(f"{key.ljust(width)}  {value}" for key, value in rows.items()), file=out)
    return EXIT_OK


def main(argv: list[str], stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    """Run `plan` with the arguments after the subcommand; returns the process exit code."""
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    try:
        args = _parser().use_streams(out, err).parse_args(argv)
        explicit = _explicit(argv)  # argv parsed above, so this parse prints nothing
    except SystemExit as exit_:  # argparse already printed usage and the problem (or --help)
        return exit_.code if isinstance(exit_.code, int) else EXIT_USAGE

    if args.list_models or args.list_gpus:
        return _listing(args.json, out, models=args.list_models)
    if args.model is None:
        print("python -m stacks plan: --model is required (or --list-models, --list-gpus)", file=err)
        return EXIT_USAGE
    hub_only = [option for dest, option in (("revision", "--revision"), ("hf_token_file", "--hf-token-file"))
                if dest in explicit]
    if hub_only and args.model_config != model_config.HUB:
        print(f"python -m stacks plan: argument {hub_only[0]}: only with --model-config hub", file=err)
        return EXIT_USAGE
    if args.stack is not None:
        return _stack_plan(args, explicit, out, err)
    if args.gpu is None or args.max_model_len is None:
        print("plan rejected: --gpu and --max-model-len are required without --stack", file=err)
        return EXIT_USAGE
    model: serving.ModelArchitecture | None
    if args.model_config is not None:
        try:
            model = model_config.load(args.model, args.model_config, args.revision, args.hf_token_file)
        except serving.ModelConfigError as error:
            print(f"plan rejected: --model-config: {error}", file=err)
            return EXIT_USAGE
    else:
        model = lookup_model(args.model)
    if model is None:
        print(_unknown("--model", "model", args.model, known_model_ids()) + "; or plan it from its config.json with "
              "--model-config", file=err)
        return EXIT_USAGE
    instance_type = lookup_instance_type(args.gpu)
    if instance_type is None:
        print(_unknown("--gpu", "GPU instance type", args.gpu, known_instance_type_names()), file=err)
        return EXIT_USAGE
    if args.available_kv_gib is not None and args.available_kv_gib >= instance_type.gpu.memory_gib:
        print(f"python -m stacks plan: argument --available-kv-gib: {args.available_kv_gib:g} GiB of KV cache per "
              f"GPU does not fit a {instance_type.gpu.memory_gib:.2f} GiB {instance_type.gpu.product_label}; "
              "expected vLLM's logged 'Available KV cache memory' for one GPU", file=err)
        return EXIT_USAGE

    try:
        result = serving.plan(
            model,
            instance_type,
            args.max_model_len,
            tp=args.tp,
            gpu_memory_utilization=args.gpu_memory_utilization,
            kv_cache_dtype=args.kv_cache_dtype,
            max_num_batched_tokens=args.max_num_batched_tokens,
            available_kv_gib=args.available_kv_gib,
            target_concurrency=args.target_concurrency,
            storage_read_mib_per_second=args.storage_read_mib_per_second,
            max_num_seqs=args.max_num_seqs,
            block_size=args.block_size,
            quantization=args.quantization,
            enforce_eager=args.enforce_eager,
            speculative_decoding=args.speculative_config is not None,
            pp=args.pp,
            max_nodes_per_replica=args.max_nodes_per_replica,
        )
    except CapacityError as error:
        print(f"plan rejected: {error}", file=err)
        return EXIT_USAGE

    if args.max_replicas is not None and args.max_replicas < args.replicas:
        print(f"plan rejected: --replicas {args.replicas} and --max-replicas {args.max_replicas}: expected "
              "1 <= replicas <= max replicas", file=err)
        return EXIT_USAGE
    # The old group's drain barrier waits the grace period of a pod whose drain is the derived stream bound.
    stream = serving.derived_stream_seconds(args.max_model_len, args.itl_slo_ms / 1000, args.ttft_slo_ms / 1000)
    args.drain_wait_seconds = serving.model_drains("model", stream).vllm_grace_seconds
    found = dynamics(result, args)
    cost = _replica_cost(result)
    perf = performance(result, model, instance_type.gpu.product_label, args, cost)
    try:
        perf = measured(perf, result, model, instance_type.gpu.product_label, args, args.replicas)
    except calibration.CalibrationError as error:
        print(f"plan rejected: {error}", file=err)
        return EXIT_USAGE
    block = serving.architecture_block(model) if args.model_config is not None else None
    return _print(result, found, cost, perf, args.json, out, architecture=block)


def stack_cost_summary(config: object, region: str | None = None) -> str:
    """The render summary's cost block: the stack's GPU nodes and On-Demand $/hour at minimum and
    maximum replicas, and per model the $/million output tokens at its ITL objective's concurrency
    (1,024 prompt and 256 output tokens per request, as `plan` assumes by default). `region`: the stack's
    aws:region; prices of another region are said to be that region's."""

    config = revisions.expanded(config)  # type: ignore[arg-type]
    total = planning.stack_cost(config)
    low, high = total.at(total.nodes_at_min), total.at(total.nodes_at_max)
    price = instance_price(total.instance_type)
    elsewhere = (f"; this stack is in {region}, whose prices llm_serving/gpu/prices.json does not hold: these are "
                 f"{price.region}'s" if price is not None and region and price.region and region != price.region
                 else "")
    lines = ["", f"cost ({total.price_note}{elsewhere}):",
             f"  GPU nodes ({total.instance_type}): {total.nodes_at_min} at min replicas"
             + (f" ${low:,.2f}/hour" if low is not None else "")
             + f"; {total.nodes_at_max} at max" + (f" ${high:,.2f}/hour" if high is not None else "")]
    for model in config.models:
        result = planning.model_plan(config, model)
        cost = _replica_cost(result)
        found = stack_model_performance(config, model, result, cost, prompt_tokens=1024, output_tokens=256)
        if "usd_per_million_output_tokens" in found:
            lines.append(
                f"  {model.name}: ${cost['usd_per_replica_hour']}/replica-hour; "
                f"${found['usd_per_million_output_tokens']:.2f} per 1M output tokens at {found['slo_concurrency']} "
                f"requests ({found['tpot_ms']} ms per token <= {found['itl_slo_ms']:g} ms; 1,024 in / 256 out)"
            )
        else:
            hourly = (f"${cost['usd_per_replica_hour']}/replica-hour; " if cost.get("usd_per_replica_hour") is not None
                      else "")
            lines.append(f"  {model.name}: {hourly}{found.get('note') or cost.get('price_source')}")
        lines += _idle_lines(config, model)
    return "\n".join(lines) + "\n"


def _idle_lines(config: object, model: object) -> list[str]:
    """A model that scales to zero: what an idle hour saves, and how long its first request then waits."""
    if not planning.scales_to_zero(model):  # type: ignore[arg-type]
        return []
    wake = planning.wake(config, model)  # type: ignore[arg-type]
    saved = planning.idle_usd_per_hour(config, model)  # type: ignore[arg-type]
    idle = model.autoscaling.scale_to_zero  # type: ignore[attr-defined]
    terms = ", ".join(f"{name} {seconds:,} s" for name, seconds in wake.terms() if seconds)
    savings = f": saves ${saved:,.2f} per idle hour" if saved else ""
    return [f"    at zero after {idle.idle_seconds:,} s idle{savings}; the first request then waits "
            f"{wake.total_seconds:,} s to wake it ({terms})"]


def stack_model_performance(config: object, model: object, result: CapacityPlan, cost: dict[str, object], *,
                            prompt_tokens: int, output_tokens: int) -> dict[str, object]:
    """`performance` for one of a stack's models: on the stack's GPU, against the model's own SLOs."""

    architecture = planning.model_architecture(model)  # type: ignore[arg-type]
    instance = planning.resolve_instance_type(config)  # type: ignore[arg-type]
    assert architecture is not None and instance is not None  # the stack validated
    load = argparse.Namespace(
        prompt_tokens=prompt_tokens, output_tokens=output_tokens,
        itl_slo_ms=model.slo.itl_p95_seconds * 1000, ttft_slo_ms=model.slo.ttft_p95_seconds * 1000,  # type: ignore[attr-defined]
    )
    return performance(result, architecture, instance.gpu.product_label, load, cost)


def _replica_cost(result: CapacityPlan) -> dict[str, object]:
    """The On-Demand price of the GPUs one replica occupies (its share of a node)."""
    price = instance_price(result.gpu)
    if price is None or price.usd_per_hour is None:
        return {"usd_per_replica_hour": None, "price_source": price.note if price else "no price in the catalog"}
    return {"usd_per_replica_hour": planning.usd_per_replica_hour(result),
            "usd_per_node_hour": price.usd_per_hour,
            "price_source": f"On-Demand, {price.region}, {price.date}, llm_serving/gpu/prices.json"}


def _print(result: CapacityPlan, found: dict[str, object], cost: dict[str, object],
           perf: dict[str, object], as_json: bool, out: TextIO,
           overridden: dict[str, dict[str, object]] | None = None,
           timing_rows: list[tuple[str, str, str]] | None = None, architecture: dict[str, Any] | None = None) -> int:
    """The plan; with a stack, also its timing rules (llm_serving/stack/timing.py) as rule, numbers, verdict,
    and the values the command line set over the stack's."""
    if as_json:
        document = {**result.to_json(), "dynamics": found, "cost": cost, "performance": perf}
        if overridden:
            document["from_command_line"] = overridden
        if architecture is not None:
            document["architecture"] = architecture
        if timing_rows is not None:
            document["timing"] = [{"rule": rule, "numbers": numbers, "holds": verdict == "ok"}
                                  for rule, numbers, verdict in timing_rows]
        print(json.dumps(document, sort_keys=True, indent=2), file=out)
    else:
        if overridden:
            print("from the command line (over the stack's values): " + ", ".join(
                f"{key}={json.dumps(change['value'])} ({change['option']})" for key, change in overridden.items()),
                file=out)
        print(render_table(result, found, cost, perf), file=out)
        if timing_rows is not None:
            width = max(len(rule) for rule, _, _ in timing_rows)
            numbers_width = max(len(numbers) for _, numbers, _ in timing_rows)
            print("\ntiming (stream bound, drains, awaits):", file=out)
            for rule, numbers, verdict in timing_rows:
                print(f"  {rule.ljust(width)}  {numbers.ljust(numbers_width)}  {verdict}", file=out)
        if architecture is not None:
            print("\nmodels[].architecture (read from the model's config.json; paste it into the stack file):\n"
                  + "  architecture: " + json.dumps(architecture), file=out)
    # The memory plan holds but no rollout can replace a replica on the GPUs there are: not deployable.
    return EXIT_REJECTED if str(found.get("rollout", "")).startswith("rejected") else EXIT_OK


# Options a stack cannot take: each has no config key (the stack decides it another way).
_STACK_REFUSED = {
    "available_kv_gib": ("--available-kv-gib", "plan the measured figure without --stack: "
                         "--model <id> --gpu <type> --tp N --available-kv-gib X"),
    "storage_read_mib_per_second": ("--storage-read-mib-per-second", "the stack's weightsStorage decides the "
                                    "read speed; plan without --stack to try another"),
    "max_nodes_per_replica": ("--max-nodes-per-replica", "a stack sets models[].pipelineParallelSize; use --pp N"),
    "model_config": ("--model-config", "a stack's model takes its facts from models[].architecture; plan without "
                     "--stack to read a config.json"),
}


def _stack_overrides(explicit: dict[str, object], model: object) -> list[overrides.Override]:
    """Each explicit option as the config key it overrides in the stack (`models[<name>]...`)."""
    name = model.name  # type: ignore[attr-defined]
    at = f"models[{name}]"
    first = revisions.revision_model_of(model)  # type: ignore[arg-type]
    if first is not None and explicit:
        # A second revision is no item of `models`: what it runs is `models[<model>].revisions[<name>]`, and what it
        # shares (sizes, parallelism, scaling) is the model's. Name those keys, not a model that is not there.
        own = name.removeprefix(first + "-")
        raise ConfigError([Problem(f"--model {name}", "is the second revision of "
                                   f"models[{first}]; its options are that model's keys (models[{first}].*) or its "
                                   f"own (models[{first}].revisions[{own}].*)", name,
                                   f"--model {first} with the options, or those keys edited in the stack file")])
    keys = {
        "gpu": "gpuNodeGroup.instanceType", "max_model_len": f"{at}.maxModelLen",
        "tp": f"{at}.tensorParallelSize", "pp": f"{at}.pipelineParallelSize",
        "gpu_memory_utilization": f"{at}.gpuMemoryUtilization", "kv_cache_dtype": f"{at}.kvCacheDtype",
        "max_num_batched_tokens": f"{at}.maxNumBatchedTokens", "max_num_seqs": f"{at}.maxNumSeqs",
        "quantization": f"{at}.quantization", "target_concurrency": f"{at}.targetConcurrency",
        "replicas": f"{at}.replicas", "max_replicas": f"{at}.autoscaling.maxReplicas",
        "nodes": "gpuNodeGroup.scaling.desiredNodes", "max_nodes": "gpuNodeGroup.scaling.maxNodes",
        "node_ready_seconds": "gpuNodeGroup.nodeReadySeconds", "image_pull_seconds": "gpuNodeGroup.imagePullSeconds",
        "image_pre_pull": "gpuNodeGroup.imagePrePull", "compile_cache": f"{at}.compileCache",
        "ttft_slo_ms": f"{at}.slo.ttftP95Seconds", "itl_slo_ms": f"{at}.slo.itlP95Seconds",
    }
    found = []
    for dest, value in explicit.items():
        option = "--" + dest.replace("_", "-")
        if dest in keys:
            if dest in ("ttft_slo_ms", "itl_slo_ms"):
                value = float(value) / 1000  # type: ignore[arg-type]
            if dest == "pp" and value == "auto":
                raise ConfigError([Problem("--pp", "a stack sets its pipeline stages explicitly", "auto",
                                           "--pp N")])
            found.append(overrides.parse(f"{keys[dest]}={json.dumps(value)}", option))
            if dest == "replicas" and model.autoscaling.min_replicas is not None:  # type: ignore[attr-defined]
                # The plan's replica count is the low bound: with autoscaling that is minReplicas.
                found.append(overrides.parse(f"{at}.autoscaling.minReplicas={json.dumps(value)}", option))
    # Engine flags the planner follows through extraArgs: replace the stack's own, keep the rest.
    flags = {"block_size": "--block-size", "enforce_eager": "--enforce-eager",
             "speculative_config": "--speculative-config"}
    if any(dest in explicit for dest in flags):
        extra = [a for a in model.extra_args  # type: ignore[attr-defined]
                 if a.partition("=")[0] not in {flags[d] for d in flags if d in explicit}]
        for dest, flag in flags.items():
            if dest in explicit and explicit[dest] is not False:
                extra.append(flag if explicit[dest] is True else f"{flag}={explicit[dest]}")
        found.append(overrides.Override(None, (overrides.Segment("models", name), overrides.Segment("extraArgs")),
                                        extra, "--" + next(d for d in flags if d in explicit).replace("_", "-")))
    return found


def _stack_plan(args: argparse.Namespace, explicit: dict[str, object], out: TextIO, err: TextIO) -> int:
    """The plan, dynamics and cost of one model as `args.stack` deploys it, with the options the
    command line set overriding the stack's values (and said so)."""
    from llm_serving.stack import planning
    from llm_serving.stack import timing as stack_timing
    from stacks import environment
    from stacks.config import files as stack_files  # the stack layer, only in this mode

    refused = [f"python -m stacks plan: argument {option}: not a stack setting with --stack; {fix}"
               for dest, (option, fix) in _STACK_REFUSED.items() if dest in explicit]
    if refused:
        print("\n".join(refused), file=err)
        return EXIT_USAGE
    try:
        path = stack_files.find_stack_file(args.stack, option="--stack")
        # A model's second revision is planned as the model it runs as (llm_serving/stack/revisions.py).
        config = revisions.expanded(environment.load_stack_file(path)[1])
        models = {m.name: m for m in config.models} | {
            m.model_id: m for m in config.models if revisions.revision_model_of(m) is None}
        model = models.get(args.model)
        if model is None:
            names = sorted(m.name for m in config.models)
            print(_unknown("--model", f"model of stack {args.stack}", args.model, names), file=err)
            return EXIT_USAGE
        changes = _stack_overrides(explicit, model)
        if changes:
            resolved, config = environment.load_stack_file(path, changes)
            config = revisions.expanded(config)
            model = next(m for m in config.models if m.name == model.name)
    except ConfigError as error:
        for problem in error.problems:
            print(problem.line(), file=err)
        return EXIT_USAGE
    result = planning.model_plan(config, model)
    low, high = planning.replica_bounds(model)
    supply = planning.supply(config)
    timing = planning.timing(config)
    shared_cache, cache_reason = planning.compile_cache_state(config, model)
    stack_args = argparse.Namespace(
        replicas=max(1, low), max_replicas=high, nodes=planning.node_counts(config).desired_nodes,
        max_nodes=supply.nodes, node_ready_seconds=timing.node_ready_seconds,
        image_pull_seconds=timing.image_pull_seconds, drain_wait_seconds=stack_timing.node_drain_wait_seconds(config),
        image_pre_pull="daemonSet" if timing.image_prepulled else "off",
        compile_cache="shared" if shared_cache else "off", compile_cache_reason=cache_reason,
    )
    rollout = StackRollout(
        model.name, [planning.footprint(config, m, planning.model_plan(config, m)) for m in config.models],
        planning.rollout_strategies(config), planning.rollout_crowded_out(config).get(model.name))
    found = dynamics(result, stack_args, rollout)
    free, new = planning.cold_starts(config, model, result)
    if found:  # multi-node groups have no dynamics yet (dynamics())
        found["cold_start"] = {"free_node": _terms(free), "new_node": _terms(new),
                               "storage": planning.storage_backend_label(config, model)}
        memory = planning.host_memory(config, model, result)
        if memory.tier_gib:
            tokens = planning.cpu_kv_tokens(config, model)
            per_node = result.replicas_per_node or 1
            found["kv_offload"] = {
                "size_gib": memory.tier_gib, "cpu_kv_tokens": tokens, "gpu_kv_tokens": result.kv_cache_tokens,
                "conversations_of_max_model_len": tokens // model.max_model_len,
                "pod_memory_gib": memory.pod_gib, "engine_gib": memory.engine_gib,
                "transport_gib": memory.transport_gib, "streamer_gib": memory.streamer_gib,
                "spare_gib": memory.spare_gib, "pods_per_node": per_node, "node_memory_gib_used": memory.pod_gib
                * per_node, **({"lora_gib": memory.lora_gib} if memory.lora_gib else {})}
        if model.lora is not None:
            found["lora"] = {
                "adapters": [a.name for a in model.lora.adapters], "aliases": [a.name for a in model.lora.aliases],
                "max_loras": model.lora.max_loras, "max_lora_rank": model.lora.max_lora_rank,
                "max_cpu_loras": model.lora.max_cpu_loras or model.lora.max_loras,
                "gpu_gib_per_gpu": round(result.lora_gib_per_gpu, 2),
                "kv_gib_per_gpu_without_lora": round(result.available_kv_gib_per_gpu + result.lora_gib_per_gpu, 2),
                "host_gib_per_pod": memory.lora_gib, "pod_memory_gib": memory.pod_gib}
        if planning.scales_to_zero(model):
            idle = model.autoscaling.scale_to_zero
            assert idle is not None  # the rules require it at minReplicas 0
            found["scale_to_zero"] = {"wake": _terms(planning.wake(config, model)), "idle_seconds": idle.idle_seconds,
                                      "usd_saved_per_idle_hour": planning.idle_usd_per_hour(config, model)}
    cost = _replica_cost(result)
    total = planning.stack_cost(config)
    cost.update({"stack_nodes_at_min_replicas": total.nodes_at_min, "stack_nodes_at_max_replicas": total.nodes_at_max,
                 "stack_usd_per_hour_at_min": total.at(total.nodes_at_min),
                 "stack_usd_per_hour_at_max": total.at(total.nodes_at_max), "stack_price_note": total.price_note})
    if total.nodes_producing is not None:
        cost.update({"stack_nodes_producing_compile_cache": total.nodes_producing,
                     "compile_cache_producers": total.producers})
    perf = stack_model_performance(config, model, result, cost, prompt_tokens=args.prompt_tokens,
                                   output_tokens=args.output_tokens)
    architecture, instance = planning.model_architecture(model), planning.resolve_instance_type(config)
    assert architecture is not None and instance is not None  # the stack validated
    try:
        perf = measured(perf, result, architecture, instance.gpu.product_label, args, low)
    except calibration.CalibrationError as error:
        print(f"plan rejected: {error}", file=err)
        return EXIT_USAGE
    overridden = {c.key: {"option": c.option, "value": c.value} for c in changes}
    rows = serving.timing_table(stack_timing.relations(config))
    return _print(result, found, cost, perf, args.json, out, overridden, rows)
