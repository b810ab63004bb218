"""The GitHub Actions workflows: schema-valid, and wired the way the README promises.

Length: one file per concern of the workflows (wiring, supply chain, credentials, environments, the
diff comment, Dependabot), all read through the same loaders.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import click.testing
import pytest
import yaml

from llm_serving.stack import timing, verification
from llm_serving.verification import await_seconds
from stacks import reader
from stacks.config.files import PROJECT_DIR, parse_yaml, stack_file_path
from stacks.environment import load_stack_file
from stacks.offline import awaits
from tests.conftest import STACK_NAMES

WORKFLOWS = PROJECT_DIR / ".github" / "workflows"
WORKFLOW_FILES = sorted(p.name for p in WORKFLOWS.glob("*.yml"))


def check_jsonschema(schema: str, *files: str) -> click.testing.Result:
    """`check-jsonschema --builtin-schema <schema> <files>` in this process (click's test runner): the
    same command and vendored schema as its console script, without a new interpreter importing it."""
    from check_jsonschema.cli.main_command import main

    return click.testing.CliRunner().invoke(main, ["--builtin-schema", schema, *files])


def load(name: str) -> dict:
    # PyYAML reads the `on:` key as True; give it back its name.
    document = parse_yaml((WORKFLOWS / name).read_text())
    document["on"] = document.pop(True)
    return document


def test_every_workflow_passes_the_github_workflow_schema():
    files = sorted(str(p) for p in WORKFLOWS.glob("*.yml"))
    assert len(files) == 7
    result = check_jsonschema("vendor.github-workflows", *files)
    assert result.exit_code == 0, (result.output, result.exception)


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


def test_preview_uses_the_pulumi_action_with_policy_pack_and_a_summary_only_with_credentials():
    job = load("preview.yml")["jobs"]["preview"]
    (action,) = [s for s in job["steps"] if str(s.get("uses", "")).startswith("pulumi/actions@")]
    assert action["with"]["command"] == "preview"
    # Into the run's summary: the job runs the branch's code and may not write to the pull request.
    assert action["with"]["comment-on-summary"] is True and "comment-on-pr" not in action["with"]
    assert "pull-requests" not in job["permissions"]
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
    actions = [s for s in up["steps"] if str(s.get("uses", "")).startswith("pulumi/actions@")]
    # The first only installs the CLI for the node-group guard; the last runs the update.
    assert [a["with"].get("command") for a in actions] == [None, "up"]


def runs_up(step: dict) -> bool:
    """A step that updates a stack: the Pulumi action's `up`, or `pulumi up` / `make up` in a shell."""
    if str(step.get("uses", "")).startswith("pulumi/actions@"):
        return (step.get("with") or {}).get("command") == "up"
    return bool(re.search(r"\b(pulumi|make) up\b", str(step.get("run", ""))))


def guard_problems(steps: list[dict]) -> list[str]:
    """What is missing before each `up` of a job: the CLI, the state export, then the node-group guard."""
    problems = []
    for index, step in enumerate(steps):
        if not runs_up(step):
            continue
        before = steps[:index]
        guards = [i for i, s in enumerate(before) if "tools.node_group_guard" in str(s.get("run", ""))
                  or "make node-group-guard" in str(s.get("run", ""))]
        if not guards:
            problems.append(f"step {index} runs up without the node-group guard before it")
            continue
        guard = before[guards[-1]]
        run = str(guard.get("run", ""))
        export = run.find("pulumi stack export")
        exported = 0 <= export < run.find("tools.node_group_guard")
        if "make node-group-guard" not in run and not exported:
            problems.append(f"step {guards[-1]} runs the guard without exporting the state first")
        if not any(str(s.get("uses", "")).startswith("pulumi/actions@") for s in before[:guards[-1]]):
            problems.append(f"step {guards[-1]} runs before the Pulumi CLI is installed")
    return problems


def test_every_job_that_runs_up_runs_the_node_group_guard_before_it():
    jobs_with_up = [(name, job_id) for name, job_id, step in all_steps() if runs_up(step)]
    assert sorted(set(jobs_with_up)) == [("pulumi-up.yml", "up")]
    for name, job_id in jobs_with_up:
        steps = load(name)["jobs"][job_id]["steps"]
        assert guard_problems(steps) == [], (name, job_id)
        (guard,) = [s for s in steps if "tools.node_group_guard" in str(s.get("run", ""))]
        # The same state and stack the `up` uses, and the same module `make node-group-guard` runs.
        # Its Pulumi token is the one the auth action exported for the whole job (never a stored secret).
        assert guard["env"] == {"STACK_REF": "${{ vars.PULUMI_ORG || 'organization' }}/${{ inputs.stack }}"}
        assert guard["run"].splitlines() == [
            "mkdir -p build",
            'pulumi stack export --stack "$STACK_REF" --file "build/$STACK-state.json"',
            '.venv/bin/python -m tools.node_group_guard "build/$STACK-state.json" --stack "$STACK"',
        ]
        up = next(s for s in steps if runs_up(s))
        assert up["with"]["stack-name"] == guard["env"]["STACK_REF"]
    makefile = (PROJECT_DIR / "Makefile").read_text()
    assert "\t$(BIN)/python -m tools.node_group_guard build/$(STACK)-state.json --stack $(STACK)\n" in makefile


def test_the_guard_order_check_refuses_an_up_without_or_before_its_guard():
    install = {"uses": "pulumi/actions@" + "0" * 40}
    guard = {"run": "pulumi stack export --stack x --file s.json\npython -m tools.node_group_guard s.json --stack x"}
    up = {"uses": "pulumi/actions@" + "0" * 40, "with": {"command": "up"}}
    assert guard_problems([install, guard, up]) == []
    assert guard_problems([install, up, guard]) == ["step 1 runs up without the node-group guard before it"]
    assert guard_problems([guard, install, up]) == ["step 0 runs before the Pulumi CLI is installed"]
    assert guard_problems([install, {"run": "python -m tools.node_group_guard s.json"}, up]) == [
        "step 1 runs the guard without exporting the state first"]
    assert guard_problems([{"run": "make up STACK=prod"}]) == ["step 0 runs up without the node-group guard before it"]


def test_drift_check_refreshes_and_expects_no_changes():
    drift = load("drift.yml")
    assert "schedule" in drift["on"]
    (action,) = [s for s in drift["jobs"]["drift"]["steps"] if str(s.get("uses", "")).startswith("pulumi/actions@")]
    assert action["with"]["refresh"] is True and action["with"]["expect-no-changes"] is True



def test_pull_request_previews_refresh_only_if_their_group_reads_every_refreshed_object(rendered):
    # A refresh reads every object in the state, and a Helm v3 release through the Secrets of its namespace
    # (stacks/reader.py); the pull-request preview's group is never bound to Secrets, so it must not refresh.
    preview_groups = {reader.GROUP}
    secret_groups = {s["name"] for result in rendered.values() for doc in result.manifests
                     if doc["kind"] == "RoleBinding" and doc["roleRef"]["name"] == reader.SECRET_ROLE
                     for s in doc["subjects"]}
    reads_secrets = bool(preview_groups & secret_groups)
    holds_secrets = any(r["type"] in ("kubernetes:core/v1:Secret", "kubernetes:helm.sh/v3:Release")
                        for result in rendered.values() for r in result.resources)
    (action,) = [s for s in load("preview.yml")["jobs"]["preview"]["steps"]
                 if str(s.get("uses", "")).startswith("pulumi/actions@")]
    assert action["with"].get("refresh", False) is (reads_secrets or not holds_secrets)


def test_no_preview_or_drift_run_can_cancel_a_pending_deploy():
    # GitHub keeps one running and one pending run per concurrency group and cancels the pending one when another
    # is queued, whatever cancel-in-progress says: previews, drift and updates each have groups of their own.
    groups = {
        "preview.yml": load("preview.yml")["jobs"]["preview"]["concurrency"],
        "drift.yml": load("drift.yml")["jobs"]["drift"]["concurrency"],
        "pulumi-up.yml": load("pulumi-up.yml")["jobs"]["up"]["concurrency"],
    }
    assert groups == {
        # A newer push to the same pull request supersedes its older preview.
        "preview.yml": {"group": "pulumi-preview-${{ matrix.stack }}-${{ github.event.pull_request.number }}",
                        "cancel-in-progress": True},
        "drift.yml": {"group": "pulumi-drift-${{ matrix.stack }}", "cancel-in-progress": False},
        # A cancelled `pulumi up` would leave the stack locked with pending operations.
        "pulumi-up.yml": {"group": "pulumi-up-${{ inputs.stack }}", "cancel-in-progress": False},
    }
    assert len({g["group"] for g in groups.values()}) == len(groups)


@pytest.mark.parametrize("name", STACK_NAMES)
def test_deploy_job_outlasts_the_longest_await_of_every_stack(rendered, name):
    seconds, chain = awaits.longest_await(rendered[name].resources)
    timeout = load("pulumi-up.yml")["jobs"]["up"]["timeout-minutes"]
    # Ten minutes for checkout, installs and the engine's own preview; GitHub stops any job at 360.
    assert seconds + 600 <= timeout * 60 <= 360 * 60, (name, seconds, chain)


def test_longest_await_of_prod_is_the_weights_job_then_every_rollout_then_the_gate(rendered):
    seconds, chain = awaits.longest_await(rendered["prod"].resources)
    waiting = [(key, awaits.await_seconds(rendered["prod"].resource(*key.split("::", 1)))) for key in chain]
    config = load_stack_file(stack_file_path("prod"))[1]
    model = config.models[0]
    steps, step = timing.rollout_steps(config, model)
    rollout = timing.rollout_await_seconds(config, model)
    # The rollout await: three planned steps, the last up to the progress deadline, + 2 min.
    assert steps == 4
    assert rollout == 3 * step + timing.progress_deadline_seconds(config, model) + 120
    # The gate: its deadline plus the slack for scheduling and the image pull.
    gate = await_seconds(verification.deadline_seconds(verification.settings(config, model)))
    assert [(key, s) for key, s in waiting if s] == [
        ("kubernetes:batch/v1:Job::llama-70b-weights-stage", 5683),
        ("kubernetes:apps/v1:Deployment::llama-70b-deployment", rollout),
        ("kubernetes:batch/v1:Job::llama-70b-verify-job", gate),
    ]
    assert seconds == 5683 + rollout + gate


def test_pull_requests_from_forks_never_run_a_preview_with_the_stacks_role():
    job = load("preview.yml")["jobs"]["preview"]
    assert job["if"] == "${{ github.event.pull_request.head.repo.full_name == github.repository }}"
    # The offline diff needs no secret and no write token, and hands nothing to the comment workflow:
    # what the pull request's code prints stays in its own job summary.
    diff = load("offline-diff.yml")
    assert diff["permissions"] == {"contents": "read"}
    assert not [s for s in diff["jobs"]["diff"]["steps"] if "upload-artifact" in str(s.get("uses", ""))]


@pytest.mark.parametrize(("diff_exit", "job_exit", "summary"), [
    (0, 0, "DIFF\n"), (1, 0, "DIFF\n"),
    (3, 3, "DIFF\n\n```\nrefused: prod: replace of a retained claim\n```\n"),
    (2, 2, ""), (137, 137, ""),  # the diff failed, or was killed: never a pass
])
def test_the_offline_diff_check_fails_on_a_refused_change_and_shows_why(tmp_path, diff_exit, job_exit, summary):
    """The pull request's offline-diff step, run as the runner runs it (bash -e) with the diff's exit codes: a
    change `stacks diff --check` refuses (3) fails the check, with the diff and the refusal in the summary."""
    import subprocess

    steps = load("offline-diff.yml")["jobs"]["diff"]["steps"]
    (step,) = [s for s in steps if s.get("name") == "Render both sides and diff"]
    assert "--check" in step["run"]
    fake = tmp_path / ".venv" / "bin" / "python"
    fake.parent.mkdir(parents=True)
    fake.write_text(f"#!/bin/sh\necho DIFF\necho 'refused: prod: replace of a retained claim' >&2\nexit {diff_exit}\n")
    fake.chmod(0o755)
    summary_file = tmp_path / "summary.md"
    summary_file.write_text("")
    done = subprocess.run(["bash", "-e", "-c", step["run"]], cwd=tmp_path, capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "STACK": "prod", "BASE_REF": "main",
                               "GITHUB_STEP_SUMMARY": str(summary_file)})
    assert done.returncode == job_exit, done.stderr
    assert summary_file.read_text() == summary
    # What the diff wrote on stderr is in the log, whatever the outcome.
    assert "refused: prod: replace of a retained claim" in done.stderr


