"""The GitHub Actions workflows: schema-valid, and wired the way the README promises."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from stacks.loader import PROJECT_DIR
from tests.conftest import STACK_NAMES

WORKFLOWS = PROJECT_DIR / ".github" / "workflows"


def load(name: str) -> dict:
    # PyYAML reads the `on:` key as True; give it back its name.
    document = yaml.safe_load((WORKFLOWS / name).read_text())
    document["on"] = document.pop(True)
    return document


def test_every_workflow_passes_the_github_workflow_schema():
    files = sorted(str(p) for p in WORKFLOWS.glob("*.yml"))
    assert len(files) == 6
    checker = Path(sys.executable).with_name("check-jsonschema")
    result = subprocess.run(
        [str(checker), "--builtin-schema", "vendor.github-workflows", *files],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_ci_runs_the_readme_commands_on_every_pull_request():
    ci = load("ci.yml")
    assert "pull_request" in ci["on"]
    runs = [step.get("run") for step in ci["jobs"]["test"]["steps"]]
    assert "make test" in runs and "make lint" in runs


def test_offline_diff_and_preview_cover_every_stack():
    for name in ("offline-diff.yml", "preview.yml", "drift.yml"):
        jobs = load(name)["jobs"]
        (job,) = jobs.values()
        assert sorted(job["strategy"]["matrix"]["stack"]) == sorted(STACK_NAMES), name


def test_preview_uses_the_pulumi_action_with_policy_pack_and_pr_comment_only_with_credentials():
    job = load("preview.yml")["jobs"]["preview"]
    (action,) = [s for s in job["steps"] if str(s.get("uses", "")).startswith("pulumi/actions@")]
    assert action["with"]["command"] == "preview"
    assert action["with"]["comment-on-pr"] is True
    assert action["with"]["policyPacks"] == "policies"
    assert action["if"] == "${{ vars.AWS_ROLE_ARN != '' }}"
    skip = job["steps"][0]
    assert skip["if"] == "${{ vars.AWS_ROLE_ARN == '' }}" and "skipped" in skip["run"]


def test_deploy_runs_dev_then_staging_then_prod_behind_its_environment():
    jobs = load("deploy.yml")["jobs"]
    assert jobs["staging"]["needs"] == "dev" and jobs["prod"]["needs"] == "staging"
    assert load("deploy.yml")["on"] == {"push": {"branches": ["main"]}}
    up = load("pulumi-up.yml")["jobs"]["up"]
    assert up["environment"] == "${{ inputs.stack }}"
    (action,) = [s for s in up["steps"] if str(s.get("uses", "")).startswith("pulumi/actions@")]
    assert action["with"]["command"] == "up"


def test_drift_check_refreshes_and_expects_no_changes():
    drift = load("drift.yml")
    assert "schedule" in drift["on"]
    (action,) = [s for s in drift["jobs"]["drift"]["steps"] if str(s.get("uses", "")).startswith("pulumi/actions@")]
    assert action["with"]["refresh"] is True and action["with"]["expect-no-changes"] is True
