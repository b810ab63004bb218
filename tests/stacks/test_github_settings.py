"""`python -m stacks check-github`: the repository's environments and main's branch protection, read from a local
server playing GitHub's REST API on 127.0.0.1, compared with the set-up checklist."""

from __future__ import annotations

import copy
import io
import json
import re
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from stacks import github_settings
from stacks.config.files import PROJECT_DIR
from stacks.config.problems import ConfigError
from tests.support.local_http import serving

REPO = "acme/llm-serving"
REVIEWERS = {"type": "required_reviewers", "prevent_self_review": True,
             "reviewers": [{"type": "Team", "reviewer": {"slug": "platform"}}]}
MAIN_ONLY = {"protected_branches": False, "custom_branch_policies": True}


def _environment(want: github_settings.Environment) -> dict[str, Any]:
    return {"name": want.name, "protection_rules": [REVIEWERS] if want.reviewers else [],
            "deployment_branch_policy": MAIN_ONLY if want.main_only else None, "can_admins_bypass": not want.reviewers}


def _settings() -> dict[str, Any]:
    """A repository set up exactly as the checklist says."""
    paths: dict[str, Any] = {}
    for want in github_settings.expected_environments():
        base = f"/repos/{REPO}/environments/{want.name}"
        paths[base] = _environment(want)
        paths[f"{base}/deployment-branch-policies"] = {"total_count": 1,
                                                       "branch_policies": [{"name": "main", "type": "branch"}]}
        paths[f"{base}/secrets"] = {"total_count": 0, "secrets": []}
        paths[f"{base}/variables"] = {"total_count": 2, "variables": [
            {"name": "AWS_ROLE_ARN", "value": f"arn:aws:iam::123456789012:role/{want.name}"},
            {"name": "PULUMI_TEAM", "value": f"llm-serving-{want.name}"}]}
    paths[f"/repos/{REPO}/actions/secrets"] = {"total_count": 0, "secrets": []}
    paths[f"/repos/{REPO}/actions/organization-secrets"] = {"total_count": 0, "secrets": []}
    paths[f"/repos/{REPO}/branches/main/protection"] = {
        "required_pull_request_reviews": {"required_approving_review_count": 1, "require_last_push_approval": True},
        "required_status_checks": {"strict": True, "contexts": ["test"], "checks": [{"context": "test"}]},
        "enforce_admins": {"enabled": True}, "allow_force_pushes": {"enabled": False},
        "allow_deletions": {"enabled": False}}
    return paths