@pytest.mark.parametrize(("workflow", "job"), [("preview.yml", "preview"), ("drift.yml", "drift"),
                                               ("pulumi-up.yml", "up")])
def test_placeholder_secrets_are_refused_before_pulumi_runs(workflow, job):
    steps = load(workflow)["jobs"][job]["steps"]
    names = [s.get("name", s.get("uses", "")) for s in steps]
    refuse = names.index("Refuse placeholder secrets")
    pulumi = next(i for i, s in enumerate(steps) if str(s.get("uses", "")).startswith("pulumi/actions@"))
    assert refuse < pulumi
    assert steps[refuse]["run"].startswith("make secrets-set STACK=")


# --- supply chain: pinned actions, pinned CLI, hashed installs -----------------------------------

USES = re.compile(r"^\s*(?:-\s+)?uses:\s*(?P<ref>\S+)(?P<comment>.*)$")
PINNED = re.compile(r"^(?P<action>[A-Za-z0-9-]+/[A-Za-z0-9._-]+(?:/[A-Za-z0-9._/-]+)?)@(?P<sha>[^\s#]+)$")
VERSION_COMMENT = re.compile(r"^ # (?P<version>v\d+\.\d+\.\d+)$")
FULL_SHA = re.compile(r"^[0-9a-f]{40}$")


