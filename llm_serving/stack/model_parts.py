"""What each model of a stack is served with, derived from its intent (ModelArgs) and the stack's plan: the
pinned image, vLLM's flags, the pods' environment, the autoscaler's target and the serving alerts' objectives.

Pure: ServingStack reads these when it creates the model's weights, workload, scaling object and alerts.
"""

import dataclasses
import hashlib
import math
from typing import Any

import pulumi

from llm_serving import routing, serving
from llm_serving.edge import EdgeMode
from llm_serving.observability import ModelSlo
from llm_serving.platform import NAMESPACE_LABEL
from llm_serving.scaling import ScalingTarget
from llm_serving.serving import EngineSettings, ModelArgs, RoutingMode
from llm_serving.stack import evaluation, planning, revisions, timing, verification
from llm_serving.stack.args import ServingStackArgs
from llm_serving.stack.parts import alb_idle_timeout
from llm_serving.storage import StorageBackend

# A conservative sustained download rate from the Hugging Face Hub; the staging Job's deadline is
# twice the time the weights take at this rate, and never under 30 minutes.
HUB_DOWNLOAD_MIB_PER_SECOND = 50
MIN_DOWNLOAD_DEADLINE_SECONDS = 1800


def image(model: ModelArgs) -> str:
    """The vLLM image by tag, and by digest once the stack pins one."""
    pinned = f"{model.image.repository}:{model.image.tag}"
    return f"{pinned}@{model.image.digest}" if model.image.digest else pinned


def tokenizer_revision(model: ModelArgs) -> str | None:
    """The tokenizer's own revision, when it differs from the model's (a second download)."""
    return model.tokenizer_revision if model.tokenizer_revision != model.revision else None


def streams_from_s3(args: ServingStackArgs) -> bool:
    return args.weights_storage.backend is StorageBackend.S3


def engine_settings(args: ServingStackArgs, model: ModelArgs) -> EngineSettings:
    """vLLM's flags: the model's own knobs, TP and PP from the plan, the shutdown timeout from the one clock,
    the staged paths (on S3, ServingStack replaces the model path with the bucket's)."""
    plan = planning.model_plan(args, model)
    s3 = args.weights_storage.s3 if streams_from_s3(args) else None
    first = revisions.revision_model_of(model)
    settings = serving.model_settings(
        model, tensor_parallel_size=plan.tensor_parallel_size, pipeline_parallel_size=plan.pipeline_parallel_size,
        shutdown_timeout_seconds=timing.model_drains(args, model).vllm_shutdown_seconds,
        tokenizer_revision=tokenizer_revision(model),
        load_format=serving.RUNAI_STREAMER if s3 is not None else None,
        # A pod of several ranks reads the checkpoint once, split over its ranks, instead of once per
        # rank (engine.streamer_extra_config).
        model_loader_extra_config=serving.streamer_extra_config(
            s3.streamer_concurrency, s3.streamer_memory_limit_gib,
            distributed=plan.tensor_parallel_size > 1) if s3 is not None else None,
        kv_offloading_gib=planning.kv_offload_gib(args, model, plan),
    )
    # A second revision serves the model's name first: the route sends it the model's requests, and its responses
    # name the model the client asked for. Its own name follows (its adapters' base); its metrics are told apart by
    # the PodMonitor (observability/scraping.py `model_name_from_workload`).
    return settings if first is None else dataclasses.replace(settings, served_model_name=first,
                                                              also_served_as=(model.name,))


def verified_lora(args: ServingStackArgs, model: ModelArgs) -> tuple[tuple[str, ...], ...]:
    """The adapters' flags, for what a verification Job names (a new adapter is verified again); () without LoRA,
    so a model without adapters keeps its Job's name."""
    return (engine_settings(args, model).lora_args,) if model.lora is not None else ()


def extra_env(args: ServingStackArgs, region: pulumi.Input[str]) -> tuple[dict, ...]:
    """Environment the serving pods need from the platform around them."""
    found: tuple[dict, ...] = ()
    if args.edge.mode is EdgeMode.ALB:
        # An ALB reuses idle backend connections for up to its idle timeout; uvicorn's 5 s keep-alive
        # would close them first and the ALB answers 502 (ELB guide: backend keep-alive must exceed
        # the idle timeout).
        found = ({"name": "VLLM_HTTP_TIMEOUT_KEEP_ALIVE", "value": str(alb_idle_timeout(args) + 5)},)
    if streams_from_s3(args):
        # The streamer's S3 client resolves the bucket's endpoint from the region; Pod Identity gives
        # credentials only (AWS_CONTAINER_CREDENTIALS_FULL_URI), not a region.
        found += tuple(serving.region_env(region))
    return found


