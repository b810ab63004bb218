"""`make scan`: Checkov over every stack's offline render and the workflows, and zizmor over the
workflows, each gated by a reviewed list of accepted findings.

Checkov and zizmor run from their own virtualenv (requirements-scan.txt), passed in as `--checkov`
and `--zizmor`, so the test suite never installs them. Every failed check must be covered by an entry
of security/checkov-skips.yaml (check id, stacks, resource patterns, reason), every zizmor finding by
one of security/zizmor-ignores.yaml (audit, file, location pattern, reason); an entry that covers
nothing is stale and fails the scan too, so a fixed finding cannot leave an unneeded exception behind.
zizmor's result must also equal security/zizmor-result.yaml, which docs/operations.md shows (`make
zizmor-result` rewrites it: `--zizmor-only --update-zizmor-result`).

Exit codes: 0 clean, 1 uncovered findings or stale entries, 2 a malformed list or a scanner run that
produced no results.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from stacks.config import files as stack_files
from stacks.offline import render

PROJECT_DIR = Path(__file__).resolve().parent.parent
SKIPS_FILE = PROJECT_DIR / "security" / "checkov-skips.yaml"
ZIZMOR_IGNORES_FILE = PROJECT_DIR / "security" / "zizmor-ignores.yaml"
ZIZMOR_RESULT_FILE = PROJECT_DIR / "security" / "zizmor-result.yaml"
WORKFLOWS_DIR = PROJECT_DIR / ".github" / "workflows"
WORKFLOWS = "workflows"  # the pseudo-stack name skip entries use for .github/workflows findings
CHECK_ID = re.compile(r"^CKV2?_[A-Z0-9]+_\d+$")
MIN_REASON_CHARS = 40


class SkipListError(ValueError):
    """The skip list is malformed; one message per problem."""


@dataclass(frozen=True)
class Skip:
    check: str
    stacks: tuple[str, ...]
    resources: tuple[str, ...]
    reason: str

    def applies_to(self, stack: str) -> bool:
        """`stacks` holds shell-style patterns (`prod*`, `*`), so a clone such as prod-eu is covered by
        prod's entries without editing this list."""
        return any(fnmatch.fnmatchcase(stack, pattern) for pattern in self.stacks)

    def covers(self, stack: str, finding: Finding) -> bool:
        return (finding.check == self.check and self.applies_to(stack)
                and any(fnmatch.fnmatchcase(finding.resource, pattern) for pattern in self.resources))


@dataclass(frozen=True)
class Finding:
    check: str
    name: str
    resource: str
    file: str


def parse_skips(document: Any, known_stacks: tuple[str, ...]) -> list[Skip]:
    """The skip list, or SkipListError naming each bad entry, field and value."""
    if not isinstance(document, list):
        raise SkipListError(f"the skip list must be a YAML list of entries, got {type(document).__name__}")
    problems: list[str] = []
    skips: list[Skip] = []
    allowed_stacks = (*known_stacks, WORKFLOWS)
    for index, entry in enumerate(document):
        where = f"entry {index}"
        if not isinstance(entry, dict):
            problems.append(f"{where}: must be a mapping with check, stacks, resources, reason")
            continue
        unknown = sorted(set(entry) - {"check", "stacks", "resources", "reason"})
        if unknown:
            problems.append(f"{where}: unknown keys {', '.join(unknown)}; allowed: check, stacks, resources, reason")
        check = entry.get("check")
        if not isinstance(check, str) or not CHECK_ID.match(check):
            problems.append(f"{where}.check: {check!r} is not a Checkov check id such as CKV_K8S_11")
        stacks = entry.get("stacks")
        if not isinstance(stacks, list) or not stacks or not all(
            isinstance(s, str) and any(fnmatch.fnmatchcase(known, s) for known in allowed_stacks) for s in stacks
        ):
            problems.append(f"{where}.stacks: {stacks!r}; expected a non-empty list of stack name patterns, each "
                            f"matching one of {', '.join(allowed_stacks)}")
        resources = entry.get("resources")
        if not isinstance(resources, list) or not resources or not all(isinstance(r, str) and r for r in resources):
            problems.append(f"{where}.resources: {resources!r}; expected a non-empty list of resource id patterns")
        reason = entry.get("reason")
        if not isinstance(reason, str) or len(reason.strip()) < MIN_REASON_CHARS:
            problems.append(f"{where}.reason: must say why the finding is accepted (at least {MIN_REASON_CHARS} "
                            "characters)")
        if not problems:  # (so each field passed its check above, which the type checker cannot follow)
            skips.append(Skip(check, tuple(stacks), tuple(resources),  # type: ignore[arg-type]
                              " ".join(reason.split())))  # type: ignore[union-attr]
    if problems:
        raise SkipListError("\n".join(problems))
    return skips


