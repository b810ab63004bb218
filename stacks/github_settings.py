"""`python -m stacks check-github <owner>/<repo>`: the repository's GitHub settings the workflows rely on, read
through the REST API and compared with the set-up checklist (docs/operations.md, "Environment and role set-up
checklist").

The workflows cannot enforce these themselves: an environment's deployment branches and required reviewers, and
the branch protection of main, are repository settings. Each environment a workflow names must exist with the
branches and reviewers its row says; an environment with reviewers must prevent self-review (else the author of
a change approves its own prod deploy); main must require a reviewed pull request with the CI check passing, for
admins too, with no force push and no deletion. No environment and no repository holds a stored secret (every job
exchanges its OIDC token for short-lived Pulumi Cloud and AWS credentials), and each environment names its own
Pulumi Cloud team (variable PULUMI_TEAM), so a token is scoped to one stack and one purpose. Read-only: the token
(GITHUB_TOKEN, never an argument) needs "Administration: read" for branch protection, "Secrets: read" and
"Variables: read" for the secret names and the team variable, and "Actions: read" / "Environments: read" for the
rest.

REST API (docs.github.com/en/rest, API version 2022-11-28): GET /repos/{owner}/{repo}/environments/{name}
(`protection_rules[]` with `type: required_reviewers`, `prevent_self_review`, `reviewers`;
`deployment_branch_policy`: null for any branch, else `protected_branches` / `custom_branch_policies`),
GET .../environments/{name}/deployment-branch-policies (`branch_policies[].name`, `.type`),
GET .../environments/{name}/secrets (`secrets[].name`, never a value), GET .../environments/{name}/variables
(`variables[].name`, `.value`), GET /repos/{owner}/{repo}/actions/secrets, and
GET /repos/{owner}/{repo}/branches/{branch}/protection. Lists are read at the API's default page size (30), far
above what a correctly set-up environment holds (no secret, a handful of variables).

Exit 0 when every setting matches, 1 when one does not or cannot be read, 2 on bad usage or no token.
"""

from __future__ import annotations

import json
import os
import re
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO

from stacks.config.problems import CommandLineParser, ConfigError, Problem

API_URL = "https://api.github.com"
API_VERSION = "2022-11-28"
TIMEOUT_SECONDS = 30
STACKS = ("dev", "staging", "prod")
MAIN = "main"
# The job of .github/workflows/ci.yml that runs `make test`, `make lint` and `make scan`: its check must pass.
CI_CHECK = "test"
# The environment variable naming the Pulumi Cloud team whose token the job gets (pulumi/auth-actions `scope`).
TEAM_VARIABLE = "PULUMI_TEAM"
REPOSITORY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,38}/[A-Za-z0-9._-]{1,100}$")


@dataclass(frozen=True)
class Environment:
    """One row of the checklist: who may run a job in the environment, and from which branches."""

    name: str
    main_only: bool  # deployment branches: main only (else any branch: pull requests)
    reviewers: bool  # required reviewers, with self-review prevented


def expected_environments() -> list[Environment]:
    """Every environment the workflows name, as the checklist sets it up. A pull request's preview runs the
    branch's code with the stack's decrypted config, so staging's and prod's wait for another person's approval;
    dev's previews at once (its secrets are dev's only)."""
    rows = [Environment(f"preview-{s}", main_only=False, reviewers=s != "dev") for s in STACKS]
    rows += [Environment(f"drift-{s}", main_only=True, reviewers=False) for s in STACKS]
    rows += [Environment(s, main_only=True, reviewers=s == "prod") for s in STACKS]
    return rows


class ReadError(Exception):
    """A setting that could not be read (missing, forbidden, unreachable)."""


Get = Callable[[str], Any]


