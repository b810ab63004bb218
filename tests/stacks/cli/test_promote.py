"""`python -m stacks promote`: a second revision's rollout written into the stack file from its gates' reports, one
step at a time (the next weight; at 100 the first revision converged onto the second while it takes nothing, the
requests moved back to it, then the revisions retired; weight 0 on a failed gate or eval), the file's comments and
layout kept, a report of another model or revision refused, and every result a valid stack.

The stack is a copy of prod serving llama-70b as two revisions at 90/10 (stack_variants.prod_with_two_revisions);
nothing is rendered: validating with load_stack_file is what the command promises.

Length: every kind of step, layout and refusal on the one variant, with the reports each step's `up` would write
(`fresh`); split, each part would carry the same fixtures and report builders."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llm_serving.platform.args import fields_of
from llm_serving.serving import ModelArgs
from llm_serving.stack import evaluation, model_parts, revisions
from stacks.cli import promote
from stacks.config.problems import ConfigError
from stacks.environment import load_stack_file
from tests.support import stack_variants
from tests.support.cli import run_stacks

MODEL = "llama-70b"
PASSED = {"model": MODEL, "revision": "canary", "passed": True}
FAILED = {"model": MODEL, "revision": "canary", "passed": False,
          "failures": ["FAIL  canary  load: time to first token p95 3.4 s > objective 2 s"]}
# The eval Job's reports (llm_serving/verification/eval_gate.py): its last log line.
EVAL_PASSED = {"eval": {"model": MODEL, "revision": "canary", "passed": True, "failures": []}}
EVAL_FAILED = {"eval": {"model": MODEL, "revision": "canary", "passed": False,
                        "failures": ["FAIL  gsm8k  exact_match 0.71 < stable 0.79 - 2 points"]}}
# The first revision's own gate, once its pods run what the second ran.
FIRST_PASSED = {"model": MODEL, "revision": "stable", "passed": True}
FIRST_FAILED = {**FIRST_PASSED, "passed": False, "failures": ["FAIL  stable  models: no answer"]}
# The variant's models as PyYAML writes them, indentless sequences and all; `eval` sorts before `name`.
BEFORE = """\
    name: llama-70b
    revisions:
    - name: stable
      weight: 90
    - name: canary
      revision: '3333333333333333333333333333333333333333'
      weight: 10
"""
# The eval the variant carries (prod needs one for new weights), in one flow line for the layouts below.
EVAL_LINE = "    eval: " + json.dumps(stack_variants.EVAL) + "\n"


@pytest.fixture
def stack(stack_dir: Path) -> Path:
    path = stack_variants.prod_with_two_revisions(stack_dir)
    assert path.read_text().endswith(BEFORE)  # the layout the expected texts below edit
    return path


def deployed(path: Path, report: dict) -> str | None:
    """What the Job of `report`'s revision (or, an `{"eval": ...}` report, the eval) vouched for had it run after the
    `up` of the stack file as it is now: the fingerprint the stack gives that Job (llm_serving/stack/model_parts.py)."""
    _, config = load_stack_file(path)
    expanded = revisions.expanded(config)
    if "eval" in report:
        plan = next((p for p in evaluation.plans(expanded) if p.owner.name == MODEL), None)
        return model_parts.eval_fingerprint(expanded, plan) if plan is not None else None
    owner = next(m for m in config.models if m.name == MODEL)
    index = [r.name for r in owner.revisions].index(report["revision"]) if owner.revisions else 0
    model = next(m for m in expanded.models if m.name == revisions.object_name(owner, index))
    return model_parts.gate_fingerprint(expanded, model)


def fresh(path: Path, report: dict | str | None) -> dict | str | None:
    """`report` as that up's Job writes it: with the fingerprint of what the stack file deploys now, unless it says."""
    if not isinstance(report, dict):
        return report
    inner = report.get("eval", report)
    if not isinstance(inner, dict) or "deployed" in inner or "revision" not in inner:
        return report
    filled = {**inner, "deployed": deployed(path, report)}
    return {"eval": filled} if "eval" in report else filled