def uses_lines() -> list[tuple[str, int, str, str]]:
    """(file, line number, reference, trailing text) of every `uses:` in the workflows."""
    found = []
    for name in WORKFLOW_FILES:
        for number, line in enumerate((WORKFLOWS / name).read_text().splitlines(), 1):
            match = USES.match(line)
            if match:
                found.append((name, number, match["ref"], match["comment"]))
    return found


def test_every_action_is_pinned_to_a_full_commit_sha_with_its_version_in_a_comment():
    remote = [(f, n, ref, comment) for f, n, ref, comment in uses_lines() if not ref.startswith("./")]
    # The line scan sees every step the YAML holds (so no `uses:` escapes it by its layout).
    assert len(remote) == len([s for _, _, s in all_steps() if "uses" in s]) == 26
    problems = []
    for name, number, ref, comment in remote:
        pinned = PINNED.match(ref)
        if not pinned or not FULL_SHA.match(pinned["sha"]):
            problems.append(f"{name}:{number}: {ref} is not pinned to a 40-hex commit SHA")
        elif not VERSION_COMMENT.match(comment):
            problems.append(f"{name}:{number}: {ref} lacks its ` # vX.Y.Z` version comment")
    assert problems == []


def test_each_action_has_one_sha_and_one_version_across_workflows():
    seen: dict[str, set[tuple[str, str]]] = {}
    for _, _, ref, comment in uses_lines():
        if not ref.startswith("./"):
            action, sha = ref.split("@", 1)
            seen.setdefault(action, set()).add((sha, comment.strip()))
    # The SHAs are the tags' commits read from each action's repository (docs/operations.md lists them).
    assert {action: sorted(pins) for action, pins in seen.items()} == {
        "actions/checkout": [("3d3c42e5aac5ba805825da76410c181273ba90b1", "# v7.0.1")],
        "actions/setup-python": [("5fda3b95a4ea91299a34e894583c3862153e4b97", "# v7.0.0")],
        "actions/github-script": [("ed597411d8f924073f98dfc5c65a23a2325f34cd", "# v8.0.0")],
        "actions/upload-artifact": [("bbbca2ddaa5d8feaa63e36b76fdaad77386f024f", "# v7.0.0")],
        "actions/download-artifact": [("3e5f45b2cfb9172054b4087a40e8e0b5a5461e7c", "# v8.0.1")],
        "aws-actions/configure-aws-credentials": [("e6de054238d6b7531b4efff3b6587d9aade6a06c", "# v6.2.3")],
        "pulumi/actions": [("8e5e406f4007fca908480587cb9893c07090f58d", "# v7.0.0")],
        "pulumi/auth-actions": [("141415910c3beb54e03b48e9057c204c97b956f2", "# v2.1.0")],
    }


