"""Scale to zero: what a model at `minReplicas: 0` needs from the rest of the stack. The picker holds its first
requests while it wakes (so it routes through an InferencePool with flow control), KEDA scales it (an HPA keeps
at least one replica), one pod is one replica (a LeaderWorkerSet group cannot wake one rank at a time), and a
production stack asks for it by name. The wake against the timeouts on the waiting request's path is a timing
rule (llm_serving/stack/timing.py)."""

from collections.abc import Iterator

from llm_serving import serving
from llm_serving.platform.problems import Problem
from llm_serving.scaling import AutoscalingMode
from llm_serving.serving import RoutingMode
from llm_serving.stack.args import ServingStackArgs
from llm_serving.stack.planning import model_plan, replica_bounds, routing_mode

OVERLOAD = "edge.inferenceRouting.overload"


def scale_to_zero_rules(config: ServingStackArgs) -> Iterator[Problem]:
    for model in config.models:
        at = f"models[{model.name}]"
        scaling = model.autoscaling
        low, _ = replica_bounds(model)
        if low != 0:
            if scaling.scale_to_zero is not None:
                yield Problem(f"{at}.autoscaling.scaleToZero", "only read with minReplicas 0", "set",
                              "unset, or autoscaling.minReplicas: 0")
            continue
        idle = scaling.scale_to_zero
        if idle is None:
            yield Problem(f"{at}.autoscaling.scaleToZero", "required with minReplicas 0: how long idle before zero, "
                          "and what wakes the model", "unset", "an idle policy (idleSeconds, wakeOnWaiting)")
            continue
        if config.production_like and not idle.in_production:
            yield Problem(f"{at}.autoscaling.minReplicas", f"a {config.environment.value} model at zero makes its "
                          "first request after an idle spell wait for a cold start", 0,
                          f">= 1, or models[{model.name}].autoscaling.scaleToZero.inProduction: true")
        if routing_mode(config, model) is not RoutingMode.INFERENCE_POOL:
            yield Problem(f"{at}.route.routing", "scale to zero needs the endpoint picker: it holds the first "
                          "requests while the model wakes, and its queue is what wakes it", routing_mode(
                              config, model).value, "inferencePool (gateway mode with its controller installed)")
        if not config.edge.inference_routing.overload.flow_control:
            yield Problem(f"{OVERLOAD}.flowControl", f"{model.name} scales to zero: without flow control the picker "
                          "refuses requests at zero replicas instead of holding them", False, "true")
        if config.autoscaling.mode is not AutoscalingMode.KEDA:
            yield Problem("autoscaling.mode", f"{model.name} scales to zero, which an HPA cannot (it keeps at least "
                          "one replica)", config.autoscaling.mode.value, "keda")
        try:
            nodes = model_plan(config, model).nodes_per_replica
        except serving.CapacityError:  # the capacity rules report a model without a plan
            continue
        if nodes > 1:
            yield Problem(f"{at}.autoscaling.minReplicas", "a multi-node group (LeaderWorkerSet) does not scale to "
                          "zero: it would wake every rank's node at once", 0, ">= 1")