def failed_findings(report: Any) -> list[Finding]:
    """Failed checks from Checkov's JSON output (one report, or a list of reports per framework)."""
    reports = report if isinstance(report, list) else [report]
    found = []
    for one in reports:
        for failed in one.get("results", {}).get("failed_checks", []):
            found.append(Finding(failed["check_id"], failed["check_name"], failed["resource"],
                                 f"{failed['file_path']}:{'-'.join(map(str, failed['file_line_range']))}"))
    return found


def passed_count(report: Any) -> int:
    reports = report if isinstance(report, list) else [report]
    return sum(one.get("summary", {}).get("passed", 0) for one in reports)


def judge(findings: dict[str, list[Finding]], skips: list[Skip]) -> tuple[list[str], list[str]]:
    """(uncovered findings, stale entries) over `findings` keyed by stack name."""
    uncovered = [f"{stack}: {f.check} ({f.name}) on {f.resource} at {f.file}"
                 for stack, found in findings.items() for f in found
                 if not any(skip.covers(stack, f) for skip in skips)]
    stale = []
    for index, skip in enumerate(skips):
        for pattern in skip.stacks:
            scanned = [stack for stack in findings if fnmatch.fnmatchcase(stack, pattern)]
            if scanned and not any(skip.covers(stack, f) for stack in scanned for f in findings[stack]):
                stale.append(f"entry {index} ({skip.check} on {', '.join(skip.resources)}) covers nothing in "
                             f"{', '.join(scanned)}; remove {pattern} from it, or the entry")
    return uncovered, stale


def run_checkov(checkov: str, directory: Path, framework: str) -> Any:
    """Checkov's JSON report; --skip-download keeps it offline (no Prisma Cloud guideline fetch)."""
    completed = subprocess.run(
        [checkov, "--directory", str(directory), "--framework", framework, "--skip-download",
         "--output", "json", "--quiet", "--compact"],
        capture_output=True, text=True, check=False,
    )
    # Checkov exits 1 when a check fails; only unreadable output is a broken run.
    try:
        return json.loads(completed.stdout)
    except json.JSONDecodeError as error:
        raise RuntimeError(f"checkov on {directory} ({framework}) printed no JSON report "
                           f"(exit {completed.returncode}):\n{completed.stderr[-2000:]}") from error


# --- zizmor ---------------------------------------------------------------------------------------

ZIZMOR_AUDIT = re.compile(r"^[a-z][a-z0-9-]+$")


@dataclass(frozen=True)
class ZizmorFinding:
    audit: str  # zizmor's audit id, e.g. dangerous-triggers
    file: str  # relative to the project, e.g. .github/workflows/deploy.yml
    where: str  # the primary location's route, e.g. jobs.dev.uses
    line: int
    severity: str
    annotation: str


@dataclass(frozen=True)
class ZizmorIgnore:
    audit: str
    file: str
    where: tuple[str, ...]  # shell-style patterns over ZizmorFinding.where
    reason: str

    def covers(self, finding: ZizmorFinding) -> bool:
        return (finding.audit == self.audit and finding.file == self.file
                and any(fnmatch.fnmatchcase(finding.where, pattern) for pattern in self.where))


def parse_zizmor_ignores(document: Any) -> list[ZizmorIgnore]:
    """The zizmor ignore list, or SkipListError naming each bad entry, field and value."""
    if not isinstance(document, list):
        raise SkipListError(f"the ignore list must be a YAML list of entries, got {type(document).__name__}")
    problems: list[str] = []
    entries: list[ZizmorIgnore] = []
    for index, entry in enumerate(document):
        where = f"entry {index}"
        if not isinstance(entry, dict):
            problems.append(f"{where}: must be a mapping with audit, file, where, reason")
            continue
        before = len(problems)
        unknown = sorted(set(entry) - {"audit", "file", "where", "reason"})
        if unknown:
            problems.append(f"{where}: unknown keys {', '.join(unknown)}; allowed: audit, file, where, reason")
        audit = entry.get("audit")
        if not isinstance(audit, str) or not ZIZMOR_AUDIT.match(audit):
            problems.append(f"{where}.audit: {audit!r} is not a zizmor audit id such as dangerous-triggers")
        file = entry.get("file")
        if not isinstance(file, str) or not file.startswith(".github/"):
            problems.append(f"{where}.file: {file!r}; expected a path under .github/, e.g. .github/workflows/ci.yml")
        patterns = entry.get("where")
        if not isinstance(patterns, list) or not patterns or not all(isinstance(p, str) and p for p in patterns):
            problems.append(f"{where}.where: {patterns!r}; expected a non-empty list of location patterns "
                            "such as jobs.*.uses")
        reason = entry.get("reason")
        if not isinstance(reason, str) or len(reason.strip()) < MIN_REASON_CHARS:
            problems.append(f"{where}.reason: must say why the finding is accepted (at least {MIN_REASON_CHARS} "
                            "characters)")
        if len(problems) == before:  # (so each field passed its check above, which the type checker cannot follow)
            entries.append(ZizmorIgnore(audit, file, tuple(patterns),  # type: ignore[arg-type]
                                        " ".join(reason.split())))  # type: ignore[union-attr]
    if problems:
        raise SkipListError("\n".join(problems))
    return entries