@pytest.mark.parametrize(("ref", "comment"), [
    ("actions/checkout@v4", " # v4.2.2"),  # a tag
    ("actions/checkout@3d3c42e5aac5ba805825da76410c181273ba90b", " # v7.0.1"),  # 39 characters
    ("actions/checkout@3D3C42E5AAC5BA805825DA76410C181273BA90B1", " # v7.0.1"),  # not how git prints it
    ("actions/checkout@3d3c42e5aac5ba805825da76410c181273ba90b1", ""),  # no version comment
    ("actions/checkout@3d3c42e5aac5ba805825da76410c181273ba90b1", " # v7"),  # a moving major tag
])
def test_the_pin_check_refuses_tags_short_or_uppercase_shas_and_missing_versions(ref, comment):
    pinned = PINNED.match(ref)
    assert not (pinned and FULL_SHA.match(pinned["sha"]) and VERSION_COMMENT.match(comment))


def all_steps() -> list[tuple[str, str, dict]]:
    steps = []
    for name in WORKFLOW_FILES:
        for job_id, job in load(name)["jobs"].items():
            steps += [(name, job_id, step) for step in job.get("steps", [])]
    return steps


def pulumi_version_pin() -> str:
    (pin,) = re.findall(r"^pulumi==(\S+)$", (PROJECT_DIR / "requirements.txt").read_text(), re.MULTILINE)
    return pin


def test_every_pulumi_step_runs_the_cli_released_with_the_pinned_sdk():
    pulumi_steps = [(name, step) for name, _, step in all_steps()
                    if str(step.get("uses", "")).startswith("pulumi/actions@")]
    assert {name for name, _ in pulumi_steps} == {"preview.yml", "drift.yml", "pulumi-up.yml"}
    for name, step in pulumi_steps:
        assert step["with"]["pulumi-version"] == "${{ env.PULUMI_VERSION }}", name
        # The CLI and the Python SDK are released together under one version number.
        assert load(name)["env"]["PULUMI_VERSION"] == pulumi_version_pin() == "3.272.0", name


def test_every_install_is_from_a_hashed_lock_file():
    installs = [(name, line.strip()) for name, _, step in all_steps() for line in str(step.get("run", "")).splitlines()
                if "pip install" in line]
    assert len(installs) >= 9
    for name, line in installs:
        # --no-deps for the dev lock, as the Makefile installs it (the lock is the whole closure).
        assert re.search(r"pip install (--no-deps )?--require-hashes -r (requirements(-dev|-scan)?|"
                         r"policies/requirements)\.lock$", line.split("&&")[-1].strip()), (name, line)


def requirement_pins(path: Path) -> dict[str, str]:
    """name -> version of every `name==version` line, following `-r` includes."""
    pins: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith("-r "):
            pins |= requirement_pins(path.parent / line[3:].strip())
        elif "==" in line:
            name, version = line.split("==", 1)
            pins[name.strip().lower().replace("_", "-")] = version.strip()
    return pins


def lock_entries(path: Path) -> dict[str, tuple[str, list[str]]]:
    """name -> (version, hashes) of a pip-compile --generate-hashes lock file."""
    entries: dict[str, tuple[str, list[str]]] = {}
    text = re.sub(r"\\\n\s*", " ", path.read_text())
    for line in text.splitlines():
        if line.startswith(("#", " ")) or not line.strip():
            continue
        requirement, *options = line.split(" --hash=")
        name, version = requirement.split("==", 1)
        entries[name.strip().lower()] = (version.strip(), [o.strip() for o in options])
    return entries


@pytest.mark.parametrize(("requirements", "lock"), [
    ("requirements.txt", "requirements.lock"),
    ("requirements-dev.txt", "requirements-dev.lock"),
    ("requirements-scan.txt", "requirements-scan.lock"),
    ("policies/requirements.txt", "policies/requirements.lock"),
])
def test_each_lock_holds_every_pin_of_its_requirements_with_sha256_hashes(requirements, lock):
    pins = requirement_pins(PROJECT_DIR / requirements)
    entries = lock_entries(PROJECT_DIR / lock)
    assert pins and {name: entries.get(name, ("missing", []))[0] for name in pins} == pins, "run `make locks`"
    for name, (version, hashes) in entries.items():
        assert hashes and all(re.fullmatch(r"sha256:[0-9a-f]{64}", h) for h in hashes), (name, version)
    # Transitive packages are pinned too: the lock is the whole environment, not the top level.
    assert len(entries) > len(pins)


# --- expressions, credentials, secrets -----------------------------------------------------------


def test_no_expression_is_expanded_inside_a_shell_or_script_step():
    # A `${{ }}` inside `run:` or a github-script `script:` is pasted into code before it runs:
    # a branch name or a PR title becomes shell or JavaScript. Values come in through `env:`.
    offenders = [(name, job) for name, job, step in all_steps()
                 if "${{" in str(step.get("run", "")) or "${{" in str((step.get("with") or {}).get("script", ""))]
    assert offenders == []


