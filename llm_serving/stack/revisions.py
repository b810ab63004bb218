"""Two revisions of a model side by side (`models[].revisions`): the stack's args with each second revision spelled
out as a model of its own, and the rules that keep a pair of revisions sound.

Everything a revision needs for itself (weights and their staging Job, workload, Service, PDB, scaling object,
InferencePool and endpoint picker, alerts, the planner's GPUs and the capacity check) is what a model gets, so
`expanded` turns the model's second revision into a `RevisionModel` named `<model>-<revision>` beside it, and the
planner, the rules and ServingStack read the expanded args. The first revision stays the model itself, its
objects' names unchanged: adding a revision to an existing stack creates objects, it never renames or replaces the
serving ones. Only the route sees the pair as one model (llm_serving/stack/parts.py `edge`).

Pure: no Pulumi.
"""

import dataclasses
from collections.abc import Iterator
from typing import Any

from llm_serving.edge import REVISION_HEADER, EdgeMode, EdgeRouting
from llm_serving.platform.args import args_type, fields_of
from llm_serving.platform.problems import Problem
from llm_serving.serving import AccessMode, ModelArgs, RevisionArgs
from llm_serving.stack.args import ServingStackArgs

__all__ = ["REVISION_HEADER", "RevisionModel", "expanded", "object_name", "revision_model_of", "revision_rules",
           "same_runs"]
# The fields a revision may set for itself; every other field is the model's.
OVERRIDES = ("revision", "tokenizer_revision", "image", "quantization", "kv_cache_dtype", "extra_args")


@args_type
class RevisionModel(ModelArgs):
    """A model's second revision, as the model it runs as: its own objects, named `<model>-<revision>`."""

    revision_of: str
    """The model it is a revision of, whose name its replicas also answer to."""


def revision_model_of(model: ModelArgs) -> str | None:
    """The model `model` is the second revision of; None for a model (or a first revision)."""
    return model.revision_of if isinstance(model, RevisionModel) else None


def _overridden(model: ModelArgs, revision: RevisionArgs) -> dict[str, Any]:
    return {name: value for name in OVERRIDES if (value := getattr(revision, name)) is not None}


def _effective(model: ModelArgs, revision: RevisionArgs) -> dict[str, Any]:
    """What the revision runs: each field its own, else the model's."""
    return {name: value if (value := getattr(revision, name)) is not None else getattr(model, name)
            for name in OVERRIDES}


# Suffixes the program appends to a model's name for the objects it derives from it (picker, claims, compile cache,
# staging and verification Jobs, ...): a second revision named after one would share those objects' names with the
# model's own, and the up would fail on the second create (AlreadyExists) where the preview saw two URNs.
DERIVED_SUFFIXES = ("epp", "weights", "compile", "compile-cache", "stage", "verify", "eval", "vllm", "read", "aliases",
                    "chat-template", "adapter-sources", "pdb", "service", "deployment")
# The longest name derived from a model's (`<name>-compile-cache`) must still be a DNS label (63 characters).
LONGEST_DERIVED = len("-eval-stage-") + 10  # `<name>-eval-stage-<10 hex>`, the eval's staging Job


def object_name(model: ModelArgs, index: int) -> str:
    """The name a model's revision runs as: the model's own for the first, `<model>-<name>` for the second."""
    return model.name if index == 0 else f"{model.name}-{model.revisions[index].name}"


def expanded(args: ServingStackArgs) -> ServingStackArgs:
    """`args` with each model's first revision's fields applied to the model, and its second revision appended as a
    RevisionModel; `args` itself when no model has revisions (or when it is expanded already)."""
    if not any(m.revisions for m in args.models) or any(isinstance(m, RevisionModel) for m in args.models):
        return args
    models: list[ModelArgs] = []
    seconds: list[ModelArgs] = []
    for model in args.models:
        if not model.revisions:
            models.append(model)
            continue
        first, *rest = model.revisions
        models.append(dataclasses.replace(model, **_overridden(model, first)))
        for index, revision in enumerate(rest, start=1):
            values = {name: getattr(model, name) for name in fields_of(ModelArgs)}
            values.update(_overridden(model, revision), name=object_name(model, index), revisions=[],
                          revision_of=model.name, allow_workload_replacement=True)
            seconds.append(RevisionModel(**values))
    return dataclasses.replace(args, models=[*models, *seconds])


def same_runs(model: ModelArgs) -> bool:
    """Whether the model's two revisions run the same thing (every field a revision may set, each resolved)."""
    return len(model.revisions) == 2 and _effective(model, model.revisions[0]) == _effective(model, model.revisions[1])


_CAMEL = {"revision": "revision", "tokenizer_revision": "tokenizerRevision", "image": "image",
          "quantization": "quantization", "kv_cache_dtype": "kvCacheDtype", "extra_args": "extraArgs"}