def _check(paths: dict[str, Any], token: str = "t0ken") -> tuple[int, str, list[dict[str, str]]]:
    seen: list[dict[str, str]] = []

    class GitHub(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append({"path": self.path, "auth": self.headers.get("Authorization", ""),
                         "version": self.headers.get("X-GitHub-Api-Version", "")})
            body = paths.get(self.path)
            status = 200 if body is not None else 404
            data = json.dumps(body if body is not None else {"message": "Not Found"}).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    out = io.StringIO()
    with serving(ThreadingHTTPServer(("127.0.0.1", 0), GitHub)) as server:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        status = github_settings.main([REPO, "--api-url", url], environ={"GITHUB_TOKEN": token}, out=out)
    return status, out.getvalue(), seen


def test_a_repository_set_up_as_the_checklist_says_passes_every_line():
    status, text, seen = _check(_settings())
    assert status == 0, text
    # Every environment, the repository's secrets, the teams and main.
    assert text.count("ok   ") == len(github_settings.expected_environments()) + 3
    assert {s["auth"] for s in seen} == {"Bearer t0ken"} and {s["version"] for s in seen} == {"2022-11-28"}


@pytest.mark.parametrize(("path", "change", "line"), [
    ("environments/prod", {"protection_rules": [{**REVIEWERS, "prevent_self_review": False}]},
     "FAIL environment prod: prevent self-review: off"),
    ("environments/preview-prod", {"protection_rules": []}, "FAIL environment preview-prod: required reviewers: none"),
    # A staging preview decrypts staging's secrets with the branch's code: never without another person's approval.
    ("environments/preview-staging", {"protection_rules": []},
     "FAIL environment preview-staging: required reviewers: none"),
    ("environments/preview-staging", {"protection_rules": [{**REVIEWERS, "prevent_self_review": False}]},
     "FAIL environment preview-staging: prevent self-review: off"),
    ("environments/preview-prod/secrets", {"total_count": 1, "secrets": [{"name": "PULUMI_ACCESS_TOKEN"}]},
     "FAIL environment preview-prod: secrets: PULUMI_ACCESS_TOKEN stored, expected none"),
    ("environments/drift-dev/variables", {"total_count": 0, "variables": []},
     "FAIL environment drift-dev: variable PULUMI_TEAM: unset"),
    ("environments/drift-prod/variables", {"variables": [{"name": "PULUMI_TEAM", "value": "llm-serving-prod"}]},
     "FAIL pulumi teams: team 'llm-serving-prod' shared by drift-prod, prod"),
    ("actions/secrets", {"total_count": 1, "secrets": [{"name": "PULUMI_ACCESS_TOKEN"}]},
     "FAIL repository secrets: secrets: PULUMI_ACCESS_TOKEN reach this repository, expected none"),
    ("actions/organization-secrets", {"total_count": 1, "secrets": [{"name": "NPM_TOKEN"}]},
     "FAIL repository secrets: organization secrets: NPM_TOKEN reach this repository, expected none"),
    # GitHub's default: an administrator runs the job, and mints its token, without an approval.
    ("environments/prod", {"can_admins_bypass": True},
     "FAIL environment prod: administrators may bypass the reviewers"),
    ("environments/staging", {"deployment_branch_policy": None},
     "FAIL environment staging: deployment branches: any, expected main only"),
    ("environments/drift-prod", {"deployment_branch_policy": {"protected_branches": True,
                                                                "custom_branch_policies": False}},
     "FAIL environment drift-prod: deployment branches: protected branches"),
    ("environments/preview-dev", {"deployment_branch_policy": MAIN_ONLY},
     "FAIL environment preview-dev: deployment branches: limited, expected any"),
    ("environments/dev", {"protection_rules": [REVIEWERS]}, "FAIL environment dev: required reviewers: set"),
    ("branches/main/protection", {"required_pull_request_reviews": None},
     "FAIL branch main: pull request reviews: not required"),
    ("branches/main/protection", {"required_status_checks": {"contexts": [], "checks": []}},
     "FAIL branch main: required status checks: 'test' missing"),
    ("branches/main/protection", {"allow_force_pushes": {"enabled": True}}, "FAIL branch main: force pushes: allowed"),
    ("branches/main/protection", {"enforce_admins": {"enabled": False}},
     "FAIL branch main: include administrators: off"),
])
def test_each_setting_that_differs_fails_its_line(path, change, line):
    paths = copy.deepcopy(_settings())
    paths[f"/repos/{REPO}/{path}"].update(change)
    status, text, _ = _check(paths)
    assert status == 1
    assert [x for x in text.splitlines() if not x.startswith("ok")] == [x for x in text.splitlines()
                                                                         if x.startswith(line)]


def test_a_deploy_environment_open_to_another_branch_fails():
    paths = _settings()
    policies = [{"name": "main", "type": "branch"}, {"name": "release/*", "type": "branch"}]
    paths[f"/repos/{REPO}/environments/prod/deployment-branch-policies"] = {"total_count": 2,
                                                                           "branch_policies": policies}
    status, text, _ = _check(paths)
    assert status == 1 and "FAIL environment prod: deployment branches: main, release/*, expected main only" in text


def test_a_missing_environment_or_unprotected_main_is_not_checked_and_fails():
    paths = _settings()
    del paths[f"/repos/{REPO}/environments/drift-staging"]
    del paths[f"/repos/{REPO}/branches/main/protection"]
    status, text, _ = _check(paths)
    assert status == 1
    assert "NOT CHECKED environment drift-staging: HTTP 404 (Not Found)" in text
    assert "NOT CHECKED branch main: HTTP 404 (Not Found)" in text


def test_without_a_token_or_with_a_bad_repository_it_is_usage_error():
    with pytest.raises(ConfigError, match="GITHUB_TOKEN"):
        github_settings.main([REPO], environ={})
    with pytest.raises(ConfigError, match="owner/name"):
        github_settings.main(["not a repo"], environ={"GITHUB_TOKEN": "t"})
    with pytest.raises(ConfigError, match="unencrypted"):
        github_settings.main([REPO, "--api-url", "http://github.example.com"], environ={"GITHUB_TOKEN": "t"})


def test_the_environments_checked_are_the_ones_the_workflows_use_and_the_checklist_names():
    used = set()
    for workflow in (PROJECT_DIR / ".github" / "workflows").glob("*.yml"):
        text = workflow.read_text()
        for stack in github_settings.STACKS:
            used |= {m.replace("${{ matrix.stack }}", stack).replace("${{ inputs.stack }}", stack)
                     for m in re.findall(r"environment: (\S+)", text)}
    used = {u for u in used if "${{" not in u}
    checked = {e.name for e in github_settings.expected_environments()}
    assert used <= checked
    checklist = Path(PROJECT_DIR / "docs" / "operations.md").read_text()
    assert all(f"`{name}`" in checklist for name in checked)


def test_the_checklist_table_says_what_check_github_checks_for_each_environment():
    # The set-up checklist's table (docs/operations.md) and expected_environments() are one decision written twice:
    # a row's branches and reviewers must be the ones check-github holds the repository to.
    operations = (PROJECT_DIR / "docs" / "operations.md").read_text()
    checklist = operations.split("### Environment and role set-up checklist", 1)[1].split("\n#", 1)[0]
    rows: dict[str, tuple[str, str, str]] = {}
    for line in checklist.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| `"):
            for name in re.findall(r"`([a-z-]+)`", cells[0]):
                rows[name] = (cells[1], cells[2], cells[4])
    expected = {e.name: e for e in github_settings.expected_environments()}
    assert sorted(rows) == sorted(expected)
    for name, (branches, reviewers, secrets) in rows.items():
        want = expected[name]
        assert (branches == "main only") is want.main_only, name
        assert (reviewers == "required reviewers, self-review prevented, no admin bypass") is want.reviewers, name
        assert reviewers in ("none", "required reviewers, self-review prevented, no admin bypass"), name
        assert secrets == "none", name