def test_every_checkout_drops_the_token_after_cloning():
    checkouts = [(name, step) for name, _, step in all_steps()
                 if str(step.get("uses", "")).startswith("actions/checkout@")]
    assert len(checkouts) == 6
    assert all((step.get("with") or {}).get("persist-credentials") is False for _, step in checkouts), checkouts


PULUMI_JOBS = [("preview.yml", "preview"), ("drift.yml", "drift"), ("pulumi-up.yml", "up")]


def pulumi_token_problems(job: dict) -> list[str]:
    """What is wrong with how a job gets its Pulumi Cloud token: it must come from the OIDC exchange
    (pulumi/auth-actions, a team token of the environment's team, expiring with the job) before the
    first step that talks to Pulumi Cloud, and never from a stored secret."""
    problems = []
    steps = job["steps"]
    auth = [i for i, s in enumerate(steps) if str(s.get("uses", "")).startswith("pulumi/auth-actions@")]
    users = [i for i, s in enumerate(steps) if str(s.get("uses", "")).startswith("pulumi/actions@")
             or re.search(r"^\s*pulumi\s", str(s.get("run", "")), re.MULTILINE)]
    if len(auth) != 1:
        return [f"{len(auth)} pulumi/auth-actions steps, expected one"]
    if users and min(users) < auth[0]:
        problems.append(f"step {min(users)} uses Pulumi before the token exchange (step {auth[0]})")
    exchange = steps[auth[0]]["with"]
    if exchange.get("requested-token-type") != "urn:pulumi:token-type:access_token:team":
        problems.append(f"token type {exchange.get('requested-token-type')}, expected a team token")
    if exchange.get("scope") != "team:${{ vars.PULUMI_TEAM }}":
        problems.append(f"scope {exchange.get('scope')}, expected the environment's team")
    if exchange.get("token-expiration") != job["timeout-minutes"] * 60:
        problems.append(f"token-expiration {exchange.get('token-expiration')} s, expected the job's timeout")
    if "${{ secrets." in json.dumps(job):
        problems.append("reads a stored secret")
    if steps[auth[0]].get("if") != (steps[users[-1]].get("if") if users else None):
        problems.append("the exchange runs under another condition than the Pulumi steps")
    return problems


@pytest.mark.parametrize(("workflow", "job_id"), PULUMI_JOBS)
def test_every_pulumi_job_gets_a_short_lived_team_token_by_oidc_and_holds_no_stored_token(workflow, job_id):
    job = load(workflow)["jobs"][job_id]
    assert pulumi_token_problems(job) == []
    # OIDC needs id-token: write, and these are the only jobs that have it (with the AWS role).
    assert job["permissions"]["id-token"] == "write"


def test_only_the_pulumi_jobs_and_their_callers_may_mint_oidc_tokens_and_no_workflow_reads_a_secret():
    minting = sorted((name, job_id) for name in WORKFLOW_FILES for job_id, job in load(name)["jobs"].items()
                     if (job.get("permissions") or {}).get("id-token") == "write")
    assert minting == sorted([*PULUMI_JOBS, ("deploy.yml", "dev"), ("deploy.yml", "staging"),
                              ("deploy.yml", "prod")])
    assert [name for name in WORKFLOW_FILES if "secrets." in (WORKFLOWS / name).read_text()] == []


@pytest.mark.parametrize(("change", "problem"), [
    (lambda s: s.pop(1), "0 pulumi/auth-actions steps, expected one"),
    (lambda s: s.insert(0, s.pop(2)), "step 0 uses Pulumi before the token exchange (step 2)"),
    (lambda s: s[1]["with"].update({"requested-token-type": "urn:pulumi:token-type:access_token:organization"}),
     "token type urn:pulumi:token-type:access_token:organization, expected a team token"),
    (lambda s: s[1]["with"].update({"scope": "team:deployers"}),
     "scope team:deployers, expected the environment's team"),
    (lambda s: s[1]["with"].update({"token-expiration": 3600}),
     "token-expiration 3600 s, expected the job's timeout"),
    (lambda s: s[2].update({"env": {"PULUMI_ACCESS_TOKEN": "${{ secrets.PULUMI_ACCESS_TOKEN }}"}}),
     "reads a stored secret"),
])
def test_the_token_check_refuses_a_stored_token_a_late_exchange_or_a_broad_token(change, problem):
    job = copy.deepcopy(load("pulumi-up.yml")["jobs"]["up"])
    job["steps"] = [{"run": "echo"},
                    next(s for s in job["steps"] if str(s.get("uses", "")).startswith("pulumi/auth-actions@")),
                    next(s for s in job["steps"] if str(s.get("uses", "")).startswith("pulumi/actions@"))]
    assert pulumi_token_problems(job) == []
    change(job["steps"])
    assert problem in pulumi_token_problems(job)


def test_no_workflow_hands_every_secret_to_a_called_workflow():
    for name in WORKFLOW_FILES:
        for job_id, job in load(name)["jobs"].items():
            assert "secrets" not in job, (name, job_id)


