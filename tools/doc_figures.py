"""The generated figures of README.md and docs/: block name -> the text between its markers
(tools/docs.py splices them; docs/testing.md, "Figures, key paths and commands in the docs").

Each reads the code that decides the figure: the planner (`plan --json`), the render of the stack
that deploys it, the stack files, the workflows. Prose around a figure stays in the page; a table whose
every value is computed (the request path's timeouts, cold start per backend) is generated whole.

Length: one small function per block, each beside the render or plan fields it reads, and GENERATORS naming them
all; split by page, a figure two pages quote would need two homes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import yaml

from llm_serving.stack import timing as stack_timing
from stacks.config.files import PROJECT_DIR, stack_file_path
from tools import alert_figures, planner_tables, promote_figures, storage_figures, workflow_figures
from tools.doc_facts import PROD, Facts

WORKFLOWS = PROJECT_DIR / ".github" / "workflows"
MULTI_NODE_EXAMPLE = PROJECT_DIR / "examples" / "Pulumi.prod-405b.yaml"
MULTI_MODEL_EXAMPLE = PROJECT_DIR / "examples" / "Pulumi.multi-model.yaml"
# The plan whose pipeline-parallel split capacity-planner.md describes.
PIPELINE_PLAN = ("--model", "meta-llama/Llama-3.1-405B-Instruct", "--gpu", "p5.48xlarge", "--max-model-len", "16384",
                 "--max-nodes-per-replica", "4")
# How close a test count is quoted ("about 1,350 tests"): one more test must not make a page stale.
TEST_COUNT_STEP = 50


def _seconds(value: str | int) -> int:
    return int(str(value).removesuffix("s"))


def _minutes(seconds: float) -> str:
    return f"{round(seconds / 60):,} minutes"


def suite_size(facts: Facts) -> str:
    return f"about {round(facts.test_count / TEST_COUNT_STEP) * TEST_COUNT_STEP:,} tests"


def prod_startup_budget(facts: Facts) -> str:
    probe = _vllm_container(facts)["startupProbe"]
    return f"{probe['failureThreshold']} × {probe['periodSeconds']} s"


def prod_scale_down_window(facts: Facts) -> str:
    scaled = facts.manifest(PROD, "ScaledObject", facts.prod_model.name)
    behavior = scaled["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    return f"{behavior['scaleDown']['stabilizationWindowSeconds']:,} s"


def prod_replica_add_terms(facts: Facts) -> str:
    """The terms the default scale-down window adds up (stacks/checks/planning.replica_add_seconds)."""
    group = facts.prod.gpu_node_group
    cold = facts.stack_plan()["dynamics"]["replica_add_cold_start_seconds"]
    ready = facts.manifest(PROD, "Deployment", facts.prod_model.name)["spec"]["minReadySeconds"]
    total = group.node_ready_seconds + group.image_pull_seconds + cold + ready
    return (f"{group.node_ready_seconds} s node + {group.image_pull_seconds} s image pull + "
            f"{cold} s cold start (torch.compile from the shared cache) + {ready} s `minReadySeconds` = {total:,} s")


def prod_warm_start(facts: Facts) -> str:
    """Adding one of prod's replicas on a new node and on a warm one, term by term (plan --stack prod)."""
    d = facts.stack_plan()["dynamics"]
    plan = facts.stack_plan()
    cold, hit = plan["cold_start_seconds"], plan["cold_start_cached_seconds"]
    ready = d["replica_add_seconds_running_node"] - d["image_pull_seconds_running_node"] - hit
    rows = [
        ("a GPU node joins and advertises its GPUs", d["node_seconds"], 0),
        ("the vLLM image is pulled (the pre-pull pod races it on a new node)", d["image_pull_seconds_new_node"],
         d["image_pull_seconds_running_node"]),
        (f"weights, engine start and graph capture; torch.compile {d['compile_cached_seconds']} s from the shared "
         f"cache instead of {d['compile_seconds']} s (a key change compiles: {cold} s)", hit, hit),
        ("ready for `minReadySeconds`", ready, ready),
    ]
    lines = ["| step | new node | warm node |", "|---|---|---|"]
    lines += [f"| {step} | {new:,} s | {warm:,} s |" for step, new, warm in rows]
    lines.append(f"| **serving after** | **{_minutes(d['replica_add_seconds_new_node'])}** "
                 f"({d['replica_add_seconds_new_node']:,} s) | **{_minutes(d['replica_add_seconds_running_node'])}** "
                 f"({d['replica_add_seconds_running_node']:,} s) |")
    return "\n".join(lines)


