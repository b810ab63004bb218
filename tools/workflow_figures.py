"""The generated tables of docs/operations.md about the GitHub workflows: every job's trigger, permissions,
environment, the variables and secrets it reads and its concurrency, read from .github/workflows/*.yml; and
zizmor's result over them, read from security/zizmor-result.yaml, which `make scan` (tools/scan.py) writes
from a real zizmor run and compares on every run (tests/test_workflows.py re-runs zizmor when it is installed).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from stacks.config.files import PROJECT_DIR
from tools.doc_facts import Facts

WORKFLOWS = PROJECT_DIR / ".github" / "workflows"
ZIZMOR_RESULT_FILE = PROJECT_DIR / "security" / "zizmor-result.yaml"
READS = re.compile(r"\$\{\{[^}]*?\b(vars|secrets)\.([A-Za-z_][A-Za-z0-9_]*)")


def load_workflow(path: Path) -> dict[str, Any]:
    """A workflow file; PyYAML reads the `on:` key as True, so it gets its name back."""
    document = yaml.safe_load(path.read_text())
    document["on"] = document.pop(True, document.get("on"))
    return document


def _code(value: str) -> str:
    return f"`{value}`"


def _triggers(on: Any) -> str:
    if isinstance(on, str):
        return _code(on)
    parts = []
    for event, spec in (on or {}).items():
        detail = ""
        if isinstance(spec, dict) and spec.get("branches"):
            detail = f" ({', '.join(spec['branches'])})"
        elif isinstance(spec, dict) and spec.get("workflows"):
            detail = f" of {', '.join(spec['workflows'])}"
        elif isinstance(spec, list) and spec and isinstance(spec[0], dict) and "cron" in spec[0]:
            detail = f" ({spec[0]['cron']})"
        parts.append(_code(event) + detail)
    return ", ".join(parts)


def _permissions(job: dict[str, Any], workflow: dict[str, Any]) -> str:
    granted = job.get("permissions", workflow.get("permissions"))
    if granted is None:
        return "GitHub's default (none set)"
    if isinstance(granted, str):
        return _code(granted)
    return ", ".join(f"{scope}: {level}" for scope, level in sorted(granted.items())) or "none"


def _reads(job: dict[str, Any], workflow: dict[str, Any]) -> str:
    """The `vars.*` and `secrets.*` a job's expressions read (the workflow's own `env:` included)."""
    text = json.dumps([job, workflow.get("env", {})])
    found = sorted({f"{kind}.{name}" for kind, name in READS.findall(text)})
    return ", ".join(_code(f) for f in found) or "none"


def _concurrency(job: dict[str, Any], workflow: dict[str, Any]) -> str:
    group = job.get("concurrency", workflow.get("concurrency"))
    if group is None:
        return "none"
    if isinstance(group, str):
        return f"{_code(group)}, pending runs replaced"
    cancel = group.get("cancel-in-progress", False)
    return f"{_code(group['group'])}, {'cancels the running one' if cancel is True else 'never cancels'}"


def _cell(value: str) -> str:
    # `||` inside an expression would split the Markdown table's cell.
    return value.replace("|", "\\|")


def workflow_rows(directory: Path = WORKFLOWS) -> list[tuple[str, ...]]:
    """(workflow, trigger, job, permissions, environment, reads, concurrency) per job, in file order."""
    rows: list[tuple[str, ...]] = []
    for path in sorted(directory.glob("*.yml")):
        workflow = load_workflow(path)
        for job_id, job in workflow["jobs"].items():
            environment = job.get("environment", "none")
            if isinstance(environment, dict):
                environment = environment.get("name", "none")
            calls = f" (calls {Path(job['uses']).name})" if "uses" in job else ""
            rows.append((path.name, _triggers(workflow["on"]), _code(job_id) + calls, _permissions(job, workflow),
                         _code(environment) if environment != "none" else "none", _reads(job, workflow),
                         _concurrency(job, workflow)))
    return rows


def workflow_table(facts: Facts) -> str:
    lines = ["", "| workflow | trigger | job | permissions | environment | reads | concurrency |",
             "|---|---|---|---|---|---|---|"]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in workflow_rows()]
    return "\n".join([*lines, ""])


def zizmor_result(facts: Facts) -> str:
    """zizmor's findings as the last `make scan` recorded them, each with whether the reviewed list accepts it."""
    result = yaml.safe_load(ZIZMOR_RESULT_FILE.read_text())
    findings = result["findings"]
    accepted = sum(1 for f in findings if f["accepted"])
    lines = ["", f"zizmor {result['zizmor']} (`{' '.join(result['command'])}`): {len(findings)} findings, "
             f"{accepted} accepted in [security/zizmor-ignores.yaml](../security/zizmor-ignores.yaml), "
             f"{len(findings) - accepted} open.", ""]
    if findings:
        lines += ["| audit | severity | file | location | accepted |", "|---|---|---|---|---|"]
        lines += [f"| {f['audit']} | {f['severity']} | `{f['file']}` | `{f['where']}` | "
                  f"{'yes' if f['accepted'] else 'no'} |" for f in findings]
        lines.append("")
    return "\n".join(lines)


GENERATORS: dict[str, Callable[[Facts], str]] = {
    "workflow-table": workflow_table,
    "zizmor-result": zizmor_result,
}