def promote_with(path: Path, report: dict | str, *options: str, evaluated: dict | None = EVAL_PASSED):
    """The command with `report` as --report and, unless None, `evaluated` as --eval-report, each the report of the
    up of the stack file as it is now (`fresh`) unless it says what it vouches for."""
    report_file = path.parent / "report.json"
    report = fresh(path, report)  # type: ignore[assignment]
    report_file.write_text(report if isinstance(report, str) else json.dumps(report))
    extra: list[str] = []
    if evaluated is not None:
        eval_file = path.parent / "eval.json"
        eval_file.write_text(json.dumps(fresh(path, evaluated)))
        extra = ["--eval-report", str(eval_file)]
    return run_stacks("promote", str(path), MODEL, "--report", str(report_file), *extra, *options)


def weights(path: Path) -> list[int]:
    _, config = load_stack_file(path)  # validates
    return [r.weight for r in next(m for m in config.models if m.name == MODEL).revisions]


def test_a_passing_gate_writes_the_next_weight_and_nothing_else(stack: Path) -> None:
    before = stack.read_text()
    ran = promote_with(stack, PASSED)
    assert ran.returncode == 0, ran.stderr
    assert stack.read_text() == before.replace("weight: 90", "weight: 75").replace("weight: 10", "weight: 25")
    assert weights(stack) == [75, 25]
    assert ran.stdout.splitlines() == [
        f"llama-70b: canary 10 -> 25 % (stable 75 %): the gate passed; after the up and its next passing gate, "
        f"promote again; wrote {stack}"]


def test_a_failing_gate_rolls_back_to_weight_zero(stack: Path) -> None:
    before = stack.read_text()
    ran = promote_with(stack, FAILED, evaluated=None)  # a failed gate needs no eval to roll back
    assert ran.returncode == 0, ran.stderr
    assert stack.read_text() == before.replace("weight: 10", "weight: 0").replace("weight: 90", "weight: 100")
    assert weights(stack) == [100, 0]
    assert "canary 10 -> 0 % (stable 100 %): the verification failed: FAIL  canary  load: time to first" in ran.stdout
    assert "rolled back" in ran.stdout
    # Already at 0: nothing to write, exit 1, the file as it was.
    rolled_back = stack.read_text()
    again = promote_with(stack, FAILED)
    assert (again.returncode, stack.read_text()) == (1, rolled_back)
    assert "nothing to do" in again.stdout


def test_a_failing_eval_rolls_back_though_the_latency_gate_passed(stack: Path) -> None:
    ran = promote_with(stack, PASSED, evaluated=EVAL_FAILED)
    assert ran.returncode == 0, ran.stderr
    assert weights(stack) == [100, 0]
    assert "canary 10 -> 0 % (stable 100 %): the eval failed: FAIL  gsm8k  exact_match 0.71 < stable" in ran.stdout


def test_a_model_with_an_eval_moves_only_with_its_passing_report(stack: Path) -> None:
    before = stack.read_text()
    ran = promote_with(stack, PASSED, evaluated=None)
    assert ran.returncode == 2 and "--eval-report: llama-70b has an eval: a step needs its passing report" in ran.stderr
    # The gate's report given as the eval's (or the other way round) is refused by its envelope.
    wrong = promote_with(stack, PASSED, evaluated={"verification": PASSED})
    assert wrong.returncode == 2 and "is the verification Job's report, not the eval Job's" in wrong.stderr
    assert stack.read_text() == before


