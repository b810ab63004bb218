"""The generated blocks of docs/operations.md about `python -m stacks promote`: its ladder of weights
(stacks/cli/promote.py LADDER), and what each kind of step writes into a stack file, as the diff the pull request
shows, made by the command's own edits of the docs' example."""

from __future__ import annotations

import difflib
from collections.abc import Callable

import yaml

from stacks.cli import promote
from tools.doc_facts import Facts

# The docs' example (docs/operations.md, "Rolling out a revision side by side"), as a stack file holds it.
EXAMPLE = """\
config:
  llm-serving:models:
    - name: llama-70b
      revision: 1605565b47bb9346c5515c34102e054115b4f98b
      maxModelLen: 16384
      revisions:
        - {name: stable, weight: 90}
        # the Hub's new commit
        - {name: canary, weight: 10, revision: '3333333333333333333333333333333333333333'}
      autoscaling:
        minReplicas: 2
"""


def ladder(facts: Facts) -> str:
    return " → ".join(f"{step} %" for step in promote.LADDER)


def _diff(before: str, after: str, title: str) -> str:
    lines = difflib.unified_diff(before.splitlines(), after.splitlines(), "Pulumi.prod.yaml", "Pulumi.prod.yaml",
                                 n=1, lineterm="")
    return f"{title}:\n\n```diff\n" + "\n".join(lines) + "\n```\n"


def steps(facts: Facts) -> str:
    """A passing step at 10 %, a failing one, and the steps after 100 %: the first revision converged onto the second
    while it takes nothing, the first step of the requests' way back to it, and (from 100/0) the retirement."""
    model = "llama-70b"
    passed = promote.set_weights(EXAMPLE, model, (100 - promote.LADDER[1], promote.LADDER[1]))
    failed = promote.set_weights(EXAMPLE, model, (100, 0))
    at_100 = promote.set_weights(EXAMPLE, model, (0, 100))
    entries = yaml.safe_load(at_100)["config"]["llm-serving:models"][0]["revisions"]
    converged = promote.converge_first(at_100, model, promote.revision_fields(entries[1]))
    back = promote.set_weights(converged, model, (promote.LADDER[0], 100 - promote.LADDER[0]))
    moved_back = promote.set_weights(converged, model, (100, 0))
    first = yaml.safe_load(moved_back)["config"]["llm-serving:models"][0]["revisions"][0]
    retired = promote.retire_first(moved_back, model, promote.revision_fields(first))
    return "\n".join([
        _diff(EXAMPLE, passed, f"The gates passed at {promote.LADDER[0]} %"),
        _diff(EXAMPLE, failed, f"A gate failed at {promote.LADDER[0]} %"),
        _diff(at_100, converged, "The gates passed at 100 %: stable converges onto canary, at weight 0"),
        _diff(converged, back, "stable's own gate passed on its rolled pods: the requests move back to it, up the "
              "same ladder"),
        _diff(moved_back, retired, "stable at 100 %, its gate passed: the next step retires, what canary ran is the "
              "model's own"),
    ])


GENERATORS: dict[str, Callable[[Facts], str]] = {
    "promote-ladder": ladder,
    "promote-steps": steps,
}
