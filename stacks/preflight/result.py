"""What one preflight check found, and the three ways to print a run: a table, markdown, JSON.

A check either passes, fails (the up would fail or misbehave: the reason and the fix say why and
what to change), or could not check (an API error, a missing permission, a timeout): never a pass.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from enum import StrEnum


class Outcome(StrEnum):
    PASS = "pass"
    FAIL = "fail"
    COULD_NOT_CHECK = "could not check"


@dataclass(frozen=True)
class Finding:
    """One line of the report: which check, its outcome, why, and what to do about it."""

    check: str  # stable id, e.g. "cluster.version"; the docs' table lists every one
    outcome: Outcome
    reason: str
    fix: str = ""  # the config key, the command or the doc section; empty on a pass


def passed(check: str, reason: str) -> Finding:
    return Finding(check, Outcome.PASS, reason)


def failed(check: str, reason: str, fix: str) -> Finding:
    return Finding(check, Outcome.FAIL, reason, fix)


def unknown(check: str, reason: str, fix: str) -> Finding:
    return Finding(check, Outcome.COULD_NOT_CHECK, reason, fix)


def counts(findings: Iterable[Finding]) -> dict[Outcome, int]:
    found = {outcome: 0 for outcome in Outcome}
    for finding in findings:
        found[finding.outcome] += 1
    return found


def exit_code(findings: Iterable[Finding]) -> int:
    """1 when any check failed; a could-not-check alone does not block (its line says what to verify)."""
    return 1 if any(f.outcome is Outcome.FAIL for f in findings) else 0


def summary(stack: str, findings: list[Finding]) -> str:
    found = counts(findings)
    return (f"preflight {stack}: {found[Outcome.PASS]} pass, {found[Outcome.FAIL]} fail, "
            f"{found[Outcome.COULD_NOT_CHECK]} could not check")


def table(stack: str, findings: list[Finding]) -> str:
    """One line per check (outcome, id, reason), the fix indented below a non-pass, then the summary."""
    width = max([len(f.check) for f in findings] + [5])
    lines = []
    for f in findings:
        lines.append(f"{f.outcome.value:<15}  {f.check:<{width}}  {f.reason}")
        if f.fix:
            lines.append(f"{'':<15}  {'':<{width}}  fix: {f.fix}")
    lines.append(summary(stack, findings))
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(stack: str, findings: list[Finding]) -> str:
    """The same report as a markdown table, for a GitHub job summary."""
    lines = [f"### {summary(stack, findings)}", "", "| outcome | check | reason | fix |", "|---|---|---|---|"]
    lines += [f"| {f.outcome.value} | `{f.check}` | {_cell(f.reason)} | {_cell(f.fix)} |" for f in findings]
    return "\n".join(lines) + "\n"


def to_json(stack: str, findings: list[Finding]) -> str:
    found = counts(findings)
    document = {
        "stack": stack,
        "summary": {outcome.value: found[outcome] for outcome in Outcome},
        "exitCode": exit_code(findings),
        "checks": [{**asdict(f), "outcome": f.outcome.value} for f in findings],
    }
    return json.dumps(document, indent=2) + "\n"
