"""What a stack's verification checks and expects, per model: its mode, the addresses it probes
(the edge and the in-cluster Service), and the load test's concurrency, lengths and planned figures
(pure). The deploy-gate Job (llm_serving/stack/stack.py) and `python -m stacks verify` both read these.

A model's second revision (`models[].revisions`, llm_serving/stack/revisions.py) has a gate of its own, aimed at it
alone: through the edge with its revision header and through its own Service, at its own planned load while its
weight is 0 (it serves no one), capped as the in-place gate is once it has a share of the route.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from llm_serving import serving
from llm_serving.edge import (
    HTTPS_LISTENER_PORT,
    OWN_GATEWAY_NAME,
    REVISION_HEADER,
    EdgeAuth,
    EdgeMode,
    EdgeRouting,
    internal_service_name,
    v1_path,
)
from llm_serving.serving import ModelArgs, RoutingMode
from llm_serving.stack import planning, revisions
from llm_serving.stack.args import ServingStackArgs
from llm_serving.verification import Alias, LoadPlan, Settings, Target, VerificationMode

# Without a roofline (multi-node groups, a GPU without figures) the ramp is this long.
DEFAULT_RAMP_SECONDS = 5.0
# The ramp spreads the first requests over one planned request's duration, so the test does not
# start with every prefill at once (a burst the plan does not model), but never over two minutes.
MAX_RAMP_SECONDS = 120.0
# Beyond its decode at the slowest allowed speed, a request may queue and prefill this long.
REQUEST_SLACK_SECONDS = 60
# The smoke checks send 8 requests per target; each is bounded by the request timeout, but a healthy
# endpoint answers them in seconds: the Job's deadline allows this much for them.
SMOKE_SECONDS = 120
# The same for each adapter and alias asked through a target: one short streamed request (probe.check_route).
ROUTE_SECONDS = 15


def verification_mode(config: ServingStackArgs) -> VerificationMode:
    """Unset: prod gates its deploys and staging, which rehearses them, does too; dev reports (a dev
    GPU is shared and often busy, so its latency says little about the deploy)."""
    if config.verification.mode is not None:
        return config.verification.mode
    return VerificationMode.GATE if config.production_like else VerificationMode.REPORT


def edge_url(config: ServingStackArgs, model: ModelArgs) -> str:
    if config.verification.edge_url:
        return config.verification.edge_url.rstrip("/")
    return public_url(config, model)


def public_url(config: ServingStackArgs, model: ModelArgs) -> str:
    """The model's OpenAI base URL through the edge (the edge terminates TLS for its host)."""
    return f"https://{planning.route_host(config, model)}{v1_path(model.route.path_prefix)}"


def service_url(config: ServingStackArgs, model: ModelArgs) -> str:
    return f"http://{model.name}.{config.serving.namespace}.svc:{serving.PORT}/v1"


def edge_connect_to(config: ServingStackArgs) -> str | None:
    """Where the Job reaches the edge in gateway mode with the stack's own Gateway: the in-cluster Service on its
    proxies (edge.internal_edge_service), so the gate does not depend on DNS that the same `up` cannot have pointed
    at the new load balancer. The public URL still names the host (TLS, Host header). None: the URL's own host (an
    existing Gateway, ALB or ingress-nginx, or a `verification.edgeUrl` the stack sets)."""
    edge = config.edge
    if edge.mode is not EdgeMode.GATEWAY or edge.gateway is not None or config.verification.edge_url:
        return None
    service = internal_service_name(OWN_GATEWAY_NAME)
    return f"{service}.{planning.edge_namespace(config)}.svc.cluster.local:{HTTPS_LISTENER_PORT}"


def edge_lists(config: ServingStackArgs, model: ModelArgs) -> tuple[str, ...]:
    """What the edge's GET /v1/models lists beside the model and its adapters (which vLLM lists): behind one base
    URL (`edge.routing: byModel`) the AI Gateway's sidecar answers it with every name of every model's rule, the
    stack's other models, adapters and aliases included (llm_serving/edge/by_model.py `model_names`, built from the
    same `served_names`); otherwise the request reaches vLLM, which lists no alias."""
    if config.edge.routing is not EdgeRouting.BY_MODEL:
        return ()
    return tuple(name for m in config.models for name in m.served_names() if name != model.name)


def revision_under_test(config: ServingStackArgs, model: ModelArgs) -> tuple[str, int] | None:
    """(name, weight) of the revision `model` runs as, when its model runs two side by side: the first revision's
    for the model itself, the second's for its RevisionModel; None for a model with one revision."""
    first = revisions.revision_model_of(model)
    owner = next(m for m in config.models if m.name == first) if first is not None else model
    if not owner.revisions:
        return None
    revision = owner.revisions[1 if first is not None else 0]
    return revision.name, revision.weight


