"""Overload admission per model: the picker's shedding thresholds from the stack's own numbers, and the
preview rules that keep them from fighting the autoscaler or Envoy. Pure; checks.RULES runs the rules.

Queue wait grows with queue depth (Little's law: wait = depth / completion rate, and the rate is the
replica's). KEDA aims for `waitingPerReplicaTarget` waiting requests per replica and scales out once TTFT
passes `ttftTargetFraction` of the objective, so the depth at which the queue alone costs the whole TTFT
objective is target / fraction: 5 / 0.8 -> 7 with the defaults. The picker counts a replica as full there,
strictly above KEDA's target, so the autoscaler always sees the queue it scales on before the picker holds.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import replace

from llm_serving.platform.problems import Problem
from llm_serving.routing import Admission
from llm_serving.serving import CapacityError, ModelArgs, RoutingMode
from llm_serving.stack.args import ServingStackArgs
from llm_serving.stack.planning import model_plan, replica_add_seconds, routing_mode, scales_to_zero, wake

OVERLOAD = "edge.inferenceRouting.overload"


def model_admission(config: ServingStackArgs, model: ModelArgs) -> Admission:
    overload = config.edge.inference_routing.overload
    scaling = model.autoscaling
    wait = overload.queue_wait_seconds if overload.queue_wait_seconds is not None else model.slo.ttft_p95_seconds
    retry_after = overload.retry_after_seconds or max(1, math.ceil(wait))
    if scales_to_zero(model):
        # At zero replicas the picker holds the first requests until the model is up: as long as the wake.
        wait = max(wait, wake(config, model).total_seconds)
    depth = overload.queue_depth_per_replica or math.ceil(
        round(scaling.waiting_per_replica_target / scaling.ttft_target_fraction, 6))
    kv = overload.kv_cache_usage or min(1.0, round(scaling.kv_usage_target / scaling.ttft_target_fraction, 3))
    return Admission(
        flow_control=overload.flow_control,
        queue_wait_seconds=wait,
        queue_depth_per_replica=depth,
        kv_cache_usage=kv,
        sheddable_queue_requests=overload.sheddable_queue_requests or depth,
        retry_after_seconds=retry_after,
    )


def routed_admission(config: ServingStackArgs, model: ModelArgs) -> Admission:
    """`model_admission` with the time to add a replica (the shedding alert's window); needs a valid plan."""
    return replace(model_admission(config, model),
                   scale_out_seconds=replica_add_seconds(config, model, model_plan(config, model)))


def admission_rules(config: ServingStackArgs) -> Iterator[Problem]:
    for model in config.models:
        if routing_mode(config, model) is not RoutingMode.INFERENCE_POOL:
            continue
        try:
            admission = model_admission(config, model)
        except CapacityError:
            continue  # a model that scales to zero waits for its wake, which needs a plan: capacity_rules reports it
        scaling = model.autoscaling
        # The queue wait against Envoy's stream idle timeout is a timing rule (llm_serving/stack/timing.py).
        if admission.queue_depth_per_replica <= scaling.waiting_per_replica_target:
            yield Problem(f"{OVERLOAD}.queueDepthPerReplica", f"the picker would hold {model.name}'s requests "
                          f"before vLLM's queue reaches the autoscaler's {scaling.waiting_per_replica_target:g} "
                          "per replica, so KEDA would never add a replica", admission.queue_depth_per_replica,
                          f"> models[{model.name}].autoscaling.waitingPerReplicaTarget, or unset")
        if admission.kv_cache_usage < scaling.kv_usage_target:
            yield Problem(f"{OVERLOAD}.kvCacheUsage", f"the picker would hold {model.name}'s requests before KV "
                          f"usage reaches the autoscaler's {scaling.kv_usage_target:g}, so KEDA would never add "
                          "a replica", admission.kv_cache_usage,
                          f">= models[{model.name}].autoscaling.kvUsageTarget, or unset")
