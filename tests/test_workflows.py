"""The GitHub Actions workflows: schema-valid, and wired the way the README promises."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from stacks.config.files import PROJECT_DIR
from stacks.offline import awaits
from tests.conftest import STACK_NAMES

WORKFLOWS = PROJECT_DIR / ".github" / "workflows"


def load(name: str) -> dict:
    # PyYAML reads the `on:` key as True; give it back its name.
    document = yaml.safe_load((WORKFLOWS / name).read_text())
    document["on"] = document.pop(True)
    return document


def test_every_workflow_passes_the_github_workflow_schema():
    files = sorted(str(p) for p in WORKFLOWS.glob("*.yml"))
    assert len(files) == 7
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



def test_preview_deploy_and_drift_share_one_concurrency_group_per_stack():
    groups = {
        "preview.yml": load("preview.yml")["jobs"]["preview"]["concurrency"],
        "drift.yml": load("drift.yml")["jobs"]["drift"]["concurrency"],
        "pulumi-up.yml": load("pulumi-up.yml")["jobs"]["up"]["concurrency"],
    }
    assert groups == {
        "preview.yml": {"group": "pulumi-${{ matrix.stack }}", "cancel-in-progress": False},
        "drift.yml": {"group": "pulumi-${{ matrix.stack }}", "cancel-in-progress": False},
        # A cancelled `pulumi up` would leave the stack locked with pending operations.
        "pulumi-up.yml": {"group": "pulumi-${{ inputs.stack }}", "cancel-in-progress": False},
    }


@pytest.mark.parametrize("name", STACK_NAMES)
def test_deploy_job_outlasts_the_longest_await_of_every_stack(rendered, name):
    seconds, chain = awaits.longest_await(rendered[name].resources)
    timeout = load("pulumi-up.yml")["jobs"]["up"]["timeout-minutes"]
    # Ten minutes for checkout, installs and the engine's own preview; GitHub stops any job at 360.
    assert seconds + 600 <= timeout * 60 <= 360 * 60, (name, seconds, chain)


def test_longest_await_of_prod_is_the_weights_job_then_every_rollout_then_the_gate(rendered):
    seconds, chain = awaits.longest_await(rendered["prod"].resources)
    waiting = [(key, awaits.await_seconds(rendered["prod"].resource(*key.split("::", 1)))) for key in chain]
    assert [(key, s) for key, s in waiting if s] == [
        ("kubernetes:batch/v1:Job::llama-70b-weights-stage", 5683),
        # The rollout await: three planned 840 s steps, the last up to the 1,920 s progress deadline, + 2 min.
        ("kubernetes:apps/v1:Deployment::llama-70b-deployment", 4560),
        ("kubernetes:batch/v1:Job::llama-70b-verify-job", 710),
    ]
    assert seconds == 5683 + 4560 + 710


def test_pull_requests_from_forks_never_run_a_preview_with_the_stacks_role():
    job = load("preview.yml")["jobs"]["preview"]
    assert job["if"] == "${{ github.event.pull_request.head.repo.full_name == github.repository }}"
    # The offline diff needs no secret and no write token: it keeps an artifact for the comment workflow.
    diff = load("offline-diff.yml")
    assert diff["permissions"] == {"contents": "read"}
    uploads = [s for s in diff["jobs"]["diff"]["steps"] if str(s.get("uses", "")).startswith("actions/upload-artifact")]
    assert uploads and uploads[0]["with"]["name"] == "offline-diff-${{ matrix.stack }}"


def test_the_comment_workflow_posts_from_the_base_repository_without_running_pr_code():
    comment = load("offline-diff-comment.yml")
    assert comment["on"] == {"workflow_run": {"workflows": ["offline-diff"], "types": ["completed"]}}
    assert comment["permissions"] == {"actions": "read", "pull-requests": "write"}
    steps = comment["jobs"]["comment"]["steps"]
    assert not [s for s in steps if str(s.get("uses", "")).startswith("actions/checkout")]
    assert not [s for s in steps if "run" in s]  # no shell step touches the artifact
    script = steps[-1]["with"]["script"]
    assert "/^[0-9]+$/.test(number)" in script


@pytest.mark.parametrize(("workflow", "job"), [("preview.yml", "preview"), ("drift.yml", "drift"),
                                               ("pulumi-up.yml", "up")])
def test_placeholder_secrets_are_refused_before_pulumi_runs(workflow, job):
    steps = load(workflow)["jobs"][job]["steps"]
    names = [s.get("name", s.get("uses", "")) for s in steps]
    refuse = names.index("Refuse placeholder secrets")
    pulumi = next(i for i, s in enumerate(steps) if str(s.get("uses", "")).startswith("pulumi/actions@"))
    assert refuse < pulumi
    assert steps[refuse]["run"].startswith("make secrets-set STACK=")
