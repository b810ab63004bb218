"""What each model's accuracy gate runs (pure): which revision it tests and against which, at what concurrency, on
which staged files, and how long it may take. ServingStack declares the EvalJob from these
(llm_serving/verification/eval_job.py); the program it runs is llm_serving/verification/eval_gate.py.

A model with two revisions: the second (the one being rolled out) is tested against the first, on the same samples,
each through its own Service, so each answer comes from the revision it is scored for (through the edge both answer
to the model's name and the weighted split decides). A model with one revision: the model against its tasks' floors.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from llm_serving.serving import EvalTaskArgs, ModelArgs
from llm_serving.stack import revisions, timing, verification
from llm_serving.stack.args import ServingStackArgs
from llm_serving.verification import EvalFile, file_target, task_set_dir


@dataclass(frozen=True)
class EvalPlan:
    owner: ModelArgs  # the model whose `eval` it is
    candidate: ModelArgs  # the revision under test (the second revision, or the model itself)
    stable: ModelArgs | None  # the revision it is compared with
    tasks: tuple[EvalTaskArgs, ...]  # what runs: every task against a stable, else those with a floor


def plans(config: ServingStackArgs) -> tuple[EvalPlan, ...]:
    """One per model with an eval, on the expanded args (revisions.expanded): its second revision against its first on
    every task, or the model alone on the tasks with a floor; none for two revisions that run the same thing."""
    found: list[EvalPlan] = []
    for owner in config.models:
        if owner.eval is None or revisions.revision_model_of(owner) is not None:
            continue
        second = next((m for m in config.models if revisions.revision_model_of(m) == owner.name), None)
        if second is not None and all(getattr(second, f) == getattr(owner, f) for f in revisions.OVERRIDES):
            continue  # the retirement's middle steps: two revisions that run the same answer the same
        # Alone, a task without a floor compares against nothing and could never fail: it does not run.
        tasks = tuple(t for t in owner.eval.tasks if second is not None or t.min_score is not None)
        if tasks:
            found.append(EvalPlan(owner, second or owner, owner if second is not None else None, tasks))
    return tuple(found)


def files(plan: EvalPlan) -> tuple[EvalFile, ...]:
    """The task files, each at its target under the task set's directory (named after the files themselves)."""
    pinned = [(t.name, f) for t in plan.tasks for f in t.files]
    bare = tuple(EvalFile(t.dataset, t.revision, f.path, f.sha256, "") for t in plan.tasks for f in t.files)
    directory = task_set_dir(tuple((task, f.split, b) for b, (task, f) in zip(bare, pinned, strict=True)))
    return tuple(EvalFile(b.dataset, b.revision, b.path, b.sha256, file_target(directory, task, f.split, f.path))
                 for b, (task, f) in zip(bare, pinned, strict=True))


def concurrency(config: ServingStackArgs, model: ModelArgs, asked: int) -> int:
    """At most one replica's spare batch on pods that serve users, as the deploy gate (verification.spare_batch),
    and one request at a time when they have none; the eval's own concurrency on a revision no one reaches."""
    if not verification.serves_users(config, model):
        return asked
    return max(1, min(asked, verification.spare_batch(config, model)))


def _target(config: ServingStackArgs, model: ModelArgs, asked: int) -> dict[str, Any]:
    return {"name": model.name, "url": verification.service_url(config, model),
            "concurrency": concurrency(config, model, asked)}


def settings(config: ServingStackArgs, plan: EvalPlan) -> dict[str, Any]:
    """eval_gate.py's settings: both targets, the task set on the volume, the sample limit and the allowed drop."""
    owner = plan.owner
    assert owner.eval is not None
    staged = iter(files(plan))  # in the tasks' and their files' order
    by_task = {t.name: {f.split: next(staged).target for f in t.files} for t in plan.tasks}
    revision = verification.revision_under_test(config, plan.candidate)
    return {
        "model": owner.name,
        "revision": revision[0] if revision is not None and plan.stable is not None else None,
        "candidate": _target(config, plan.candidate, owner.eval.concurrency),
        "stable": _target(config, plan.stable, owner.eval.concurrency) if plan.stable is not None else None,
        "tasks": [{"name": t.name, "metric": t.metric, "filter": t.filter, "numFewshot": t.num_fewshot,
                   "format": t.format.value, "files": by_task[t.name], "minScore": t.min_score}
                  for t in plan.tasks],
        "limit": owner.eval.limit,
        "maxDropPoints": owner.eval.max_drop_points,
        "requestTimeoutSeconds": verification.request_timeout_seconds(config, timing.EVAL_MAX_GEN_TOKENS),
        "seed": 1234,
    }


def deadline_seconds(config: ServingStackArgs, plan: EvalPlan, checked: dict[str, Any]) -> int:
    """The eval Job's activeDeadlineSeconds (timing.eval_deadline_seconds) for its requests: per target and task its
    samples in waves of its concurrency."""
    targets = [t for t in (checked["candidate"], checked["stable"]) if t is not None]
    waves = sum(math.ceil(checked["limit"] / t["concurrency"]) for t in targets) * len(checked["tasks"])
    return timing.eval_deadline_seconds(plan.owner, waves)


def deployed(config: ServingStackArgs, plan: EvalPlan, what: Any) -> str:
    """What both revisions run (`what(model)`, the deploy gate's fingerprint): a change to either runs the eval
    again. Not the weights: a weight step moves requests, not answers."""
    return repr(tuple(what(m) for m in (plan.candidate, plan.stable) if m is not None))
