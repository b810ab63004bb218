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
    """A passing gate at 10 %, a failing one, and the passing gate at 100 % that retires the first revision."""
    model = "llama-70b"
    passed = promote.set_weights(EXAMPLE, model, (100 - promote.LADDER[1], promote.LADDER[1]))
    failed = promote.set_weights(EXAMPLE, model, (100, 0))
    at_100 = promote.set_weights(EXAMPLE, model, (0, 100))
    second = yaml.safe_load(at_100)["config"]["llm-serving:models"][0]["revisions"][1]
    retired = promote.retire_first(at_100, model, promote.revision_fields(second))
    return "\n".join([
        _diff(EXAMPLE, passed, f"The gate passed at {promote.LADDER[0]} %"),
        _diff(EXAMPLE, failed, f"The gate failed at {promote.LADDER[0]} %"),
        _diff(at_100, retired, "The gate passed at 100 %: canary becomes the model's own"),
    ])


GENERATORS: dict[str, Callable[[Facts], str]] = {
    "promote-ladder": ladder,
    "promote-steps": steps,
}