def test_the_ladder_then_converge_move_back_and_retire(stack: Path) -> None:
    _, before = load_stack_file(stack)
    ran_as = next(m for m in revisions.expanded(before).models if revisions.revision_model_of(m) == MODEL)
    seen, said = [], []
    for _ in promote.LADDER[1:]:
        ran = promote_with(stack, PASSED)
        assert ran.returncode == 0, ran.stderr
        seen.append(weights(stack))
        said.append(ran.stdout)
    assert seen == [[100 - step, step] for step in promote.LADDER[1:]]
    assert "canary 50 -> 100 % (stable 0 %)" in said[-1]
    assert "promote again to move stable onto what canary runs" in said[-1]
    assert promote_with(stack, FAILED).returncode == 0
    assert weights(stack) == [100, 0]  # a failure at 100 rolls back too
    for _ in promote.LADDER:
        promote_with(stack, PASSED)
    assert weights(stack) == [0, 100]
    # Converge: the first revision's pods roll onto what the second runs while they take no request.
    ran = promote_with(stack, PASSED)
    assert ran.returncode == 0, ran.stderr
    assert "stable now runs what canary runs (revision), at weight 0 while its pods roll" in ran.stdout
    assert stack.read_text().endswith("    - name: stable\n      revision: '3333333333333333333333333333333333333333'\n"
                                      "      weight: 0\n    - name: canary\n"
                                      "      revision: '3333333333333333333333333333333333333333'\n"
                                      "      weight: 100\n")
    _, converged = load_stack_file(stack)
    assert revisions.same_runs(converged.models[0])
    # Then the evidence is the first revision's own gate on its rolled pods; the second's report is refused.
    assert promote_with(stack, PASSED).returncode == 2
    failed = promote_with(stack, FIRST_FAILED, evaluated=None)
    assert (failed.returncode, weights(stack)) == (1, [0, 100])
    assert "stable runs what canary runs, but its gate failed: FAIL  stable  models: no answer" in failed.stdout
    # Move back up the same ladder, so its replicas scale with its share; no eval (same answers).
    moved = []
    for _ in promote.LADDER:
        ran = promote_with(stack, FIRST_PASSED, evaluated=None)
        assert ran.returncode == 0, ran.stderr
        moved.append(weights(stack))
        if weights(stack) == [25, 75]:
            # A first-revision gate that fails on the way rolls it back to 0, the second keeping every request.
            assert promote_with(stack, FIRST_FAILED, evaluated=None).returncode == 0
            assert weights(stack) == [0, 100]
            for _ in promote.LADDER[:2]:
                promote_with(stack, FIRST_PASSED, evaluated=None)
    assert moved == [[step, 100 - step] for step in promote.LADDER]
    assert "stable 50 -> 100 % (canary 0 %)" in ran.stdout and "promote again to retire canary" in ran.stdout
    # Retire: the first revision's keys are the model's own; its pods run what they ran, the second's objects go.
    _, moved_back = load_stack_file(stack)
    serving = next(m for m in revisions.expanded(moved_back).models if m.name == MODEL)
    ran = promote_with(stack, FIRST_PASSED, evaluated=None)
    assert ran.returncode == 0, ran.stderr
    assert "what canary ran is the model's own now (revision), on stable's pods unchanged" in ran.stdout
    assert stack.read_text().endswith("    name: llama-70b\n"
                                      "    revision: '3333333333333333333333333333333333333333'\n")
    _, after = load_stack_file(stack)
    promoted = next(m for m in after.models if m.name == MODEL)
    # The model now runs, under its own name, what the second revision ran: weights, image, engine flags, all of it;
    # and what its pods ran before the retirement, so they do not roll.
    assert promoted.revisions == []
    assert promoted.revision == stack_variants.CANARY_REVISION
    for name in set(fields_of(ModelArgs)) - {"name", "revisions", "allow_workload_replacement"}:
        assert getattr(promoted, name) == getattr(ran_as, name) == getattr(serving, name), name
    # No second revision any more: a report of one is refused.
    assert promote_with(stack, PASSED).returncode == 2


def test_steps_from_the_command_line(stack: Path) -> None:
    assert promote_with(stack, PASSED, "--steps", "5,100").returncode == 0
    assert weights(stack) == [0, 100]
    for bad in ("10,50", "50,25,100", "0,100", "10,x,100"):
        ran = promote_with(stack, PASSED, "--steps", bad)
        assert ran.returncode == 2 and "--steps: expected rising percentages" in ran.stderr, bad


COMMENTED = """\
  # llama-70b: the new commit proves itself beside the serving one (issue #41).
    name: llama-70b
    # Two revisions while the canary proves itself.
    revisions:
      - {name: stable, weight: 90}   # the serving one
      # the Hub's new commit, gated on its own pool
      - {name: canary, weight: 10, revision: '3333333333333333333333333333333333333333'}
    autoscaling:   # kept
      minReplicas: 2
  # after the models
"""
INDENTED = """\
    name: llama-70b
    revisions:
        - name: stable
          weight: 90  # the serving one
        - name: canary
          # the Hub's new commit
          revision: '3333333333333333333333333333333333333333'
          weight: 10
    autoscaling:
      minReplicas: 2
"""


# What the convergence and the retirement leave of each layout: the first revision's keys rewritten on its own lines;
# then the revisions block goes with the comment lines right above it (they speak of it); every other line stays.
COMMENTED_CONVERGED = ("      - {name: stable, weight: 0, revision: '3333333333333333333333333333333333333333'}"
                       "   # the serving one\n")
