"""A CPU tier of the KV cache: sized by the planner in prod and staging (none in dev), passed to vLLM with the
pinned flags, held in the pod's /dev/shm within its memory limit, counted in the start-up clock, refused when it
does not fit, and watched by two alerts."""

from __future__ import annotations

import io
import json

from llm_serving import serving
from llm_serving.stack import planning, rules
from stacks.cli import plan as plan_cli
from stacks.config.files import stack_file_path
from stacks.environment import load_stack_file
from tests.support import reference
from tests.support.components import committed_args


def stack(name: str):
    config = load_stack_file(stack_file_path(name))[1]
    return config, config.models[0]


def vllm_pod(result, model: str) -> dict:
    return result.manifest("Deployment", model)["spec"]["template"]["spec"]


def test_prod_holds_the_planners_tier_in_shm_within_its_memory_limit(rendered):
    config, model = stack("prod")
    memory = planning.host_memory(config, model)
    assert memory.tier_gib == planning.kv_offload_gib(config, model) > 0
    pod = vllm_pod(rendered["prod"], model.name)
    (container,) = pod["containers"]
    args = container["args"]
    assert args[args.index("--kv-offloading-size") + 1] == str(memory.tier_gib)
    assert args[args.index("--kv-offloading-backend") + 1] == "native"
    assert reference.vllm_flag_errors(args) == []
    # vLLM keeps the tier in /dev/shm: the emptyDir grows by it, and the whole pod stays within its limit.
    (shm,) = [v for v in pod["volumes"] if v["name"] == "shm"]
    assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": f"{memory.shm_gib}Gi"}
    assert container["resources"]["limits"]["memory"] == f"{memory.pod_gib}Gi"
    assert memory.transport_gib + memory.engine_gib + memory.streamer_gib + memory.tier_gib <= memory.pod_gib
    # The planner's tier leaves as much spare as it takes.
    assert memory.spare_gib >= memory.tier_gib


def test_dev_has_no_tier_unless_asked(rendered):
    config, model = stack("dev")
    assert planning.kv_offload_gib(config, model) == 0
    args = vllm_pod(rendered["dev"], model.name)["containers"][0]["args"]
    assert "--kv-offloading-size" not in args
    asked = committed_args("dev", models=[{"name": model.name, "kvOffload": {"sizeGib": 64}}])
    assert planning.kv_offload_gib(asked, asked.models[0]) == 64


def test_the_tier_holds_tokens_at_the_gpu_caches_bytes_per_token_and_lengthens_the_start():
    config, model = stack("prod")
    plan = planning.model_plan(config, model)
    tier = planning.kv_offload_gib(config, model)
    tokens = planning.cpu_kv_tokens(config, model)
    per_token = plan.kv_bytes_per_token_per_gpu * plan.tensor_parallel_size
    assert tokens % 16 == 0 and tokens * per_token <= tier * 1024**3 < (tokens + 16) * per_token
    assert tokens > plan.kv_cache_tokens  # the point of it: more prefixes than the GPUs hold
    off = committed_args("prod", models=[{"name": model.name, "kvOffload": {"sizeGib": 0}}])
    without = planning.model_plan(off, off.models[0])
    # vLLM fills the tier before it serves: every start takes longer by that, and the probe allows for it.
    assert plan.engine_init_seconds - without.engine_init_seconds == serving.offload_init_seconds(tier)
    assert plan.cold_start_seconds > without.cold_start_seconds
    assert plan.startup_budget_seconds >= without.startup_budget_seconds


def lines(args) -> list[str]:
    return [p.line() for p in rules.check(args)]


def test_a_tier_that_does_not_fit_the_pod_is_refused_with_the_figures():
    config, model = stack("prod")
    free = planning.host_memory(config, model, tier_gib=0).free_gib
    big = committed_args("prod", models=[{"name": model.name, "kvOffload": {"sizeGib": free + 1}}])
    memory = planning.host_memory(big, big.models[0])
    assert (f"llm-serving:models[{model.name}].kvOffload.sizeGib: the tier does not fit the pod's {memory.pod_gib} GiB "
            f"memory limit beside the engine ({memory.engine_gib} GiB), /dev/shm's transport ({memory.transport_gib} "
            f"GiB) and the S3 streamer (0 GiB): vLLM fills it at start and is OOM-killed (got {free + 1}; expected <= "
            f"{free})") in lines(big)
    fits = committed_args("prod", models=[{"name": model.name, "kvOffload": {"sizeGib": free}}])
    assert not [line for line in lines(fits) if "kvOffload" in line]


def test_a_second_kv_connector_is_refused():
    config, model = stack("prod")
    both = committed_args("prod", models=[{"name": model.name, "extraArgs": [
        '--kv-transfer-config={"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}']}])
    assert [line for line in lines(both) if line.startswith(f"llm-serving:models[{model.name}].extraArgs: a CPU KV "
                                                            "tier is vLLM's own KV connector")]


def test_prod_watches_the_tiers_hits_and_the_pods_memory(rendered):
    alerts = {stack_name: {r["alert"] for m in rendered[stack_name].manifests if m["kind"] == "PrometheusRule"
                           for g in m["spec"]["groups"] for r in g["rules"] if "alert" in r}
              for stack_name in ("prod", "dev")}
    assert {"VllmKvOffloadNotHit", "VllmPodMemoryNearLimit"} <= alerts["prod"]
    assert not {"VllmKvOffloadNotHit", "VllmPodMemoryNearLimit"} & alerts["dev"]


def test_plan_shows_both_caches_and_where_the_pods_memory_goes():
    out, err = io.StringIO(), io.StringIO()
    assert plan_cli.main(["--stack", "prod", "--model", "llama-70b", "--json"], out, err) == 0
    tier = json.loads(out.getvalue())["dynamics"]["kv_offload"]
    config, model = stack("prod")
    memory = planning.host_memory(config, model)
    assert tier["size_gib"] == memory.tier_gib and tier["cpu_kv_tokens"] == planning.cpu_kv_tokens(config, model)
    assert tier["gpu_kv_tokens"] == planning.model_plan(config, model).kv_cache_tokens
    assert tier["spare_gib"] == memory.spare_gib and tier["pod_memory_gib"] == memory.pod_gib
    assert tier["conversations_of_max_model_len"] == tier["cpu_kv_tokens"] // model.max_model_len
    assert tier["node_memory_gib_used"] == memory.pod_gib * tier["pods_per_node"]