def prod_cold_start(facts: Facts) -> str:
    return f"{facts.stack_plan()['cold_start_seconds']:,} s"



def prod_read_speed(facts: Facts) -> str:
    return f"{facts.stack_plan()['storage_read_mib_per_second']:,.0f} MiB/s"


def prod_weights_gb(facts: Facts) -> str:
    from llm_serving.stack import planning

    architecture = planning.model_architecture(facts.prod_model)
    assert architecture is not None  # prod serves a catalog model
    return f"{architecture.weight_bytes / 1e9:.0f} GB"




def prod_node_update(facts: Facts) -> str:
    dynamics = facts.stack_plan()["dynamics"]
    return f"about {_minutes(dynamics['node_update_seconds'])}, {dynamics['node_update_extra_nodes']} extra nodes"


def prod_node_update_timeline(facts: Facts) -> str:
    rows = [f"| {at} | {what} |" for at, what in stack_timing.node_update_timeline(facts.prod)]
    return "\n".join(["", "| time | what happens |", "|---|---|", *rows, ""])


def prod_405b_rollout_timeline(facts: Facts) -> str:
    config = facts.config(PROJECT_DIR / "examples" / "Pulumi.prod-405b.yaml")
    rows = [f"| {at} | {what} |" for at, what in stack_timing.group_rollout_timeline(config, config.models[0])]
    return "\n".join(["", "| time | what happens |", "|---|---|", *rows, ""])


def prod_longest_await(facts: Facts) -> str:
    from stacks.offline import awaits

    seconds, _ = awaits.longest_await(facts.render(stack_file_path(PROD).resolve()).resources)
    return _minutes(seconds)


def prod_edge_await(facts: Facts) -> str:
    """How long `pulumi up` waits for prod's Gateway, each route and each Envoy Gateway policy (one figure: they
    share it)."""
    from stacks.offline import awaits

    resources = facts.render(stack_file_path(PROD).resolve()).resources
    kinds = ("Gateway", "HTTPRoute", "SecurityPolicy", "ClientTrafficPolicy", "BackendTrafficPolicy")
    edge = [r for r in resources if r["type"].rsplit(":", 1)[-1] in kinds]
    (seconds,) = {awaits.await_seconds(r) for r in edge}
    return _minutes(seconds)


def deploy_timeout(facts: Facts) -> str:
    """The `pulumi up` job's timeout (tests/test_workflows.py holds it above every stack's await chain)."""
    workflow = yaml.safe_load((WORKFLOWS / "pulumi-up.yml").read_text())
    return _minutes(max(job.get("timeout-minutes", 0) for job in workflow["jobs"].values()) * 60)


def prod_cost_per_million(facts: Facts) -> str:
    plan = facts.stack_plan()
    perf, cost = plan["performance"], plan["cost"]
    return (f"${cost['usd_per_replica_hour']:.2f} per hour at {perf['output_tokens_per_second']:,} output tokens/s "
            f"is ${perf['usd_per_million_output_tokens']:.2f}")


def prod_max_replicas_fit(facts: Facts) -> str:
    """The most replicas of prod's model its node group can hold, as the preview's packing check says."""
    from llm_serving import serving
    from llm_serving.stack import planning

    config, model = facts.prod, facts.prod_model
    most = 0
    for high in range(1, 257):
        scaled = replace(model, autoscaling=replace(model.autoscaling, max_replicas=high))
        try:
            planning.rollout_strategies(replace(config, models=[scaled]))
        except serving.RolloutError:
            break
        most = high
    group = config.gpu_node_group
    plan = facts.stack_plan()
    return (f"Prod ({group.instance_type}, {plan['gpus_per_node']} GPUs, `maxNodes: {group.scaling.max_nodes}`, "
            f"TP {plan['tensor_parallel_size']}) holds up to {most} replicas of `{model.name}`")