INDENTED_CONVERGED = """\
        - name: stable
          revision: '3333333333333333333333333333333333333333'
          weight: 0  # the serving one
"""
COMMENTED_RETIRED = """\
  # llama-70b: the new commit proves itself beside the serving one (issue #41).
    name: llama-70b
    revision: '3333333333333333333333333333333333333333'
    autoscaling:   # kept
      minReplicas: 2
  # after the models
"""
INDENTED_RETIRED = """\
    name: llama-70b
    revision: '3333333333333333333333333333333333333333'
    autoscaling:
      minReplicas: 2
"""


@pytest.mark.parametrize(("layout", "converged", "retired"), [
    (COMMENTED, COMMENTED_CONVERGED, COMMENTED_RETIRED), (INDENTED, INDENTED_CONVERGED, INDENTED_RETIRED)],
    ids=["flow-entries", "indented-block"])
def test_comments_and_layout_are_kept(stack: Path, layout: str, converged: str, retired: str) -> None:
    text = stack.read_text()
    # The model's item: its eval on the dash line, then the layout's keys.
    stack.write_text(text[:text.index("  - eval:\n")] + "  - " + EVAL_LINE.lstrip() + layout)
    assert weights(stack) == [90, 10]
    assert promote_with(stack, PASSED).returncode == 0
    assert stack.read_text().endswith(layout.replace("weight: 90", "weight: 75").replace("weight: 10", "weight: 25"))
    assert weights(stack) == [75, 25]
    stack.write_text(stack.read_text().replace("weight: 75", "weight: 0").replace("weight: 25", "weight: 100"))
    ran = promote_with(stack, PASSED)
    assert ran.returncode == 0, ran.stderr
    assert converged in stack.read_text()
    for _ in range(len(promote.LADDER) + 1):  # back up the ladder, then retire
        ran = promote_with(stack, FIRST_PASSED, evaluated=None)
        assert ran.returncode == 0, ran.stderr
    assert stack.read_text().endswith(retired)
    _, config = load_stack_file(stack)
    assert config.models[0].revision == stack_variants.CANARY_REVISION
    assert config.models[0].autoscaling.min_replicas == 2


def test_the_promoted_image_is_the_revision_image_whole(stack_dir: Path) -> None:
    """A revision's image is whole (a key it leaves out is the default, not the model's): in a stack that extends
    prod, the promoted model must not keep a digest of prod's image, so the command nulls it."""
    prod = stack_dir / "Pulumi.prod.yaml"
    digest = "sha256:" + "a" * 64
    prod.write_text(prod.read_text().replace("      replicas: 2\n",
                                             f"      replicas: 2\n      image:\n        digest: \"{digest}\"\n"))
    stack = stack_variants.write(stack_dir, "prod-image", {"gpuNodeGroup": stack_variants.ROOM_FOR_TWO, "models": [{
        "name": MODEL, "revisions": [{"name": "stable", "weight": 0},
                                     {"name": "canary", "weight": 100, "image": {"tag": "v0.34.0"}}]}]})
    _, before = load_stack_file(stack)
    assert before.models[0].image.digest == digest
    # Converge, back up the ladder, retire (no eval: an image bump).
    for report in (PASSED, *[FIRST_PASSED] * (len(promote.LADDER) + 1)):
        ran = promote_with(stack, report, evaluated=None)
        assert ran.returncode == 0, ran.stderr
    _, after = load_stack_file(stack)
    assert after.models[0].revisions == []
    assert (after.models[0].image.tag, after.models[0].image.digest) == ("v0.34.0", None)


@pytest.mark.parametrize(("report", "says"), [
    ({**PASSED, "revision": "stable"}, "not llama-70b's revision 'canary'"),
    ({**PASSED, "model": "llama-8b"}, "checked model 'llama-8b'"),
    ({"model": MODEL, "revision": "canary"}, "has no passed"),
    ({**PASSED, "passed": "yes"}, "passed as true or false"),
    ("not json at all\n", "is not JSON"),
    ("[1, 2]", "holds no JSON object"),
])
def test_a_mismatched_or_malformed_report_is_refused(stack: Path, report: dict | str, says: str) -> None:
    before = stack.read_text()
    ran = promote_with(stack, report)
    assert ran.returncode == 2
    assert len(ran.stderr.splitlines()) == 1 and says in ran.stderr, ran.stderr
    assert stack.read_text() == before