def test_workflows_grant_nothing_by_default_and_each_job_only_what_it_uses():
    expected = {
        "preview.yml": {"preview": {"contents": "read", "id-token": "write"}},
        "drift.yml": {"drift": {"contents": "read", "id-token": "write"}},
        "pulumi-up.yml": {"up": {"contents": "read", "id-token": "write"}},
        "offline-diff-comment.yml": {"diff": {"contents": "read", "pull-requests": "read"},
                                     "comment": {"pull-requests": "write"}},
    }
    for name, jobs in expected.items():
        workflow = load(name)
        assert workflow["permissions"] in ({}, {"contents": "read"}), name
        assert {job_id: job["permissions"] for job_id, job in workflow["jobs"].items()} == jobs, name


# --- environments: previews cannot reach prod unreviewed, drift and deploy only from main --------


def test_previews_drift_and_deploys_use_separate_environments_per_stack():
    assert load("preview.yml")["jobs"]["preview"]["environment"] == "preview-${{ matrix.stack }}"
    drift = load("drift.yml")["jobs"]["drift"]
    # Its own environment (restricted to main, no reviewers): required reviewers on preview-prod
    # would otherwise stall the nightly run, and a dispatch from a branch would get the role.
    assert drift["environment"] == "drift-${{ matrix.stack }}"
    assert drift["if"] == "${{ github.ref == 'refs/heads/main' }}"
    assert load("pulumi-up.yml")["jobs"]["up"]["environment"] == "${{ inputs.stack }}"


def test_the_set_up_checklist_names_every_environment_the_workflows_use():
    operations = (PROJECT_DIR / "docs" / "operations.md").read_text()
    checklist = operations.split("### Environment and role set-up checklist", 1)[1].split("\n## ", 1)[0]
    for environment in [f"{kind}{stack}" for kind in ("preview-", "drift-", "") for stack in STACK_NAMES]:
        assert f"`{environment}`" in checklist, environment
    for needle in ("required reviewers", "main", "AmazonEKSViewPolicy", "Stack Read", "Stack Write", "PULUMI_TEAM",
                   "kubernetesGroups",
                   f"`{reader.GROUP}`", f"`{reader.SECRET_GROUP}`",
                   "security/preview-role-deny-policy.json", "security/github-oidc-trust-policy.json"):
        assert needle in checklist, needle


def test_the_preview_role_may_read_but_never_a_secret_value_nor_write():
    policy = json.loads((PROJECT_DIR / "security" / "preview-role-deny-policy.json").read_text())
    assert policy["Version"] == "2012-10-17"
    statements = {s["Sid"]: s for s in policy["Statement"]}
    assert all(s["Effect"] == "Deny" and s["Resource"] == "*" for s in statements.values())
    assert {"secretsmanager:GetSecretValue", "ssm:GetParameter", "ssm:GetParametersByPath", "kms:Decrypt"} <= set(
        statements["NoSecretValues"]["Action"])
    # Everything outside the read actions is denied, so an Allow elsewhere (a managed policy) cannot add writes.
    readable = statements["NoWritesEvenIfAnotherPolicyAllowsThem"]["NotAction"]
    assert all(re.fullmatch(r"[a-z0-9-]+:(Describe|Get|List)[A-Za-z]*\*?", action) for action in readable), readable
    trust = json.loads((PROJECT_DIR / "security" / "github-oidc-trust-policy.json").read_text())
    (statement,) = trust["Statement"]
    condition = statement["Condition"]["StringEquals"]
    assert condition["token.actions.githubusercontent.com:sub"] == "repo:<org>/<repo>:environment:<environment>"
    assert condition["token.actions.githubusercontent.com:aud"] == "sts.amazonaws.com"


# --- the diff comment nobody can forge -----------------------------------------------------------


def comment_workflow() -> tuple[dict, dict, str, str]:
    workflow = load("offline-diff-comment.yml")
    diff, comment = workflow["jobs"]["diff"], workflow["jobs"]["comment"]
    find = next(s for s in diff["steps"] if s.get("id") == "pr")["with"]["script"]
    post = comment["steps"][-1]["with"]["script"]
    return diff, comment, find, post


def test_the_comment_workflow_finds_the_pull_request_from_the_head_commit_and_checks_it_is_still_the_head():
    workflow = load("offline-diff-comment.yml")
    assert workflow["on"] == {"workflow_run": {"workflows": ["offline-diff"], "types": ["completed"]}}
    _, comment, find, _ = comment_workflow()
    assert "p.head.sha === run.head_sha" in find
    assert "p.head.repo.full_name === run.head_repository.full_name" in find
    assert "current.data.head.sha !== run.head_sha" in find
    # The number comes from the trusted job, never from an artifact of the pull request's run.
    assert comment["steps"][-1]["env"] == {"PR_NUMBER": "${{ needs.diff.outputs.number }}"}


def test_the_comment_is_computed_by_the_base_branchs_tool_on_the_pull_requests_stack_files_only():
    diff, comment, find, _ = comment_workflow()
    (checkout,) = [s for s in diff["steps"] if str(s.get("uses", "")).startswith("actions/checkout@")]
    # No `ref`: the default branch at the run's commit, the same code as this workflow file.
    assert checkout["with"] == {"persist-credentials": False}
    # The merge result's stack files (GitHub's test merge into the base), the head's only without one, flagged.
    assert "const merged = current.data.mergeable !== false && current.data.merge_commit_sha;" in find
    assert "github.rest.git.getTree({ owner, repo, tree_sha: merged || run.head_sha })" in find
    _, _, _, post = comment_workflow()
    assert "const unmerged = list('unmerged');" in post and "GitHub has no merge result" in post
    assert r"/^Pulumi\.[A-Za-z0-9_-]+\.yaml$/" in find
    run = next(s for s in diff["steps"] if s.get("name", "").startswith("Diff the pull request's stack files"))["run"]
    assert '.venv/bin/python -m stacks diff "$stack" --base HEAD --format markdown' in run
    # Nothing of the pull request's own run is downloaded: only this run's trusted artifact.
    downloads = [s for s in comment["steps"] if str(s.get("uses", "")).startswith("actions/download-artifact@")]
    assert [d["with"] for d in downloads] == [{"name": "trusted-offline-diff", "path": "diffs"}]