def vcpu_quotas(facts: Facts) -> str:
    from llm_serving.stack import planning

    parts = []
    for stack in ("prod", "staging", "dev"):
        config = facts.config(stack_file_path(stack))
        instance = planning.resolve_instance_type(config)
        assert instance is not None  # the committed stacks name catalog instance types
        nodes = config.gpu_node_group.scaling.max_nodes
        parts.append(f"{stack} {instance.vcpus * nodes:,} ({nodes} x {instance.name} at {instance.vcpus} vCPUs)")
    return "; ".join(parts)


def prod_claim_size(facts: Facts) -> str:
    from llm_serving import serving
    from llm_serving.stack import planning

    architecture = planning.model_architecture(facts.prod_model)
    assert architecture is not None  # prod serves a catalog model
    return f"{serving.weights_volume_gib(architecture.weight_bytes)} GiB"


def pipeline_split(facts: Facts) -> str:
    plan = facts.plan(*PIPELINE_PLAN)
    return (f"TP {plan['tensor_parallel_size']} x PP {plan['pipeline_parallel_size']} on "
            f"{plan['nodes_per_replica']} {plan['gpu']}, {plan['weights_gib_per_gpu']:.2f} GiB of weights and "
            f"{plan['kv_cache_tokens']:,} KV tokens per GPU")


def calibration_within(facts: Facts) -> str:
    from llm_serving import serving

    rows = planner_tables.checkable_logs()
    within = 0
    for row in rows:
        try:
            planned = planner_tables.plan_logged_boot(row).available_kv_gib_per_gpu
        except serving.CapacityError:
            continue
        within += (row["available_kv_gib"] - planned) / row["available_kv_gib"] <= 0.05
    return f"{within} of the {len(rows)} rows are within 5 %"


def calibration_logs(facts: Facts) -> str:
    return f"{len(planner_tables.startup_logs())} public startup logs"


def calibration_checked_logs(facts: Facts) -> str:
    return f"{len(planner_tables.checkable_logs())} public startup logs"


def prod_drain(facts: Facts) -> str:
    """How long a stopping vLLM pod of prod's may take, from its render."""
    pod = facts.manifest(PROD, "Deployment", facts.prod_model.name)["spec"]["template"]["spec"]
    vllm = pod["containers"][0]
    pre_stop = vllm["lifecycle"]["preStop"]["exec"]["command"][-1]
    shutdown = int(_flag(vllm["args"], "--shutdown-timeout"))
    margin = pod["terminationGracePeriodSeconds"] - int(pre_stop) - shutdown
    return (f"{pod['terminationGracePeriodSeconds']} s to stop (preStop {pre_stop} s + `--shutdown-timeout` "
            f"{shutdown} s + {margin} s)")