def api_get(api_url: str, token: str) -> Get:
    """GET `path` from the API as JSON, with the token; a 404 or any other failure raises ReadError."""

    def get(path: str) -> Any:
        request = urllib.request.Request(f"{api_url.rstrip('/')}{path}", headers={  # noqa: S310 - checked in main
            "Accept": "application/vnd.github+json", "Authorization": f"Bearer {token}",
            "X-GitHub-Api-Version": API_VERSION, "User-Agent": "llm-serving-check-github"})
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS) as response:  # noqa: S310 - checked in main
                return json.load(response)
        except urllib.error.HTTPError as error:
            raise ReadError(f"HTTP {error.code} ({error.reason})") from None
        except (urllib.error.URLError, OSError, ValueError) as error:
            raise ReadError(str(getattr(error, "reason", error))) from None

    return get


def check_environment(get: Get, repository: str, want: Environment,
                      teams: dict[str, str] | None = None) -> list[str]:
    """The ways `want` differs from the repository's environment ([] when it matches); its Pulumi team, when it
    names one, goes into `teams` (environment -> team)."""
    base = f"/repos/{repository}/environments/{urllib.parse.quote(want.name, safe='')}"
    found = get(base)
    problems = []
    stored = sorted(s.get("name", "") for s in get(f"{base}/secrets").get("secrets", []))
    if stored:
        problems.append(f"secrets: {', '.join(stored)} stored, expected none (the job exchanges its OIDC token)")
    variables = {v.get("name"): v.get("value", "") for v in get(f"{base}/variables").get("variables", [])}
    team = variables.get(TEAM_VARIABLE, "")
    if not team:
        problems.append(f"variable {TEAM_VARIABLE}: unset, expected the Pulumi Cloud team of this stack and purpose")
    elif teams is not None:
        teams[want.name] = team
    rules = [r for r in found.get("protection_rules") or [] if r.get("type") == "required_reviewers"]
    if want.reviewers:
        if not rules or not rules[0].get("reviewers"):
            problems.append("required reviewers: none, expected at least one")
        elif not rules[0].get("prevent_self_review"):
            problems.append("prevent self-review: off, expected on (an author could approve their own deploy)")
        # GitHub's default lets administrators run the job without an approval ("Allow administrators to bypass
        # configured protection rules"; REST environments API `can_admins_bypass`, default true).
        if found.get("can_admins_bypass", True) is not False:
            problems.append("administrators may bypass the reviewers, expected not (can_admins_bypass: false)")
    elif rules and rules[0].get("reviewers"):
        problems.append("required reviewers: set, expected none (the job would wait for an approval)")
    policy = found.get("deployment_branch_policy")
    if not want.main_only:
        if policy is not None:
            problems.append("deployment branches: limited, expected any (pull requests run here)")
        return problems
    if policy is None:
        return [*problems, "deployment branches: any, expected main only"]
    if not policy.get("custom_branch_policies"):
        return [*problems, "deployment branches: protected branches, expected exactly main (a custom policy)"]
    names = sorted(p.get("name", "") for p in get(f"{base}/deployment-branch-policies").get("branch_policies", [])
                   if p.get("type", "branch") == "branch")
    if names != [MAIN]:
        problems.append(f"deployment branches: {', '.join(names) or 'none'}, expected main only")
    return problems


def check_main(get: Get, repository: str) -> list[str]:
    """How main's protection differs from what the deploy environments rely on."""
    found = get(f"/repos/{repository}/branches/{MAIN}/protection")
    problems = []
    reviews = found.get("required_pull_request_reviews") or {}
    if reviews.get("required_approving_review_count", 0) < 1:
        problems.append("pull request reviews: not required, expected at least one approval")
    elif not reviews.get("require_last_push_approval"):
        problems.append("approval of the most recent push: off, expected on (a push after the approval is unreviewed)")
    checks = found.get("required_status_checks") or {}
    contexts = {*checks.get("contexts", []), *(c.get("context") for c in checks.get("checks", []))}
    if CI_CHECK not in contexts:
        problems.append(f"required status checks: {CI_CHECK!r} missing (the ci workflow's job)")
    if not (found.get("enforce_admins") or {}).get("enabled"):
        problems.append("include administrators: off, expected on")
    if (found.get("allow_force_pushes") or {}).get("enabled"):
        problems.append("force pushes: allowed, expected refused")
    if (found.get("allow_deletions") or {}).get("enabled"):
        problems.append("deletion: allowed, expected refused")
    return problems