def _route(location: dict[str, Any]) -> str:
    parts = []
    for step in location["symbolic"]["route"]["route"]:
        ((kind, value),) = step.items()
        parts.append(f"[{value}]" if kind == "Index" else str(value))
    return ".".join(parts).replace(".[", "[")


def zizmor_findings(report: Any, project_dir: Path = PROJECT_DIR) -> list[ZizmorFinding]:
    """Findings from zizmor's JSON (v1) output, at their primary location."""
    found = []
    for finding in report:
        primary = next(loc for loc in finding["locations"] if loc["symbolic"]["kind"] == "Primary")
        path = Path(primary["symbolic"]["key"]["Local"]["verbatim_path"])
        if path.is_absolute():
            path = path.relative_to(project_dir)
        found.append(ZizmorFinding(
            finding["ident"], path.as_posix(), _route(primary),
            primary["concrete"]["location"]["start_point"]["row"] + 1,
            finding["determinations"]["severity"], primary["symbolic"].get("annotation", "")))
    return found


def judge_zizmor(findings: list[ZizmorFinding], ignores: list[ZizmorIgnore]) -> tuple[list[str], list[str]]:
    """(uncovered findings, stale entries)."""
    uncovered = [f"{f.file}:{f.line}: {f.audit} ({f.severity}) at {f.where}: {f.annotation}"
                 for f in findings if not any(entry.covers(f) for entry in ignores)]
    stale = [f"entry {index} ({entry.audit} in {entry.file} at {', '.join(entry.where)}) covers nothing; remove it"
             for index, entry in enumerate(ignores) if not any(entry.covers(f) for f in findings)]
    return uncovered, stale


ZIZMOR_COMMAND = ["zizmor", "--offline", "--no-config", "--no-ignores", "--persona", "regular", "--format", "json",
                  "--no-progress", ".github/"]


def zizmor_version(zizmor: str) -> str:
    """The version `zizmor --version` prints (`zizmor 1.32.0`)."""
    completed = subprocess.run([zizmor, "--version"], capture_output=True, text=True, check=False)
    return completed.stdout.split()[-1] if completed.stdout.split() else "unknown"


def zizmor_result_document(version: str, findings: list[ZizmorFinding], ignores: list[ZizmorIgnore]) -> str:
    """What security/zizmor-result.yaml holds: the run's findings without line numbers (which move with every
    edit), sorted, each with whether the reviewed list accepts it. docs/operations.md shows it. (YAML beside the
    reviewed lists: the JSON files under security/ are IAM policy documents, and a test reads them all as such.)"""
    rows = sorted({(f.audit, f.file, f.where, f.severity, any(entry.covers(f) for entry in ignores))
                   for f in findings})
    document = {"zizmor": version, "command": ZIZMOR_COMMAND,
                "findings": [{"audit": a, "file": f, "where": w, "severity": s, "accepted": ok}
                             for a, f, w, s, ok in rows]}
    header = "# zizmor's result over .github/, written by `make zizmor-result` (tools/scan.py); `make scan` compares.\n"
    return header + yaml.safe_dump(document, sort_keys=False, width=120)


def run_zizmor(zizmor: str, project_dir: Path = PROJECT_DIR) -> Any:
    """zizmor's JSON report over .github/. --offline: no network audits and no GitHub token;
    --no-config and --no-ignores: no zizmor.yml or inline `# zizmor: ignore` comment can hide a finding
    from the reviewed list; regular persona, the audits zizmor recommends for every repository."""
    completed = subprocess.run([zizmor, *ZIZMOR_COMMAND[1:]], cwd=project_dir, capture_output=True, text=True,
                               check=False)
    # zizmor exits non-zero when it finds something; only unreadable output is a broken run.
    try:
        return json.loads(completed.stdout)
    except json.JSONDecodeError as error:
        raise RuntimeError(f"zizmor printed no JSON report (exit {completed.returncode}):\n"
                           f"{completed.stderr[-2000:]}") from error