def targets(config: ServingStackArgs, model: ModelArgs) -> tuple[Target, ...]:
    """The edge (unless it wants JWTs, which the Job does not hold) and the Service; the Service
    checks keys only when vLLM does (behind a gateway that checks them, it is open inside the fence).
    Aliases are asked through the edge only, where the model's endpoint picker rewrites them.

    A second revision: the model's edge URL with the revision's header, which its header rule sends to its own
    pool (or Service) whatever the weights (llm_serving/edge/objects.py `_revision_rules`), where it is also asked
    for by its own name `<model>-<revision>`, which the other revision refuses; and its own Service."""
    auth = config.edge.auth
    service = Target("service", service_url(config, model), check_auth=auth is EdgeAuth.VLLM_API_KEY)
    if auth is EdgeAuth.JWT:
        return (service,)
    pooled = planning.routing_mode(config, model) is RoutingMode.INFERENCE_POOL
    first = revisions.revision_model_of(model)
    routed = next(m for m in config.models if m.name == first) if first is not None else model
    revision = revision_under_test(config, model)
    # A second revision always by its header; the first at weight 0 too (the split sends it nothing), otherwise
    # through the split, the one check of the split itself.
    headers = ({REVISION_HEADER: revision[0]} if revision is not None and (first is not None or revision[1] == 0)
               else {})
    # A second revision's own served name, which only its pods answer: proof that the header reached it.
    asks = ((model.name, (routed.name,)),) if first is not None else ()
    return Target("edge", edge_url(config, routed), connect_to=edge_connect_to(config),
                  lists=edge_lists(config, routed), aliases=pooled, headers=headers, asks=asks), service


def served(model: ModelArgs) -> tuple[tuple[str, ...], tuple[Alias, ...]]:
    """The model's adapters and aliases (each with its adapters), the names `served_names` lists after its own."""
    if model.lora is None:
        return (), ()
    return (tuple(a.name for a in model.lora.adapters),
            tuple(Alias(a.name, tuple(t.adapter for t in a.targets)) for a in model.lora.aliases))


@dataclass(frozen=True)
class PlannedLoad:
    plan: LoadPlan
    note: str | None  # why no planned figures or objectives, or why the load is capped, when so