def check_repository_secrets(get: Get, repository: str) -> list[str]:
    """A repository secret, or an organization secret shared with the repository, reaches every workflow, a pull
    request's new one included: there must be none (REST: "List repository secrets", "List repository organization
    secrets")."""
    problems = []
    for path, kind in (("actions/secrets", "secrets"), ("actions/organization-secrets", "organization secrets")):
        stored = sorted(s.get("name", "") for s in get(f"/repos/{repository}/{path}").get("secrets", []))
        if stored:
            problems.append(f"{kind}: {', '.join(stored)} reach this repository, expected none (any branch's "
                            "workflow could read them)")
    return problems


def check_teams(teams: dict[str, str]) -> list[str]:
    """Each environment's team is its own: one stack and one purpose per token."""
    shared: dict[str, list[str]] = {}
    for environment, team in sorted(teams.items()):
        shared.setdefault(team, []).append(environment)
    return [f"team {team!r} shared by {', '.join(names)}, expected one team per environment"
            for team, names in sorted(shared.items()) if len(names) > 1]


def report(get: Get, repository: str, out: TextIO) -> int:
    """One line per environment, for the repository's secrets, the teams and main: `ok`, `FAIL <what>` or
    `NOT CHECKED <why>`; 1 unless all ok."""
    failed = 0
    teams: dict[str, str] = {}
    targets: list[tuple[str, Callable[[], list[str]]]] = [
        (f"environment {e.name}", lambda e=e: check_environment(get, repository, e, teams))  # type: ignore[misc]
        for e in expected_environments()]
    targets.append(("repository secrets", lambda: check_repository_secrets(get, repository)))
    targets.append(("pulumi teams", lambda: check_teams(teams)))
    targets.append((f"branch {MAIN}", lambda: check_main(get, repository)))
    for label, check in targets:
        try:
            problems = check()
        except ReadError as error:
            out.write(f"NOT CHECKED {label}: {error}\n")
            failed += 1
            continue
        if problems:
            failed += 1
            out.writelines(f"FAIL {label}: {p}\n" for p in problems)
        else:
            out.write(f"ok   {label}\n")
    return 1 if failed else 0


def main(argv: list[str], environ: dict[str, str] | None = None, out: TextIO = sys.stdout,
         err: TextIO = sys.stderr) -> int:
    parser = CommandLineParser(prog="python -m stacks check-github", description=(
        "Compare the repository's environments and main's branch protection with the set-up checklist "
        "(docs/operations.md); the token comes from $GITHUB_TOKEN.")).use_streams(out, err)
    parser.add_argument("repository", help="owner/name")
    parser.add_argument("--api-url", default=API_URL, help="the REST API's base URL (GitHub Enterprise Server)")
    args = parser.parse_args(argv)
    url = urllib.parse.urlsplit(args.api_url)
    if not (url.scheme == "https" or (url.scheme == "http" and url.hostname in ("127.0.0.1", "localhost", "::1"))):
        # The token goes with every request: never in clear text beyond this machine, never to a file: URL.
        raise ConfigError([Problem("--api-url", "the token would be sent unencrypted", args.api_url,
                                   "an https:// URL (http:// only to this machine)")])
    if not REPOSITORY.match(args.repository):
        raise ConfigError([Problem("repository", "not an owner/name", args.repository, "e.g. acme/llm-serving")])
    token = (environ if environ is not None else dict(os.environ)).get("GITHUB_TOKEN", "")
    if not token:
        raise ConfigError([Problem("GITHUB_TOKEN", "no token to read the repository's settings with", "unset",
                                   "a token with Administration, Actions, Environments, Secrets and Variables read")])
    return report(api_get(args.api_url, token), args.repository, out)
