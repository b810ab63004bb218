"""Preview-time rules for how requests reach replicas, how replicas span nodes and how they start: InferencePool
routing (gateway mode only, highly available pickers), multi-node groups (EFA, an image that can use it, one
placement group) and the shared compile cache (a key with every input pinned, room for its producer).
The rule list is checks.RULES."""

from __future__ import annotations

from collections.abc import Iterator

from llm_serving.edge import ControllerMode, EdgeMode
from llm_serving.gpu import PlacementStrategy
from llm_serving.platform.args import Environment
from llm_serving.platform.problems import Problem
from llm_serving.serving import CapacityError, CompileCacheMode, RoutingMode
from llm_serving.stack.args import ServingStackArgs
from llm_serving.stack.planning import (
    compile_cache_key,
    compile_cache_writer_problem,
    producer_room,
    resolve_instance_type,
    routing_mode,
    supply_key,
)
from llm_serving.stack.rules.platform import NG


def routing_rules(config: ServingStackArgs) -> Iterator[Problem]:
    edge = config.edge
    pooled = [m for m in config.models if routing_mode(config, m) is RoutingMode.INFERENCE_POOL]
    for model in pooled:
        path = f"models[{model.name}].route.routing"
        if edge.mode is not EdgeMode.GATEWAY:
            # An ALB or ingress-nginx has no way to ask an endpoint picker; only the gateway's
            # extension (Envoy AI Gateway) can.
            yield Problem(path, f"{edge.mode.value} mode cannot route to an InferencePool", "inferencePool",
                          "service, or edge.mode gateway")
        elif edge.controller is not ControllerMode.INSTALL:
            yield Problem(path, "an existing Envoy Gateway is not configured here with Envoy AI Gateway as its "
                          "extension, which InferencePool routes need", "inferencePool",
                          "service, or edge.controller install")
    for model in config.models:
        if model.route.priority is not None and routing_mode(config, model) is not RoutingMode.INFERENCE_POOL:
            yield Problem(f"models[{model.name}].route.priority", "only an endpoint picker reads a priority; this "
                          "model's route uses its Service", model.route.priority,
                          "unset, or route.routing inferencePool")
    replicas = edge.inference_routing.picker_replicas
    if pooled and replicas < 2 and config.environment is not Environment.DEV:
        yield Problem("edge.inferenceRouting.pickerReplicas", "the gateway fails closed without a picker, so one "
                      f"picker is a single point of failure for {', '.join(m.name for m in pooled)}", replicas,
                      ">= 2 outside dev")
    routing = edge.inference_routing
    if routing.picker_memory_limit_mib < routing.picker_memory_request_mib:
        yield Problem("edge.inferenceRouting.pickerMemoryLimitMib", "below the memory request",
                      routing.picker_memory_limit_mib,
                      f">= pickerMemoryRequestMib ({routing.picker_memory_request_mib})")


def multinode_rules(config: ServingStackArgs) -> Iterator[Problem]:
    """A replica spread over nodes: its ranks need EFA, an image that can drive it, and one placement
    group (one AZ) for all of them."""
    group = config.gpu_node_group
    instance = resolve_instance_type(config)
    for model in config.models:
        if model.pipeline_parallel_size == 1 or instance is None:
            continue
        path = f"models[{model.name}]"
        if instance.efa_interfaces == 0:
            yield Problem(f"{NG}.instanceType", f"{instance.name} has no EFA, so the ranks of {model.name}'s "
                          "multi-node replicas would exchange activations over TCP", instance.name,
                          "an EFA instance type (p4d, p4de, p5, p5e, p5en, p6-b200)")
            continue
        if group.efa_interfaces == 0:
            yield Problem(f"{NG}.efaInterfaces", f"{model.name} spans {model.pipeline_parallel_size} nodes and NCCL "
                          "would fall back to TCP sockets without EFA interfaces", 0, f"{instance.efa_interfaces}")
        elif not model.image.efa_capable:
            yield Problem(f"{path}.image.efaCapable", "NCCL uses EFA only through libfabric and aws-ofi-nccl in "
                          "the image, which vllm/vllm-openai does not carry (it would silently use TCP)", False,
                          "true, with an image that has them (e.g. AWS's vLLM Deep Learning Container)")
        if group.placement is not PlacementStrategy.CLUSTER:
            yield Problem(f"{NG}.placement", f"the ranks of {model.name}'s groups belong in one placement group "
                          "and availability zone", group.placement.value, "cluster")


def compile_cache_rules(config: ServingStackArgs) -> Iterator[Problem]:
    """`compileCache: shared` asked for by name: every input of its key pinned, and a producer that may write.
    (`auto` falls back to off instead, and `plan --stack` says why.)"""
    for model in config.models:
        if model.compile_cache is not CompileCacheMode.SHARED:
            continue
        try:
            key = compile_cache_key(config, model)
        except CapacityError:
            continue  # the capacity rule reports the plan itself
        writer = compile_cache_writer_problem(config, model)
        found = [*key.problems(), *([writer] if writer else [])]
        for problem in found:
            yield Problem(f"models[{model.name}].compileCache", f"no shared compile cache: {problem}", "shared",
                          "auto or off, or pin the missing input")
        room = None if found else producer_room(config)
        if room is not None and model.name in room.refused:
            why, needed = room.refused[model.name]
            supply, nodes = supply_key(config)
            yield Problem(supply, f"models[{model.name}].compileCache shared: {why}",
                          nodes, f">= {needed}, or compileCache auto or off")
