"""`python -m stacks promote`: a second revision's rollout written into the stack file from its gate's report, one
step at a time (the next weight, the retirement of the first revision after 100, weight 0 on a failed gate), the
file's comments and layout kept, a report of another model or revision refused, and every result a valid stack.

The stack is a copy of prod serving llama-70b as two revisions at 90/10 (stack_variants.prod_with_two_revisions);
nothing is rendered: validating with load_stack_file is what the command promises."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llm_serving.platform.args import fields_of
from llm_serving.serving import ModelArgs
from llm_serving.stack import revisions
from stacks.cli import promote
from stacks.config.problems import ConfigError
from stacks.environment import load_stack_file
from tests.support import stack_variants
from tests.support.cli import run_stacks

MODEL = "llama-70b"
PASSED = {"model": MODEL, "revision": "canary", "passed": True}
FAILED = {"model": MODEL, "revision": "canary", "passed": False,
          "failures": ["FAIL  canary  load: time to first token p95 3.4 s > objective 2 s"]}
# The variant as PyYAML writes it, indentless sequences and all.
BEFORE = """\
  llm-serving:models:
  - name: llama-70b
    revisions:
    - name: stable
      weight: 90
    - name: canary
      revision: '3333333333333333333333333333333333333333'
      weight: 10
"""


@pytest.fixture
def stack(stack_dir: Path) -> Path:
    path = stack_variants.prod_with_two_revisions(stack_dir)
    assert path.read_text().endswith(BEFORE)  # the layout the expected texts below edit
    return path


def promote_with(path: Path, report: dict | str, *options: str):
    report_file = path.parent / "report.json"
    report_file.write_text(report if isinstance(report, str) else json.dumps(report))
    return run_stacks("promote", str(path), MODEL, "--report", str(report_file), *options)


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
    ran = promote_with(stack, FAILED)
    assert ran.returncode == 0, ran.stderr
    assert stack.read_text() == before.replace("weight: 10", "weight: 0").replace("weight: 90", "weight: 100")
    assert weights(stack) == [100, 0]
    assert "canary 10 -> 0 % (stable 100 %): the gate failed: FAIL  canary  load: time to first token" in ran.stdout
    assert "rolled back" in ran.stdout
    # Already at 0: nothing to write, exit 1, the file as it was.
    rolled_back = stack.read_text()
    again = promote_with(stack, FAILED)
    assert (again.returncode, stack.read_text()) == (1, rolled_back)
    assert "nothing to do" in again.stdout


def test_the_ladder_then_the_retirement_of_the_first_revision(stack: Path) -> None:
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
    assert "promote again to make canary the model's own and retire stable" in said[-1]
    assert promote_with(stack, FAILED).returncode == 0
    assert weights(stack) == [100, 0]  # a failure at 100 rolls back too
    for _ in promote.LADDER:
        promote_with(stack, PASSED)
    assert weights(stack) == [0, 100]
    ran = promote_with(stack, PASSED)
    assert ran.returncode == 0, ran.stderr
    assert "canary is the model's own now (revision); stable and models[llama-70b].revisions removed" in ran.stdout
    assert stack.read_text().endswith("  llm-serving:models:\n  - name: llama-70b\n"
                                      "    revision: '3333333333333333333333333333333333333333'\n")
    _, after = load_stack_file(stack)
    promoted = next(m for m in after.models if m.name == MODEL)
    # The model now runs, under its own name, what the second revision ran: weights, image, engine flags, all of it.
    assert promoted.revisions == []
    assert promoted.revision == stack_variants.CANARY_REVISION
    for name in set(fields_of(ModelArgs)) - {"name", "revisions", "allow_workload_replacement"}:
        assert getattr(promoted, name) == getattr(ran_as, name), name
    # No second revision any more: a report of one is refused.
    assert promote_with(stack, PASSED).returncode == 2


def test_steps_from_the_command_line(stack: Path) -> None:
    assert promote_with(stack, PASSED, "--steps", "5,100").returncode == 0
    assert weights(stack) == [0, 100]
    for bad in ("10,50", "50,25,100", "0,100", "10,x,100"):
        ran = promote_with(stack, PASSED, "--steps", bad)
        assert ran.returncode == 2 and "--steps: expected rising percentages" in ran.stderr, bad


COMMENTED = """\
  llm-serving:models:
  # llama-70b: the new commit proves itself beside the serving one (issue #41).
  - name: llama-70b
    revision: 1605565b47bb9346c5515c34102e054115b4f98b  # the serving commit
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
  llm-serving:models:
    - name: llama-70b
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


# What the retirement leaves of each layout: the revisions block goes with the comment lines right above it (they
# speak of it); every other line stays where it was, the model's `revision:` line replaced in place.
COMMENTED_RETIRED = """\
  llm-serving:models:
  # llama-70b: the new commit proves itself beside the serving one (issue #41).
  - name: llama-70b
    revision: '3333333333333333333333333333333333333333'
    autoscaling:   # kept
      minReplicas: 2
  # after the models
"""
INDENTED_RETIRED = """\
  llm-serving:models:
    - name: llama-70b
      revision: '3333333333333333333333333333333333333333'
      autoscaling:
        minReplicas: 2
"""


@pytest.mark.parametrize(("layout", "retired"), [(COMMENTED, COMMENTED_RETIRED), (INDENTED, INDENTED_RETIRED)],
                         ids=["flow-entries", "indented-block"])
def test_comments_and_layout_are_kept(stack: Path, layout: str, retired: str) -> None:
    stack.write_text(stack.read_text().replace(BEFORE, layout))
    assert weights(stack) == [90, 10]
    assert promote_with(stack, PASSED).returncode == 0
    assert stack.read_text().endswith(layout.replace("weight: 90", "weight: 75").replace("weight: 10", "weight: 25"))
    assert weights(stack) == [75, 25]
    stack.write_text(stack.read_text().replace("weight: 75", "weight: 0").replace("weight: 25", "weight: 100"))
    ran = promote_with(stack, PASSED)
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
    ran = promote_with(stack, PASSED)
    assert ran.returncode == 0, ran.stderr
    _, after = load_stack_file(stack)
    assert (after.models[0].image.tag, after.models[0].image.digest) == ("v0.34.0", None)


@pytest.mark.parametrize(("report", "says"), [
    ({**PASSED, "revision": "stable"}, "not llama-70b's second revision 'canary'"),
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
    log = "PASS  canary  models\n\nverdict: PASS\n" + json.dumps({"verification": {**PASSED, "verdict": "pass"}})
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

    def refuse_the_edit(resolved):
        calls.append(resolved)
        if len(calls) > 1:
            raise ConfigError([promote.Problem("models", "refused", None, "valid")])
        return real(resolved)

    monkeypatch.setattr(promote.environment, "validate", refuse_the_edit)
    before = stack.read_text()
    ran = promote_with(stack, PASSED)
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
    before = stack.read_text()
    ran = promote_with(stack, PASSED)
    assert ran.returncode == 2 and "would not run what the revision ran" in ran.stderr and '"image"' in ran.stderr
    assert stack.read_text() == before