def prod_vllm_settings(facts: Facts) -> str:
    """components.md's table of prod's vLLM workload settings, each value read from prod's render."""
    name = facts.prod_model.name
    deployment = facts.manifest(PROD, "Deployment", name)["spec"]
    pod = deployment["template"]["spec"]
    vllm = pod["containers"][0]
    start, ready, live = vllm["startupProbe"], vllm["readinessProbe"], vllm["livenessProbe"]
    pre_stop = vllm["lifecycle"]["preStop"]["exec"]["command"]
    shutdown = int(_flag(vllm["args"], "--shutdown-timeout"))
    grace = pod["terminationGracePeriodSeconds"]
    surge = deployment["strategy"].get("rollingUpdate", {})
    timeouts = facts.render(stack_file_path(PROD).resolve()).wiring[
        f"kubernetes:apps/v1:Deployment::{name}-deployment"]["customTimeouts"]
    budget = start["failureThreshold"] * start["periodSeconds"]
    rows = [
        ("tensor parallel size",
         f"`{facts.prod_model.tensor_parallel_size or 'auto'}` → {_flag(vllm['args'], '--tensor-parallel-size')}",
         "the planner's smallest TP that leaves KV room for `targetConcurrency` requests"),
        ("startup probe", f"`{start['httpGet']['path']}`, every {start['periodSeconds']} s, up to the planner's budget "
         f"({start['failureThreshold']} × {start['periodSeconds']} s = {budget:,} s on EFS)",
         "2 × (weights at the volume's read speed + engine start + graph capture); a slow load is not a crash"),
        ("readiness probe", f"`{ready['httpGet']['path']}`, every {ready['periodSeconds']} s, "
         f"{ready['failureThreshold']} failures",
         "the server listens only after weights, KV profiling and graph capture, so ready means warm"),
        ("liveness probe", f"`{live['httpGet']['path']}`, every {live['periodSeconds']} s, {live['timeoutSeconds']} s "
         f"timeout, {live['failureThreshold']} failures ({live['periodSeconds'] * live['failureThreshold']} s)",
         "an engine at full load answers slowly; killing it turns a spike into an outage"),
        ("`--shutdown-timeout`", f"{shutdown:,} s",
         "the stream bound: every stream the edge admits ends inside the drain (vLLM's default 0 aborts them all)"),
        ("preStop", f"`{' '.join(pre_stop)}`", "the pod keeps serving until endpoint removal has reached every proxy"),
        ("`terminationGracePeriodSeconds`", f"{grace:,}",
         f"preStop + shutdown timeout + {grace - shutdown - int(pre_stop[-1])} s, so SIGKILL never cuts the drain"),
        ("rolling update", f"`maxSurge: {surge.get('maxSurge', 0)}`, `maxUnavailable: "
         f"{surge.get('maxUnavailable', 0)}`, `minReadySeconds: {deployment['minReadySeconds']}`",
         "capacity never drops during a rollout"),
        ("Pulumi await", f"Deployment: {_seconds(timeouts['update']):,} s",
         "`pulumi up` ends only when the replicas are ready: the planned rollout's steps, each within the "
         "progress deadline"),
    ]
    return "\n".join(["", "| setting | value (prod) | why |", "|---|---|---|",
                      *(f"| {a} | {b} | {c} |" for a, b, c in rows), ""])


def prod_engine_start(facts: Facts) -> str:
    """Prod's cold start past the weights, term by term as `plan --stack prod` adds it up."""
    plan = facts.stack_plan()
    terms = plan["dynamics"]["cold_start"]["free_node"]
    return (f"{terms['engine_init_seconds']:,} s of engine start and graph capture, plus torch.compile: "
            f"{plan['compile_seconds']:,} s on a cold cache, {plan['compile_cached_seconds']:,} s from the shared one")


def prod_picker_drain(facts: Facts) -> str:
    """The picker's drain and grace period in prod's render: the stream bound, and the time it then takes to exit."""
    pod = facts.manifest(PROD, "Deployment", f"{facts.prod_model.name}-epp")["spec"]["template"]["spec"]
    drain = _seconds(_flag(pod["containers"][0]["args"], "--drain-timeout"))
    return f"`--drain-timeout` {drain:,} s, grace period {pod['terminationGracePeriodSeconds']:,} s"


def prod_picker_readiness(facts: Facts) -> str:
    picker = facts.manifest(PROD, "Deployment", f"{facts.prod_model.name}-epp")["spec"]["template"]["spec"]
    return f"every {picker['containers'][0]['readinessProbe']['periodSeconds']} s"


def upstream_idle(facts: Facts) -> str:
    from llm_serving.edge import UPSTREAM_CONNECTION_IDLE_SECONDS

    return f"{UPSTREAM_CONNECTION_IDLE_SECONDS} s"


def body_router_resources(facts: Facts) -> str:
    from llm_serving.edge import BY_MODEL_SIDECAR_RESOURCES as resources

    requests, limits = resources["requests"], resources["limits"]
    return (f"requests {requests['cpu']} CPU and {requests['memory']} memory, a {limits['memory']} memory limit and "
            "no CPU limit (a throttled router would stall every stream it parses)")


def policy_liveness(facts: Facts) -> str:
    from policies import rules

    return (f"liveness timeout ≥ {rules.MIN_LIVENESS_TIMEOUT_SECONDS} s and window ≥ "
            f"{rules.MIN_LIVENESS_WINDOW_SECONDS} s; startup budget ≥ {rules.MIN_STARTUP_BUDGET_SECONDS} s")


def policy_stream_timeout(facts: Facts) -> str:
    from policies import rules

    return f"{rules.MIN_STREAM_TIMEOUT_SECONDS} s"