def staged_adapters(model: ModelArgs) -> tuple[serving.StagedAdapter, ...]:
    """The model's LoRA adapters as the staging Job fetches them, each into its own directory."""
    if model.lora is None:
        return ()
    return tuple(serving.StagedAdapter(target=serving.staged_adapter_path(a), bucket=a.s3.bucket, prefix=a.s3.prefix,
                                       manifest_sha256=a.s3.manifest_sha256) if a.s3 is not None
                 else serving.StagedAdapter(target=serving.staged_adapter_path(a), model_id=a.model_id,
                                            revision=a.revision) for a in model.lora.adapters)



def download_deadline_seconds(model: ModelArgs) -> int:
    architecture = planning.model_architecture(model)
    assert architecture is not None  # the rules refuse a model without one
    download_seconds = architecture.weight_bytes / (HUB_DOWNLOAD_MIB_PER_SECOND * 1024**2)
    return max(MIN_DOWNLOAD_DEADLINE_SECONDS, math.ceil(2 * download_seconds))


def scaling_target(args: ServingStackArgs, model: ModelArgs) -> ScalingTarget:
    plan = planning.model_plan(args, model)
    low, high = planning.replica_bounds(model)
    scaling = model.autoscaling
    idle = scaling.scale_to_zero if low == 0 else None
    return ScalingTarget(
        deployment_name=model.name,
        namespace=args.serving.namespace,
        served_model_name=model.name,
        min_replicas=low,
        max_replicas=high,
        waiting_per_replica_target=scaling.waiting_per_replica_target,
        waiting_activation=scaling.waiting_activation,
        kv_usage_target=scaling.kv_usage_target,
        kv_usage_activation=scaling.kv_usage_activation,
        scale_down_window_seconds=planning.scale_down_window(args, model, plan),
        scale_up_window_seconds=scaling.scale_up_window_seconds,
        # KEDA consults it only on the way to zero: the idle time a model at minReplicas 0 waits for.
        cooldown_seconds=idle.idle_seconds if idle is not None else max(300, 2 * plan.cold_start_seconds),
        ttft_target_seconds=round(model.slo.ttft_p95_seconds * scaling.ttft_target_fraction, 3),
        workload_kind="LeaderWorkerSet" if plan.pipeline_parallel_size > 1 else "Deployment",
        wake_query=routing.held_requests_query(NAMESPACE_LABEL, args.serving.namespace, model.name)
        if idle is not None else None,
        wake_on_waiting=idle.wake_on_waiting if idle is not None else 1,
        held_query=routing.held_requests_query(NAMESPACE_LABEL, args.serving.namespace, model.name)
        if planning.routing_mode(args, model) is RoutingMode.INFERENCE_POOL
        and args.edge.inference_routing.overload.flow_control else None,
    )


def slo(args: ServingStackArgs, model: ModelArgs) -> ModelSlo:
    plan = planning.model_plan(args, model)
    low, high = planning.replica_bounds(model)
    return ModelSlo(
        served_model_name=model.name,
        deployment_name=model.name,
        namespace=args.serving.namespace,
        max_replicas=high,
        min_replicas=low,
        ttft_p95_seconds=model.slo.ttft_p95_seconds,
        itl_p95_seconds=model.slo.itl_p95_seconds,
        group_size=plan.pipeline_parallel_size,
        group_ready_minutes=math.ceil(plan.startup_budget_seconds / 60),
        wake_seconds=planning.wake(args, model).total_seconds if planning.scales_to_zero(model) else None,
        kv_offload_gib=planning.kv_offload_gib(args, model, plan),
        lora_adapters=tuple(a.name for a in model.lora.adapters) if model.lora is not None else (),
    )


def deployed(args: ServingStackArgs, model: ModelArgs) -> tuple[Any, ...]:
    """What a revision runs (image, weights, flags, replicas, template, adapters): a change is checked anew."""
    return (image(model), model.revision, tokenizer_revision(model), engine_settings(args, model), model.replicas,
            model.chat_template, *verified_lora(args, model))


def _fingerprint(value: Any) -> str:
    return hashlib.sha256(repr(value).encode()).hexdigest()[:12]


def gate_fingerprint(args: ServingStackArgs, model: ModelArgs) -> str:
    """What a revision's deploy gate vouches for: what it runs and, for a revision of a pair, its name and weight.
    The gate's Job is named after it (a change re-runs the gate) and its report carries it, so `stacks promote`
    refuses a report of another deploy: an older step's, or one from before the `up` of the file it edits."""
    return _fingerprint((*deployed(args, model), verification.revision_under_test(args, model)))


def eval_fingerprint(args: ServingStackArgs, plan: evaluation.EvalPlan) -> str:
    """What an accuracy gate vouches for: what both revisions run (not their weights: a weight moves requests, not
    answers) and what it scores them on."""
    return _fingerprint((evaluation.deployed(args, plan, lambda m: deployed(args, m)),
                         evaluation.files(plan), plan.owner.eval))
