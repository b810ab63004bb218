"""Rules of the accuracy gate (`models[].eval`, docs/verification.md "The accuracy gate").

In prod a change that can move quality (fp8 KV cache, quantization, or a second revision with other weights,
quantization or KV dtype) needs an eval that runs and can fail, not a name: the eval Job gates the `up` as the deploy
gate does. With one revision there is nothing to compare against: only the tasks with a floor (`minScore`) run, and
prod's quality change needs a floor on every task. The task set and the harness are staged on the weights volume
and read by the eval Job's own pod, so the volume must be one that more than one pod can mount.
"""

from __future__ import annotations

from collections.abc import Iterator

from llm_serving.platform.args import Environment
from llm_serving.platform.problems import Problem
from llm_serving.serving import AccessMode, KvCacheDtype, ModelArgs
from llm_serving.stack import revisions, verification
from llm_serving.stack.args import ServingStackArgs
from llm_serving.storage import StorageBackend
from llm_serving.verification import VerificationMode

# The longest name the eval derives from the revision it tests: its staging Job's, `<name>-eval-stage-<10 hex>`
# (llm_serving/verification/eval_job.py).
EVAL_STAGE_SUFFIX = "-eval-stage-" + "0" * 10
# KV cache dtypes that keep the model's own precision (bfloat16 is the checkpoints' dtype; auto follows it).
FULL_PRECISION_KV = (KvCacheDtype.AUTO, KvCacheDtype.BFLOAT16)


def quality_changes(owner: ModelArgs, second: ModelArgs | None) -> list[str]:
    """What in the model (or between its two revisions) can move its answers' quality, as the keys that say so."""
    found: list[str] = []
    for model in (owner, *((second,) if second is not None else ())):
        if model.kv_cache_dtype not in FULL_PRECISION_KV:
            found.append(f"kvCacheDtype {model.kv_cache_dtype.value}")
        if model.quantization is not None:
            found.append(f"quantization {model.quantization}")
    if second is not None:
        for field, what in (("revision", "other weights (revision)"), ("quantization", "another quantization"),
                            ("kv_cache_dtype", "another kvCacheDtype")):
            if getattr(owner, field) != getattr(second, field):
                found.append(f"a second revision with {what}")
    return list(dict.fromkeys(found))


def second_revision(config: ServingStackArgs, owner: ModelArgs) -> ModelArgs | None:
    """The owner's second revision in the expanded args, or None."""
    return next((m for m in config.models if revisions.revision_model_of(m) == owner.name), None)


def eval_rules(config: ServingStackArgs) -> Iterator[Problem]:
    mode = verification.verification_mode(config)
    for owner in config.models:
        if revisions.revision_model_of(owner) is not None:
            continue  # a second revision's eval is its model's
        at = f"models[{owner.name}]"
        second = second_revision(config, owner)
        changes = quality_changes(owner, second)
        prod = config.environment is Environment.PROD
        if prod and changes and owner.eval is None:
            yield Problem(f"{at}.eval", f"{', '.join(changes)} in prod needs an eval that runs and can fail the up, "
                          "not a reference", None, "an eval with a pinned task set (docs/verification.md)")
        if owner.eval is None:
            continue
        if prod and changes and mode is not VerificationMode.GATE:
            yield Problem("verification.mode", f"lets {at}'s eval pass whatever it scores; prod needs the eval to "
                          f"gate {', '.join(changes)}", mode.value, "gate")
        if mode is VerificationMode.OFF:
            yield Problem("verification.mode", f"runs no Job, so {at}.eval would never run", mode.value,
                          "gate or report, or no eval")
        # What either revision runs that lasts once it runs alone (fp8 KV, quantization): after the retirement the
        # model runs one revision, compared with nothing, so its floors must be there already (promote's last step
        # validates the stack it writes).
        alone = quality_changes(owner, None) + (quality_changes(second, None) if second else [])
        if prod and (alone if second is not None else changes):
            for task in owner.eval.tasks:
                if task.min_score is None:
                    why = ("with one revision the eval compares against nothing" if second is None else
                           f"once one revision runs {', '.join(dict.fromkeys(alone))} alone, the eval compares "
                           "against nothing")
                    yield Problem(f"{at}.eval.tasks[{task.name}].minScore", f"{why}, so a task without a floor "
                                  "could never fail", None, "the lowest acceptable score, 0-1")
        tested = second.name if second is not None else owner.name
        if len(tested) + len(EVAL_STAGE_SUFFIX) > 63:
            # Kubernetes object names of this kind are DNS labels (RFC 1123, 63 characters at most).
            yield Problem(f"{at}.eval", f"its staging Job's name, {tested}{EVAL_STAGE_SUFFIX}, would exceed the 63 "
                          "characters of a Kubernetes name", tested, "a model (or revision) name of at most "
                          f"{63 - len(EVAL_STAGE_SUFFIX)} characters")
        names = [t.name for t in owner.eval.tasks]
        if len(set(names)) != len(names):
            yield Problem(f"{at}.eval.tasks", "names a task twice (each task's score is reported by its name)",
                          names, "each task once")
        if config.weights_storage.backend is StorageBackend.S3:
            yield Problem(f"{at}.eval", "stages its task set and harness on the weights volume, and the S3 backend "
                          "has none", config.weights_storage.backend.value,
                          "a volume backend (efs, fsxLustre, existingStorageClass), or no eval")
        elif owner.storage.access_mode is AccessMode.READ_WRITE_ONCE:
            yield Problem(f"{at}.storage.accessMode", "the eval Job's pod reads the task set from the weights volume "
                          "beside the serving pods, which a ReadWriteOnce volume cannot serve",
                          owner.storage.access_mode.value, "ReadWriteMany, or no eval")