def _slo_concurrency(config: ServingStackArgs, model: ModelArgs, prompt: int,
                     output: int) -> tuple[int | None, str | None]:
    """One replica's SLO-bound concurrency as `plan` computes it (the most requests the ITL and TTFT objectives
    allow, up to what fits), or None and why there is no roofline to say."""
    plan = planning.model_plan(config, model)
    architecture = planning.model_architecture(model)
    instance = planning.resolve_instance_type(config)
    gpu = serving.GPU_PERFORMANCE.get(instance.gpu.product_label) if instance else None
    if architecture is None or gpu is None or plan.pipeline_parallel_size > 1:
        return None, "no roofline for this model (multi-node, or a GPU without figures): nothing planned to compare"
    fits = min(plan.max_num_seqs, plan.kv_cache_tokens // max(1, prompt + output))
    per_replica = serving.slo_concurrency(
        architecture, gpu, plan.tensor_parallel_size, model.slo.itl_p95_seconds, prompt, output, fits,
        plan.kv_cache_dtype, model.slo.ttft_p95_seconds, plan.max_num_batched_tokens)
    if per_replica == 0:
        return 0, "the plan says even one request misses the objectives"
    return per_replica, None


def spare_batch(config: ServingStackArgs, model: ModelArgs) -> int:
    """Requests one replica can run beyond its planned SLO-bound load: vLLM's batch (`--max-num-seqs`) minus the
    concurrency the objectives allow. The most a check may add to pods that serve users: even if the Service
    sends all of it to one pod, that pod runs no more than its batch with users at the planned load, so no user
    request waits behind the check. 0 without a roofline (nothing says what the pods can spare)."""
    settings = config.verification
    per_replica, _ = _slo_concurrency(config, model, settings.prompt_tokens, settings.output_tokens)
    if not per_replica:
        return 0
    return max(0, planning.model_plan(config, model).max_num_seqs - per_replica)


def planned_load(config: ServingStackArgs, model: ModelArgs, *, concurrency: int | None = None,
                 prompt_tokens: int | None = None, output_tokens: int | None = None,
                 duration_seconds: float | None = None, max_requests: int | None = None,
                 live: bool = False) -> PlannedLoad:
    """The load test with the roofline's TTFT, ITL, TPOT and throughput at that load; arguments override the config.

    `live`: the pods under test serve users (the deploy gate of an in-place update): the load is at most one
    replica's spare batch (`spare_batch`), whatever is asked, and its latency is reported beside the plan but not
    held to the objectives, since users' requests share the batch. Otherwise (`verify` aimed by hand): the
    SLO-bound concurrency per replica times the minimum replicas, held to the objectives."""
    settings = config.verification
    prompt = prompt_tokens or settings.prompt_tokens
    output = output_tokens or settings.output_tokens
    # A model at zero is woken by the first request: the test meets one replica.
    replicas = max(1, planning.replica_bounds(model)[0])
    objectives = {"ttft_p95_ms": model.slo.ttft_p95_seconds * 1000, "itl_p95_ms": model.slo.itl_p95_seconds * 1000}
    plan = planning.model_plan(config, model)
    architecture = planning.model_architecture(model)
    instance = planning.resolve_instance_type(config)
    gpu = serving.GPU_PERFORMANCE.get(instance.gpu.product_label) if instance else None
    planned: dict[str, float] = {}
    found, note = _slo_concurrency(config, model, prompt, output)
    per_replica = max(1, found or 0)
    chosen = concurrency or settings.concurrency or per_replica * replicas
    if live:
        spare = spare_batch(config, model)
        asked = chosen
        chosen = min(chosen, spare)
        objectives = {}
        note = (f"load on pods that serve users: at most one replica's spare batch ({spare} = --max-num-seqs "
                f"{plan.max_num_seqs} - {found or 0} at the SLOs){f', not {asked}' if asked > spare else ''}; "
                "latency reported, not held to the objectives (users share the batch)")
    if found is not None and architecture is not None and gpu is not None and chosen > 0:
        # At another concurrency than planned, the roofline at that load per replica is the comparison.
        at = serving.latency(architecture, gpu, plan.tensor_parallel_size, max(1, math.ceil(chosen / replicas)),
                             prompt, output, plan.kv_cache_dtype, plan.max_num_batched_tokens)
        planned = {"ttft_ms": round(at.ttft_seconds * 1000, 1), "itl_ms": round(at.itl_seconds * 1000, 2),
                   "tpot_ms": round(at.tpot_seconds * 1000, 2),
                   "output_tokens_per_second": round(at.output_tokens_per_second * replicas, 1)}
    ramp = (min(MAX_RAMP_SECONDS, max(1.0, output * planned["tpot_ms"] / 1000)) if planned
            else DEFAULT_RAMP_SECONDS)
    load = LoadPlan(
        concurrency=chosen, prompt_tokens=prompt, output_tokens=output,
        duration_seconds=float(duration_seconds or settings.duration_seconds), ramp_seconds=round(ramp, 1),
        max_requests=max_requests or settings.max_requests, planned=planned, objectives=objectives,
    )
    return PlannedLoad(load, note)


def request_timeout_seconds(config: ServingStackArgs, output_tokens: int) -> int:
    return math.ceil(output_tokens / config.edge.min_decode_tokens_per_second) + REQUEST_SLACK_SECONDS


def serves_users(config: ServingStackArgs, model: ModelArgs) -> bool:
    """Whether the pods the model's Job loads may serve users while it runs: yes for a model's own (an in-place
    update), and for either revision of a pair with a weight. A revision at weight 0 is reached by its header
    alone, so it serves no one: a second revision before its share, or the first after promote's convergence, whose
    rolled pods then take the full planned load before the requests move back (its Job runs after the route).
    The program cannot tell a revision this `up` adds (no pod serves yet: its route goes up after its gate) from one
    already running at the same weight, so any weight counts as serving."""
    revision = revision_under_test(config, model)
    return revision is None or revision[1] > 0


def settings(config: ServingStackArgs, model: ModelArgs) -> Settings:
    """What the model's Job checks: both addresses, then the load test through the Service. On pods that serve users
    (`serves_users`: an in-place update, or a second revision with a weight) the load is `live` (one replica's
    spare batch at most), and none when the pods have nothing to spare (the smoke checks still run). A second
    revision at weight 0: its own planned load (the planner's SLO-bound concurrency per replica times its
    replicas), held to the model's objectives."""
    live = serves_users(config, model)
    planned = planned_load(config, model, live=live)
    load = planned.plan
    wake = planning.wake(config, model).total_seconds if planning.scales_to_zero(model) else None
    adapters, aliases = served(model)
    revision = revision_under_test(config, model)
    note = planned.note
    if not live and revision is not None:
        note = (f"revision {revision[0]} at weight 0 serves no users (only its header reaches it): the full planned "
                "load, held to the objectives" + (f"; {note}" if note else ""))
    return Settings(model=revisions.revision_model_of(model) or model.name, targets=targets(config, model),
                    load=load if load.concurrency else None, load_target="service",
                    request_timeout_seconds=request_timeout_seconds(config, load.output_tokens),
                    wake_seconds=float(wake) if wake is not None else None, note=note,
                    adapters=adapters, aliases=aliases, revision=revision[0] if revision is not None else None)


def deadline_seconds(checked: Settings) -> int:
    """The Job's activeDeadlineSeconds: a wake from zero, the smoke checks, the ramp, the test, and its last
    requests."""
    load = checked.load
    test = (load.ramp_seconds + load.duration_seconds) if load else 0
    wake = (checked.wake_seconds + checked.request_timeout_seconds) if checked.wake_seconds is not None else 0
    routes = sum(len(checked.asked(target)) for target in checked.targets)
    return math.ceil(wake + SMOKE_SECONDS * len(checked.targets) + ROUTE_SECONDS * routes + test
                     + checked.request_timeout_seconds)