def rotation_table(facts: Facts) -> str:
    """How long a rotated-out API key keeps working on not-yet-rolled pods: each stack's full rollout."""
    from llm_serving.stack import planning

    rows = ["", "| stack | model | replicas (max) | old key accepted by not-yet-rolled pods for at most |",
            "|---|---|---|---|"]
    for stack in ("dev", "staging", "prod"):
        config = facts.config(stack_file_path(stack))
        rows += [f"| {stack} | {m.name} | {planning.replica_bounds(m)[1]} | "
                 f"{planning.full_rollout_seconds(config, m):,} s |" for m in config.models]
    return "\n".join([*rows, ""])


def multi_node_example_cost(facts: Facts) -> str:
    from llm_serving.stack import planning

    config = facts.config(MULTI_NODE_EXAMPLE)
    total = planning.stack_cost(config)
    assert total.usd_per_hour is not None  # the catalog prices the example's instance type
    plan = planning.model_plan(config, config.models[0])
    per_replica = total.usd_per_hour * plan.nodes_per_replica
    return (f"${per_replica:,.2f} an hour per replica, ${total.at(total.nodes_at_min):,.2f} for its "
            f"{total.nodes_at_min} nodes")


def multi_model_lora_kv(facts: Facts) -> str:
    """The example's model with adapters: its LoRA buffers and KV room per GPU, and the room without them."""
    (model,) = [m for m in facts.config(MULTI_MODEL_EXAMPLE).models if m.lora is not None]
    plan = facts.plan("--stack", str(MULTI_MODEL_EXAMPLE), "--model", model.name)
    without = plan["dynamics"]["lora"]["kv_gib_per_gpu_without_lora"]
    return (f"{model.name}'s {model.lora.max_loras} adapter slots at rank {model.lora.max_lora_rank} take "
            f"{plan['lora_gib_per_gpu']:.2f} GiB per GPU: {plan['available_kv_gib_per_gpu']:.2f} GiB of KV cache "
            f"({plan['kv_cache_tokens']:,} tokens) where the same model without adapters has {without:.2f} GiB")


def _vllm_container(facts: Facts) -> dict[str, Any]:
    deployment = facts.manifest(PROD, "Deployment", facts.prod_model.name)
    return deployment["spec"]["template"]["spec"]["containers"][0]


