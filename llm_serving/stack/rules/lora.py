"""Preview-time rules for LoRA adapters (`models[].lora`): names clients can tell apart, aliases over the model's
own adapters with weights on all targets or none, a backend and a routing mode that can serve them, and the
adapters' host memory within the pod's limit. Their GPU buffers are the capacity rules' (the plan takes them from
the KV room and refuses a model whose KV then holds fewer requests than `targetConcurrency`).

What only the adapter's own `adapter_config.json` can tell (its base model, its rank, DoRA or bias) is checked by
the staging Job before the adapter's marker (llm_serving/serving/stage_adapter.py): a preview never downloads
from the Hub. The rule list is rules/__init__.py."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from llm_serving.platform.problems import Problem
from llm_serving.serving import CapacityError, ModelArgs, RoutingMode
from llm_serving.stack.args import ServingStackArgs
from llm_serving.stack.planning import host_memory, model_architecture, model_plan, routing_mode
from llm_serving.stack.revisions import revision_model_of
from llm_serving.storage import StorageBackend


def lora_rules(config: ServingStackArgs) -> Iterator[Problem]:
    yield from _served_names(config)
    for model in config.models:
        if model.lora is not None:
            yield from _model_lora(config, model)


def _served_names(config: ServingStackArgs) -> Iterator[Problem]:
    """Every name a request's `model` may carry (models, adapters, aliases) is one backend's: a name twice would
    send a client's requests to whichever the gateway or vLLM finds first."""
    # A model's second revision serves the same names as the model: one backend, behind the model's route.
    counts = Counter(name for model in config.models if revision_model_of(model) is None
                     for name in model.served_names())
    for model in config.models:
        if model.lora is None:
            continue
        for kind, names in (("adapters", [a.name for a in model.lora.adapters]),
                            ("aliases", [a.name for a in model.lora.aliases])):
            for name in names:
                if counts[name] > 1:
                    yield Problem(f"models[{model.name}].lora.{kind}[{name}].name", "is served under another "
                                  "model, adapter or alias of the stack too", name, "a name of its own")


def _model_lora(config: ServingStackArgs, model: ModelArgs) -> Iterator[Problem]:
    lora = model.lora
    assert lora is not None
    at = f"models[{model.name}].lora"
    if lora.max_cpu_loras is not None and lora.max_cpu_loras < lora.max_loras:
        # vllm 0.33.0 vllm/config/lora.py: "max_cpu_loras must be >= max_loras".
        yield Problem(f"{at}.maxCpuLoras", "vLLM refuses a CPU cache smaller than the GPU slots", lora.max_cpu_loras,
                      f">= maxLoras ({lora.max_loras})")
    if config.weights_storage.backend is StorageBackend.S3:
        # vLLM loads adapters from a local directory; the S3 backend streams the weights and mounts no volume.
        yield Problem(at, "adapters are staged on the weights volume, which weightsStorage.backend s3 has none "
                      "of", "s3", "efs, fsxLustre or an existing StorageClass")
    architecture = model_architecture(model)
    if architecture is not None and architecture.is_moe:
        yield Problem(at, "the planner sizes LoRA buffers for dense decoders only; a mixture of experts also "
                      "wraps its experts", model.model_id, "a dense model")
    adapters = {a.name for a in lora.adapters}
    for alias in lora.aliases:
        where = f"{at}.aliases[{alias.name}]"
        for target in alias.targets:
            if target.adapter not in adapters:
                yield Problem(f"{where}.targets", "names no adapter of this model", target.adapter,
                              f"one of {sorted(adapters)}")
        weighted = [t.weight is not None for t in alias.targets]
        if any(weighted) and not all(weighted):
            # llm-d-router v0.10.0 pkg/epp/requestcontrol/director.go: with mixed weights the unweighted targets
            # are never chosen.
            yield Problem(f"{where}.targets", "weights on some targets only: the picker would never choose the "
                          "others", [t.weight for t in alias.targets], "a weight on every target, or on none")
        if routing_mode(config, model) is not RoutingMode.INFERENCE_POOL:
            yield Problem(where, "an alias is the endpoint picker's rewrite (InferenceModelRewrite), and this model "
                          "is routed through its Service", "service", "route.routing inferencePool")
    try:
        plan = model_plan(config, model)
    except CapacityError:
        return  # capacity_rules reports it, with the LoRA buffers' share of the KV room
    memory = host_memory(config, model, plan)
    if memory.free_gib < 0:
        yield Problem(f"{at}.maxCpuLoras", f"{memory.lora_gib} GiB of adapters in pinned host memory (at "
                      f"maxLoraRank {lora.max_lora_rank}, every TP rank) do not fit the pod's {memory.pod_gib} GiB "
                      f"memory limit beside the engine ({memory.engine_gib} GiB) and /dev/shm "
                      f"({memory.transport_gib} GiB)", lora.max_cpu_loras or lora.max_loras,
                      "fewer CPU adapters, or a lower maxLoraRank")