def scan_workflows(zizmor: str, update_result: bool = False) -> tuple[int, list[str]]:
    """(exit code, lines) of the zizmor half of `make scan`. The run's result must equal
    security/zizmor-result.yaml (the docs' table of it); `update_result` rewrites the file instead."""
    try:
        ignores = parse_zizmor_ignores(yaml.safe_load(ZIZMOR_IGNORES_FILE.read_text()))
    except SkipListError as error:
        return 2, [f"{ZIZMOR_IGNORES_FILE.relative_to(PROJECT_DIR)}:", str(error)]
    try:
        findings = zizmor_findings(run_zizmor(zizmor))
    except RuntimeError as error:
        return 2, [str(error)]
    uncovered, stale = judge_zizmor(findings, ignores)
    covered = len(findings) - len(uncovered)
    lines = [f"workflows (zizmor): {len(findings)} findings, {covered} of them accepted in the ignore list"]
    result = zizmor_result_document(zizmor_version(zizmor), findings, ignores)
    recorded = ZIZMOR_RESULT_FILE.read_text() if ZIZMOR_RESULT_FILE.exists() else ""
    if update_result and result != recorded:
        ZIZMOR_RESULT_FILE.write_text(result)
        lines.append(f"{ZIZMOR_RESULT_FILE.relative_to(PROJECT_DIR)} updated: run `make docs` and commit both")
    differs = [f"{ZIZMOR_RESULT_FILE.relative_to(PROJECT_DIR)} differs from this run (the docs show that file): "
               "`make zizmor-result`, then `make docs`"] if result != recorded and not update_result else []
    for title, problems in (("zizmor findings no ignore entry covers (fix them, or add a reviewed entry):",
                             uncovered), ("Stale zizmor ignore entries:", stale), ("Recorded zizmor result:", differs)):
        if problems:
            lines += [title, *(f"  - {p}" for p in problems)]
    return (1 if uncovered or stale or differs else 0), lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.scan", description=__doc__.splitlines()[0])
    parser.add_argument("--checkov", required=True, help="the checkov executable (make scan: .venv-scan/bin)")
    parser.add_argument("--zizmor", required=True, help="the zizmor executable (make scan: .venv-scan/bin)")
    parser.add_argument("--zizmor-only", action="store_true", help="only the zizmor half (no renders, no Checkov)")
    parser.add_argument("--update-zizmor-result", action="store_true",
                        help="rewrite security/zizmor-result.yaml from this run instead of comparing")
    parser.add_argument("stacks", nargs="*", help="stack names (default: every Pulumi.<stack>.yaml)")
    args = parser.parse_args(argv)
    if args.zizmor_only:
        code, zizmor_lines = scan_workflows(args.zizmor, args.update_zizmor_result)
        sys.stdout.write("\n".join(zizmor_lines) + "\n")
        return code
    stacks = tuple(args.stacks) or stack_files.stack_names()
    try:
        skips = parse_skips(yaml.safe_load(SKIPS_FILE.read_text()), stack_files.stack_names())
    except SkipListError as error:
        sys.stderr.write(f"{SKIPS_FILE.relative_to(PROJECT_DIR)}:\n{error}\n")
        return 2
    findings: dict[str, list[Finding]] = {}
    lines = []
    with tempfile.TemporaryDirectory(prefix="llm-serving-scan-") as scratch:
        targets: list[tuple[str, Path, str]] = []
        for stack in stacks:
            out = Path(scratch) / stack
            render.write(render.render_stack(stack_files.stack_file_path(stack)), out)
            (out / "resources.json").unlink()  # Checkov reads only the manifests
            targets.append((stack, out, "kubernetes"))
        targets.append((WORKFLOWS, WORKFLOWS_DIR, "github_actions"))
        for name, directory, framework in targets:
            try:
                report = run_checkov(args.checkov, directory, framework)
            except RuntimeError as error:
                sys.stderr.write(f"{error}\n")
                return 2
            findings[name] = failed_findings(report)
            covered = sum(1 for f in findings[name] if any(s.covers(name, f) for s in skips))
            lines.append(f"{name} ({framework}): {passed_count(report)} passed, {len(findings[name])} failed, "
                         f"{covered} of them accepted in the skip list")
    uncovered, stale = judge(findings, skips)
    sys.stdout.write("\n".join(lines) + "\n")
    for title, problems in (("Findings no skip entry covers (fix them, or add a reviewed entry):", uncovered),
                            ("Stale skip entries:", stale)):
        if problems:
            sys.stdout.write(title + "\n" + "".join(f"  - {p}\n" for p in problems))
    zizmor_code, zizmor_lines = scan_workflows(args.zizmor, args.update_zizmor_result)
    sys.stdout.write("\n".join(zizmor_lines) + "\n")
    if zizmor_code == 2:
        return 2
    return 1 if uncovered or stale or zizmor_code else 0


if __name__ == "__main__":
    sys.exit(main())