def _flag(args: list[str], name: str) -> str:
    for index, arg in enumerate(args):
        if arg == name:
            return args[index + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    raise KeyError(name)


def nlb_idle(facts: Facts) -> str:
    from llm_serving.edge import NLB_TCP_IDLE_SECONDS

    return f"{NLB_TCP_IDLE_SECONDS} s"


def prod_stream_idle(facts: Facts) -> str:
    client = facts.manifest(PROD, "ClientTrafficPolicy", "llm-serving")["spec"]
    return f"{_seconds(client['timeout']['http']['streamIdleTimeout'])} s"


def prod_overload(facts: Facts) -> str:  # from prod's rendered picker config and route policy
    picker = yaml.safe_load(facts.manifest(PROD, "ConfigMap", "llama-70b-epp")["data"]["config.yaml"])
    detector = next(p["parameters"] for p in picker["plugins"] if p["type"] == "utilization-detector")
    flow = picker["flowControl"]
    override = facts.manifest(PROD, "BackendTrafficPolicy", "llama-70b")["spec"]["responseOverride"][0]
    return (f"queue wait {flow['defaultRequestTTL']}, full at {detector['queueDepthThreshold']} waiting per replica "
            f"or KV usage {detector['kvCacheUtilThreshold']}, {flow['defaultNegativePriorityBand']['maxRequests']} "
            f"sheddable requests held per picker, `Retry-After: {override['response']['header']['set'][0]['value']}`")


def prod_buffer_limit(facts: Facts) -> str:
    limit = facts.manifest(PROD, "ClientTrafficPolicy", "llm-serving")["spec"]["connection"]["bufferLimit"]
    return limit.replace("Mi", " MiB")


def prod_proxy_drain(facts: Facts) -> str:
    proxy = facts.manifest(PROD, "EnvoyProxy", "llm-serving-proxy")["spec"]
    return f"{_seconds(proxy['shutdown']['drainTimeout'])} s"


def helm_timeout(facts: Facts) -> str:
    """The timeout every Helm release of prod's render waits (one figure; an outlier fails here)."""
    releases = [r for r in facts.render(stack_file_path(PROD).resolve()).resources
                if r["type"] == "kubernetes:helm.sh/v3:Release"]
    (timeout,) = {release["inputs"]["timeout"] for release in releases}
    return f"{timeout} s"


def prod_timeouts(facts: Facts) -> str:
    """request-path.md's table of every timeout on prod's path, each value read from prod's render."""
    from llm_serving.edge import NLB_TCP_IDLE_SECONDS
    from llm_serving.stack import planning

    name = facts.prod_model.name
    client = facts.manifest(PROD, "ClientTrafficPolicy", "llm-serving")["spec"]
    backend = facts.manifest(PROD, "BackendTrafficPolicy", name)["spec"]
    route = facts.manifest(PROD, "HTTPRoute", name)["spec"]
    proxy = facts.manifest(PROD, "EnvoyProxy", "llm-serving-proxy")["spec"]
    deployment = facts.manifest(PROD, "Deployment", name)["spec"]
    pod = deployment["template"]["spec"]
    vllm = pod["containers"][0]
    ready, live, start = vllm["readinessProbe"], vllm["livenessProbe"], vllm["startupProbe"]
    pre_stop = vllm["lifecycle"]["preStop"]["exec"]["command"][-1]
    shutdown = _flag(vllm["args"], "--shutdown-timeout")
    annotations = proxy["provider"]["kubernetes"]["envoyService"]["annotations"]
    deregistration = annotations["service.beta.kubernetes.io/aws-load-balancer-target-group-attributes"]
    rows = [
        ("NLB", "TCP idle timeout (AWS, fixed)", f"{NLB_TCP_IDLE_SECONDS} s",
         "the NLB drops a flow silent that long, so every idle timeout behind it is shorter"),
        ("Envoy, client side", "`streamIdleTimeout`", f"{_seconds(client['timeout']['http']['streamIdleTimeout'])} s",
         "ends a stream from a hung engine before the NLB silently drops it"),
        ("Envoy, route", "`timeouts.request` and BackendTrafficPolicy `requestTimeout`",
         f"`{route['rules'][0]['timeouts']['request']}` (none)", "the 15 s default would cut every longer generation"),
        ("Envoy, upstream", "`connectionIdleTimeout`",
         f"{_seconds(backend['timeout']['http']['connectionIdleTimeout'])} s",
         "uvicorn closes idle keep-alives after 5 s; reusing a closed socket fails a POST"),
        ("Envoy, upstream", "retries", str(backend["retry"]["numRetries"]),
         "a retried POST re-runs a whole generation"),
    ]
    if planning.routing_mode(facts.prod, facts.prod_model).value == "inferencePool":
        picker = facts.manifest(PROD, "Deployment", f"{name}-epp")["spec"]["template"]["spec"]
        picker_ready = picker["containers"][0]["readinessProbe"]
        drain = _seconds(_flag(picker["containers"][0]["args"], "--drain-timeout"))
        rows += [
            # Not ours to set: Envoy AI Gateway v1.1.0 fixes its ext_proc filter's message_timeout at
            # 300 s (read in its source; request-path.md's routing table has the same row).
            ("endpoint picker", "ext_proc filter `message_timeout` (Envoy AI Gateway, fixed)", "300 s",
             "bounds each wait for the picker's answer to one message, not the stream (read from the source)"),
            ("endpoint picker", f"readiness gRPC every {picker_ready['periodSeconds']} s, "
             f"{picker_ready['failureThreshold']} failures", "",
             "a draining or unsynced picker leaves the headless Service's DNS, so Envoy stops choosing it"),
            ("endpoint picker", "`--drain-timeout`; `terminationGracePeriodSeconds`",
             f"{drain:,} s; {picker['terminationGracePeriodSeconds']:,} s",
             "the longest stream the route allows, so a picker rollout never cuts the streams passing through it"),
        ]
    rows += [
        ("vLLM pod", f"startup `/health` every {start['periodSeconds']} s, {start['failureThreshold']} failures",
         f"{start['periodSeconds'] * start['failureThreshold']:,} s",
         "twice the planned cold start: a slow weights read is not a crash"),
        ("vLLM pod", f"readiness `/health` every {ready['periodSeconds']} s, {ready['failureThreshold']} failures", "",
         "the server listens only after weights, KV profiling and graph capture: ready means warm"),
        ("vLLM pod", f"liveness `/health` every {live['periodSeconds']} s, {live['timeoutSeconds']} s timeout, "
         f"{live['failureThreshold']} failures", f"{live['periodSeconds'] * live['failureThreshold']} s",
         "a busy engine answers slowly; killing it turns a spike into an outage"),
        ("vLLM pod", "`preStop` sleep", f"{pre_stop} s",
         "the pod keeps serving until endpoint removal reaches every proxy"),
        ("vLLM pod", "`--shutdown-timeout`", f"{shutdown} s",
         "in-flight requests finish on SIGTERM (vLLM's default 0 aborts them)"),
        ("vLLM pod", "`terminationGracePeriodSeconds`", f"{pod['terminationGracePeriodSeconds']} s",
         "preStop + shutdown timeout + 30 s, so SIGKILL never cuts the drain"),
        ("Envoy and NLB", "`shutdown.drainTimeout`, deregistration delay",
         f"{_seconds(proxy['shutdown']['drainTimeout'])} s; {deregistration.split('=')[1]} s",
         "a proxy or target going away lets its open streams finish"),
    ]
    lines = ["", "| stage | setting | value | why this value |", "|---|---|---|---|"]
    lines += [f"| {stage} | {setting} | {value} | {why} |" for stage, setting, value, why in rows]
    return "\n".join([*lines, ""])


GENERATORS: dict[str, Callable[[Facts], str]] = {
    "test-count": suite_size,
    "prod-startup-budget": prod_startup_budget,
    "prod-scale-down-window": prod_scale_down_window,
    "prod-replica-add-terms": prod_replica_add_terms,
    "prod-warm-start": prod_warm_start,
    "prod-cold-start": prod_cold_start,
    "prod-read-speed": prod_read_speed,
    "prod-weights-gb": prod_weights_gb,
    "prod-node-update": prod_node_update,
    "prod-node-update-timeline": prod_node_update_timeline,
    "prod-405b-rollout-timeline": prod_405b_rollout_timeline,
    "prod-drain-barrier": lambda facts: f"{stack_timing.node_drain_wait_seconds(facts.prod):,} s",
    "prod-longest-await": prod_longest_await,
    "prod-edge-await": prod_edge_await,
    "deploy-timeout": deploy_timeout,
    "prod-cost-per-million": prod_cost_per_million,
    "prod-max-replicas-fit": prod_max_replicas_fit,
    "prod-claim-size": prod_claim_size,
    "vcpu-quotas": vcpu_quotas,
    "pipeline-split": pipeline_split,
    "calibration-within": calibration_within,
    "multi-node-example-cost": multi_node_example_cost,
    "multi-model-lora-kv": multi_model_lora_kv,
    "calibration-logs": calibration_logs,
    "calibration-checked-logs": calibration_checked_logs,
    "prod-drain": prod_drain,
    "prod-vllm-settings": prod_vllm_settings,
    "prod-picker-readiness": prod_picker_readiness,
    "prod-picker-drain": prod_picker_drain,
    "prod-engine-start": prod_engine_start,
    "upstream-idle": upstream_idle,
    "body-router-resources": body_router_resources,
    "policy-liveness": policy_liveness,
    "policy-stream-timeout": policy_stream_timeout,
    "rotation-table": rotation_table,
    "prod-timeouts": prod_timeouts,
    "helm-timeout": helm_timeout,
    "nlb-idle": nlb_idle,
    "prod-stream-idle": prod_stream_idle,
    "prod-buffer-limit": prod_buffer_limit,
    "prod-overload": prod_overload,
    "prod-proxy-drain": prod_proxy_drain,
    **alert_figures.GENERATORS,
    **storage_figures.GENERATORS,
    **workflow_figures.GENERATORS,
    **promote_figures.GENERATORS,
}