def test_the_job_log_is_read_from_its_last_line(stack: Path) -> None:
    """The Job's log ends in `{"verification": {...}}` (llm_serving/verification/probe.py main); a saved log works."""
    report = {**fresh(stack, PASSED), "verdict": "pass"}  # type: ignore[dict-item]
    log = "PASS  canary  models\n\nverdict: PASS\n" + json.dumps({"verification": report})
    assert promote_with(stack, log + "\n").returncode == 0
    assert weights(stack) == [75, 25]


def test_a_layout_the_edit_cannot_read_writes_nothing(stack: Path) -> None:
    stack.write_text(stack.read_text().replace("weight: 10", "weight: !!int '10'"))
    before = stack.read_text()
    ran = promote_with(stack, PASSED)
    assert ran.returncode == 2 and "layout defeated the edit" in ran.stderr
    assert stack.read_text() == before


def test_an_edit_that_does_not_validate_writes_nothing(stack: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The result is validated as load_stack_file validates it before it is written."""
    real = promote.environment.validate
    calls = []
    reports = fresh(stack, PASSED), fresh(stack, EVAL_PASSED)  # before validate refuses every later load

    def refuse_the_edit(resolved):
        calls.append(resolved)
        if len(calls) > 1:
            raise ConfigError([promote.Problem("models", "refused", None, "valid")])
        return real(resolved)

    monkeypatch.setattr(promote.environment, "validate", refuse_the_edit)
    before = stack.read_text()
    ran = promote_with(stack, reports[0], evaluated=reports[1])  # type: ignore[arg-type]
    assert ran.returncode == 2 and "after the edit (nothing was written): refused" in ran.stderr
    assert stack.read_text() == before


def test_revisions_of_the_extended_stack_are_promoted_there(stack_dir: Path) -> None:
    clone = stack_variants.write(stack_dir, "clone-of-revisions", {}, extends="prod-revisions")
    stack_variants.prod_with_two_revisions(stack_dir)
    ran = promote_with(clone, PASSED)
    assert ran.returncode == 2 and "promote the stack that lists" in ran.stderr


def test_read_report_names_the_file() -> None:
    with pytest.raises(ConfigError, match="cannot be read"):
        promote.read_report(Path("/nonexistent/report.json"))


def test_a_promoted_model_that_would_run_something_else_writes_nothing(stack_dir: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The check after the retirement: without the nulls above, prod's digest would survive under the revision's
    tag, and the command names the field instead of writing it."""
    prod = stack_dir / "Pulumi.prod.yaml"
    prod.write_text(prod.read_text().replace("      replicas: 2\n", "      replicas: 2\n      image:\n        digest: "
                                             f"\"sha256:{'a' * 64}\"\n"))
    stack = stack_variants.write(stack_dir, "prod-image", {"gpuNodeGroup": stack_variants.ROOM_FOR_TWO, "models": [{
        "name": MODEL, "revisions": [{"name": "stable", "weight": 0},
                                     {"name": "canary", "weight": 100, "image": {"tag": "v0.34.0"}}]}]})
    monkeypatch.setattr(promote, "_resolved_entry", lambda path, model: {})
    for report in (PASSED, *[FIRST_PASSED] * len(promote.LADDER)):  # converge, back up the ladder
        assert promote_with(stack, report, evaluated=None).returncode == 0
    before = stack.read_text()
    ran = promote_with(stack, FIRST_PASSED, evaluated=None)
    assert ran.returncode == 2 and "would not run what the revision ran" in ran.stderr and '"image"' in ran.stderr
    assert stack.read_text() == before


def test_a_report_of_another_deploy_is_refused(stack: Path) -> None:
    """A gate's report vouches for what its Job checked (its `deployed` fingerprint): the report of the step before,
    or one from before the `up` of the file being edited, names another deploy and moves nothing."""
    stale = fresh(stack, PASSED)
    assert promote_with(stack, stale).returncode == 0  # 10 -> 25, written; its up has not run yet
    before = stack.read_text()
    again = promote_with(stack, stale)
    assert again.returncode == 2 and "--report: is the verification of another deploy" in again.stderr
    stale_eval = {"eval": {**EVAL_PASSED["eval"], "deployed": "0" * 12}}
    other = promote_with(stack, PASSED, evaluated=stale_eval)
    assert other.returncode == 2 and "--eval-report: is the eval of another deploy" in other.stderr
    unsaid = promote_with(stack, {**PASSED, "deployed": None})
    assert unsaid.returncode == 2 and "(deployed not said)" in unsaid.stderr
    assert stack.read_text() == before
