"""Preflight runs where it matters: before `make preview` and `make up` (unless skipped by name), and
in the preview and deploy workflows between the AWS credentials and Pulumi, into the job summary."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
import yaml

from stacks.config.files import PROJECT_DIR

WORKFLOWS = PROJECT_DIR / ".github" / "workflows"


def steps(workflow: str, job: str) -> list[dict]:
    return yaml.safe_load((WORKFLOWS / workflow).read_text())["jobs"][job]["steps"]


@pytest.mark.parametrize(("workflow", "job", "stack"), [
    ("preview.yml", "preview", "\"$STACK\""), ("pulumi-up.yml", "up", "\"$STACK\"")])
def test_workflows_run_preflight_after_the_credentials_and_before_pulumi(workflow, job, stack):
    found = steps(workflow, job)
    names = [str(s.get("uses", "")).split("@")[0] or s.get("name", "") for s in found]
    (at,) = [i for i, s in enumerate(found) if "stacks preflight" in s.get("run", "")]
    assert found[at]["run"] == f'.venv/bin/python -m stacks preflight {stack} --summary "$GITHUB_STEP_SUMMARY"'
    assert names.index("aws-actions/configure-aws-credentials") < at < names.index("pulumi/actions")


# Under `make test` the suite inherits MAKEFLAGS and MAKELEVEL; a dry run must not (it would print
# the outer make's flags and "Entering directory" lines into what the test parses).
MAKE_ENV = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS", "MAKEOVERRIDES")}


def dry_run(*args: str) -> list[str]:
    done = subprocess.run(["make", "-n", "--no-print-directory", *args], cwd=PROJECT_DIR, capture_output=True,
                          text=True, timeout=60, env=MAKE_ENV)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
@pytest.mark.parametrize("target", ["preview", "up"])
def test_make_runs_preflight_before_pulumi_unless_skipped(target):
    lines = dry_run(target, "STACK=prod")
    first = lines.index(".venv/bin/python -m stacks preflight prod")
    assert lines[first + 1].startswith(f"pulumi {target} --stack prod")
    skipped = dry_run(target, "STACK=prod", "SKIP_PREFLIGHT=1")
    assert not any("stacks preflight" in line for line in skipped)
    assert 'echo "preflight skipped (SKIP_PREFLIGHT=1)"' in skipped


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_preflight_runs_the_command():
    assert dry_run("preflight", "STACK=staging")[-1] == ".venv/bin/python -m stacks preflight staging"