def as_written(args: ServingStackArgs, problems: list[Problem]) -> list[Problem]:
    """The problems of the expanded args named by the keys the stack file holds: a second revision's own field as
    `models[<model>].revisions[<name>].<field>`, any other of its fields as the model's, with the revision named;
    one the model has under the same key (a field the revision inherits) is reported once, as the model's."""
    seconds = {f"models[{m.name}]": m for m in args.models if revision_model_of(m) is not None}
    found: list[Problem] = []
    for problem in problems:
        prefix = next((p for p in seconds if problem.path == p or problem.path.startswith((p + ".", p + "["))), None)
        if prefix is None:
            found.append(problem)
            continue
        model = seconds[prefix]
        first = revision_model_of(model)
        rest, name = problem.path[len(prefix):], model.name.removeprefix(f"{first}-")
        field = rest.lstrip(".").split(".")[0].split("[")[0]
        own = next(r for r in next(m for m in args.models if m.name == first).revisions if r.name == name)
        if field in _CAMEL.values() and getattr(own, next(k for k, v in _CAMEL.items() if v == field)) is not None:
            found.append(dataclasses.replace(problem, path=f"models[{first}].revisions[{name}]{rest}"))
        elif not any(p.path == f"models[{first}]{rest}" and p.message == problem.message for p in problems):
            found.append(dataclasses.replace(problem, path=f"models[{first}]{rest}",
                                             message=f"(revision {name}, objects {model.name}) {problem.message}"))
    return found


def revision_rules(config: ServingStackArgs) -> Iterator[Problem]:
    """One problem per mistake in a model's revisions, on the args as written."""
    names = {m.name for m in config.models if revision_model_of(m) is None}
    seconds: set[str] = set()
    for model in config.models:
        if not model.revisions:
            continue
        key = f"models[{model.name}].revisions"
        if len(model.revisions) != 2:
            yield Problem(key, "lists the revisions that run side by side: two, or none for one revision",
                          len(model.revisions), "2 revisions, or no revisions key")
            continue
        seen = [r.name for r in model.revisions]
        if len(set(seen)) != len(seen):
            yield Problem(f"{key}[1].name", "names the other revision too: the header and the objects need two "
                          "names", seen[1], f"a name other than {seen[0]}")
        total = sum(r.weight for r in model.revisions)
        if total != 100:
            yield Problem(key, "weights are percent of the route's requests and must sum to 100",
                          [r.weight for r in model.revisions], f"weights summing to 100 (now {total})")
        # Two revisions that run the same thing (the values each runs, its own or the model's) are the retirement's
        # steps (stacks/cli/promote.py): the first converged onto the second, then the requests moved back to it.
        # They answer the same, so any split of the requests between them is safe.
        second = object_name(model, 1)
        revision_name = model.revisions[1].name
        if second in names or second in seconds:
            yield Problem(f"{key}[1].name", f"its objects are named {second}, which another model or revision has",
                          revision_name, "a name whose `<model>-<name>` no model or revision has")
        elif any(second.startswith(f"{other}-{suffix}") for other in names | seconds
                 for suffix in DERIVED_SUFFIXES):
            yield Problem(f"{key}[1].name", f"its objects' name {second} is one the program derives from a model's "
                          "name (its picker, claims, Jobs)", revision_name,
                          f"a name that does not start with {', '.join(DERIVED_SUFFIXES)}")
        seconds.add(second)
        if len(second) + LONGEST_DERIVED > 63:
            yield Problem(f"{key}[1].name", f"its objects' names ({second}-eval-stage-<hash> the longest) must be DNS "
                          "labels of 63 characters at most", revision_name, "a shorter name")
        if config.edge.mode is not EdgeMode.GATEWAY:
            # Ingress has no weighted backends (networking.k8s.io/v1 IngressBackend names one Service).
            yield Problem(key, "two revisions need the gateway edge's weighted route", config.edge.mode.value,
                          "edge.mode gateway")
        elif config.edge.routing is EdgeRouting.BY_MODEL:
            # The AIGatewayRoute takes one InferencePool per rule, checked by its CRD's CEL ("only one InferencePool
            # backend is allowed per rule", envoyproxy/ai-gateway api/v1alpha1/ai_gateway_route.go @v1.1.0).
            yield Problem(key, "byModel routing takes one InferencePool per model's rule, so it cannot split a model "
                          "over two revisions", config.edge.routing.value, "edge.routing perModel")
        if model.autoscaling.min_replicas == 0:
            # The weighted share goes through the revisions' Services (edge/objects.py _revision_rules): nothing holds
            # a request while a revision at zero replicas wakes (the picker's queue does, on the header rule only).
            yield Problem(f"models[{model.name}].autoscaling.minReplicas", "two revisions cannot scale to zero: the "
                          "weighted split goes to their Services, which hold no request while a revision wakes", 0,
                          ">= 1, or no revisions")
        if model.storage.access_mode is AccessMode.READ_WRITE_ONCE:
            yield Problem(f"models[{model.name}].storage.accessMode", "two revisions read the weights volume from "
                          "two workloads, which a ReadWriteOnce volume cannot serve", model.storage.access_mode.value,
                          "ReadWriteMany")