def test_the_comment_workflow_edits_only_its_own_bots_comments_and_flags_tooling_changes():
    _, _, find, post = comment_workflow()
    assert "c.user.type === 'Bot' && c.user.login === 'github-actions[bot]'" in post
    assert "ours.find(c => c.body && c.body.startsWith(marker))" in post
    for tool in ("stacks/offline/", "stacks/cli/", "stacks/__main__.py", ".github/workflows/", "requirements"):
        assert f"'{tool}'" in find, tool
    assert "changes the diff tooling itself" in post


# --- Dependabot ----------------------------------------------------------------------------------


def test_dependabot_keeps_actions_and_python_pins_current_and_passes_its_schema():
    path = PROJECT_DIR / ".github" / "dependabot.yml"
    config = yaml.safe_load(path.read_text())
    assert {u["package-ecosystem"]: u.get("directories", [u.get("directory")]) for u in config["updates"]} == {
        "github-actions": ["/"], "pip": ["/", "/policies"]}
    result = check_jsonschema("vendor.dependabot", str(path))
    assert result.exit_code == 0, (result.output, result.exception)


def test_the_comment_flags_every_changed_file_that_can_change_a_render():
    # A pull request touching the staging requirements, a CRD file or the prices changes what the program builds
    # as surely as a Python file: only tests, docs and Markdown are left unflagged.
    _, _, find, _ = comment_workflow()
    (pattern,) = re.findall(r"const notRenderInput = /(.+)/;", find)
    not_render_input = re.compile(pattern.replace("\\/", "/"))
    flagged = {f for f in ("llm_serving/serving/stage-requirements.txt", "llm_serving/platform/crds/x.yaml",
                           "llm_serving/gpu/prices.json", "llm_serving/serving/engine.py", "pyproject.toml",
                           "Pulumi.yaml", "docs/operations.md", "README.md", "tests/test_x.py")
               if not not_render_input.search(f)}
    assert flagged == {"llm_serving/serving/stage-requirements.txt", "llm_serving/platform/crds/x.yaml",
                       "llm_serving/gpu/prices.json", "llm_serving/serving/engine.py", "pyproject.toml", "Pulumi.yaml"}
    assert "changed.filter(f => !stackFile.test(f) && !notRenderInput.test(f))" in find


# --- references, the workflow table and zizmor's result -----------------------------------------

# A path of this repository, as the workflows, the reviewed lists and the delivery docs cite it (not inside a URL, a
# longer path or a placeholder). Upstream paths the docs cite (`provider/pkg/...` of pulumi-kubernetes) start
# elsewhere. The virtualenvs are created by the jobs themselves.
REPO_PATH = re.compile(r"(?<![\w./<>-])(?:\.\./)?((?:security|stacks|tools|tests|llm_serving|policies|examples|"
                       r"\.github)/[A-Za-z0-9_./-]*[A-Za-z0-9_])")
CREATED_BY_THE_JOB = ("policies/.venv",)


def cited_paths(text: str) -> set[str]:
    return {p for p in REPO_PATH.findall(text) if not p.startswith(CREATED_BY_THE_JOB)}


def delivery_docs() -> str:
    operations = (PROJECT_DIR / "docs" / "operations.md").read_text()
    return operations.split("## Pull requests and delivery", 1)[1].split("\n## Policy pack", 1)[0]


def test_every_path_the_workflows_the_reviewed_lists_and_the_delivery_docs_cite_exists():
    sources = {name: (WORKFLOWS / name).read_text() for name in WORKFLOW_FILES}
    sources |= {p.name: p.read_text() for p in (PROJECT_DIR / "security").glob("*.yaml")}
    sources["docs/operations.md (delivery)"] = delivery_docs()
    missing = sorted((source, path) for source, text in sources.items() for path in cited_paths(text)
                     if not (PROJECT_DIR / path).exists())
    assert missing == []
    assert len({p for text in sources.values() for p in cited_paths(text)}) >= 20


def test_the_path_check_finds_a_cited_file_that_does_not_exist():
    text = "# the policy is in\n# security/preview-role-policy.json and ../tools/scan.py, not pr-stacks/Pulumi.x.yaml"
    assert cited_paths(text) == {"security/preview-role-policy.json", "tools/scan.py"}
    assert not (PROJECT_DIR / "security" / "preview-role-policy.json").exists()


def test_the_workflow_table_has_one_row_per_job_with_its_permissions_and_concurrency():
    from tools import workflow_figures

    rows = {(row[0], row[2].split(" ")[0].strip("`")): row for row in workflow_figures.workflow_rows()}
    assert sorted(rows) == sorted((name, job_id) for name in WORKFLOW_FILES for job_id in load(name)["jobs"])
    assert rows[("preview.yml", "preview")][3:] == (
        "contents: read, id-token: write", "`preview-${{ matrix.stack }}`",
        "`vars.AWS_REGION`, `vars.AWS_ROLE_ARN`, `vars.PULUMI_ORG`, `vars.PULUMI_TEAM`",
        "`pulumi-preview-${{ matrix.stack }}-${{ github.event.pull_request.number }}`, cancels the running one")
    assert rows[("pulumi-up.yml", "up")][6] == "`pulumi-up-${{ inputs.stack }}`, never cancels"
    # No job reads a stored secret.
    assert not [row for row in rows.values() if "secrets." in row[5]]


def zizmor_executable() -> Path | None:
    """zizmor from the scanners' virtualenv (CI installs it before `make test`), or $ZIZMOR."""
    import os

    candidate = Path(os.environ.get("ZIZMOR", PROJECT_DIR / ".venv-scan" / "bin" / "zizmor"))
    return candidate if candidate.exists() else None


def test_the_recorded_zizmor_result_is_what_zizmor_finds_now():
    # zizmor takes well under a second offline; without the scanners' virtualenv, `make scan` makes the same
    # comparison (tools/scan.py scan_workflows).
    zizmor = zizmor_executable()
    if zizmor is None:
        pytest.skip("zizmor is not installed (.venv-scan); `make scan` compares the recorded result")
    from tools import scan

    ignores = scan.parse_zizmor_ignores(yaml.safe_load(scan.ZIZMOR_IGNORES_FILE.read_text()))
    findings = scan.zizmor_findings(scan.run_zizmor(str(zizmor)))
    recorded = scan.ZIZMOR_RESULT_FILE.read_text()
    assert scan.zizmor_result_document(scan.zizmor_version(str(zizmor)), findings, ignores) == recorded, (
        "run `make zizmor-result` then `make docs`")
    assert all(f["accepted"] for f in yaml.safe_load(recorded)["findings"])


def fake_zizmor(tmp_path: Path, findings: list[tuple[str, str, str]]) -> str:
    """An executable that prints what zizmor 1.32.0 prints (`--version`, and a JSON report of `findings`: audit,
    file, route key) without scanning anything."""
    import sys

    report = [{"ident": audit, "determinations": {"severity": "Low"}, "locations": [{
        "symbolic": {"kind": "Primary", "key": {"Local": {"verbatim_path": file}}, "annotation": "",
                     "route": {"route": [{"Key": "jobs"}, {"Key": job}, {"Key": "uses"}]}},
        "concrete": {"location": {"start_point": {"row": 1}}}}]} for audit, file, job in findings]
    script = tmp_path / "zizmor"
    script.write_text(f"#!{sys.executable}\nimport sys\n"
                      f"print('zizmor 1.32.0' if '--version' in sys.argv else {json.dumps(json.dumps(report))})\n")
    script.chmod(0o755)
    return str(script)


def test_make_scan_fails_when_zizmors_result_differs_from_the_recorded_one_and_rewrites_it_on_request(
        tmp_path, monkeypatch):
    from tools import scan

    deploy = [("self-repository", ".github/workflows/deploy.yml", job) for job in ("dev", "staging", "prod")]
    ignores = tmp_path / "zizmor-ignores.yaml"
    entry = {"audit": "self-repository", "file": ".github/workflows/deploy.yml", "where": ["jobs.*.uses"],
             "reason": "a reviewed reason of forty characters or more"}
    ignores.write_text(yaml.safe_dump([entry]))
    recorded = tmp_path / "zizmor-result.yaml"
    monkeypatch.setattr(scan, "ZIZMOR_RESULT_FILE", recorded)
    monkeypatch.setattr(scan, "PROJECT_DIR", tmp_path)
    monkeypatch.setattr(scan, "ZIZMOR_IGNORES_FILE", ignores)
    assert scan.scan_workflows(fake_zizmor(tmp_path, deploy), update_result=True) == (0, [
        "workflows (zizmor): 3 findings, 3 of them accepted in the ignore list",
        "zizmor-result.yaml updated: run `make docs` and commit both"])
    assert [f["where"] for f in yaml.safe_load(recorded.read_text())["findings"]] == [
        "jobs.dev.uses", "jobs.prod.uses", "jobs.staging.uses"]
    # The same result again passes; a workflow change that removes a finding fails until it is recorded.
    assert scan.scan_workflows(fake_zizmor(tmp_path, deploy))[0] == 0
    code, lines = scan.scan_workflows(fake_zizmor(tmp_path, deploy[:2]))
    assert code == 1 and any("zizmor-result.yaml differs from this run" in line for line in lines)


def test_every_input_given_to_a_pulumi_action_is_one_its_pinned_action_yml_declares():
    # The inputs of pulumi/actions and pulumi/auth-actions at the commits the workflows pin (tools/action_inputs.py
    # derives them from each action.yml): a misspelt input is ignored by the runner with a warning, not refused.
    declared = json.loads((PROJECT_DIR / "tests" / "fixtures" / "upstream" / "action-inputs.json").read_text())
    checked = 0
    for name in WORKFLOW_FILES:
        for job in load(name)["jobs"].values():
            for step in job.get("steps", []):
                pin = str(step.get("uses", ""))  # owner/name@commit (the release comment is YAML's, not the value's)
                if pin.split("@")[0] in ("pulumi/actions", "pulumi/auth-actions"):
                    assert pin in declared, f"{name}: {pin} has no derived inputs (run tools/action_inputs.py)"
                    assert sorted(set(step.get("with", {})) - set(declared[pin])) == [], f"{name}: {pin}"
                    checked += 1
    assert checked >= 6  # preview, drift and up each get a token and run Pulumi
