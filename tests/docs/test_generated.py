"""The figures in README.md and docs/ are the program's own: every generated block is current, every
config key path the pages mention exists in the schema, and every command in a fenced block runs here
or is marked as needing the cloud (docs/testing.md, "Commands in the docs")."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import typing
from pathlib import Path

import pytest

from stacks import cli
from stacks.config import ServingStackArgs, fields_of
from stacks.config import files as stack_files
from stacks.config.files import PROJECT_DIR
from stacks.preflight import CHECKS
from tests.conftest import render_file
from tools import config_reference, doc_figures, docs

PAGES = docs.pages_text()
IDS = [page.relative_to(PROJECT_DIR).as_posix() for page in PAGES]
FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```", re.M | re.S)
SHELL_FENCES = {"sh", "bash", "shell", "console"}
NEEDS_THE_CLOUD = "# needs the cloud"
STACKS_COMMANDS = ([".venv/bin/python", "-m", "stacks"], ["python", "-m", "stacks"])
SUITE_COMMAND = [".venv/bin/python", "-m", "pytest"]


@pytest.fixture(scope="module")
def facts() -> docs.Facts:
    """The generators' inputs, rendering through the session's render cache."""
    return docs.Facts(render=render_file)


# --- generated blocks --------------------------------------------------------------------------------


@pytest.mark.parametrize("page", PAGES, ids=IDS)
def test_every_generated_block_is_current(page: Path, facts: docs.Facts):
    text = PAGES[page]
    # The test count is checked against this very session below, only when it collected the whole suite.
    assert docs.regenerate(page, text, facts, skip={"test-count"}) == text, "run `make docs`"


def _whole_suite(session: pytest.Session) -> bool:
    collected = {Path(item.path).resolve() for item in session.items}
    every_file = {p.resolve() for p in (PROJECT_DIR / "tests").rglob("test_*.py")}
    options = session.config.option
    return collected == every_file and not options.keyword and not options.markexpr and not options.deselect


def test_test_count_blocks_quote_the_collected_suite(request: pytest.FixtureRequest):
    if not _whole_suite(request.session):
        pytest.skip("the test count is checked only when the whole suite is collected (make test)")
    facts = docs.Facts(render=render_file, test_count=len(request.session.items))
    others = set(docs.GENERATORS) - {"test-count"}  # test_every_generated_block_is_current checks those
    for page, text in PAGES.items():
        assert docs.splice_blocks(text, facts, skip=others) == text, f"{page.name}: run `make docs`"


def test_every_generator_feeds_a_block_and_every_block_has_a_generator():
    used = {name for text in PAGES.values() for name in docs.block_names(text)}
    assert used == set(docs.GENERATORS)


def test_a_stale_block_is_rewritten_and_an_unknown_one_refused():
    facts = docs.Facts(test_count=1337)
    stale = "runs <!-- generated: test-count -->about 9 tests<!-- end generated: test-count --> offline"
    assert docs.splice_blocks(stale, facts) == (
        "runs <!-- generated: test-count -->about 1,350 tests<!-- end generated: test-count --> offline"
    )
    with pytest.raises(SystemExit, match="no generator for block.s. nonsense"):
        docs.splice_blocks("<!-- generated: nonsense -->1<!-- end generated: nonsense -->", facts)


def test_plan_console_blocks_are_rewritten_with_the_plans_output():
    command = (".venv/bin/python -m stacks plan --model meta-llama/Llama-3.1-8B-Instruct --gpu p5.4xlarge "
               "--max-model-len 4096")
    stale = f"```console\n$ {command}\nmodel   something else\n```\n"
    _, output = docs.run_plan(shlex.split(command)[4:])
    assert docs.splice_console(stale) == f"```console\n$ {command}\n{output}```\n"
    assert output.startswith("model                       meta-llama/Llama-3.1-8B-Instruct\n")


def test_prod_figures_are_the_planners_and_the_renders(facts: docs.Facts):
    """The figures the issue found contradicted, from the code that deploys them."""
    from llm_serving.stack import planning, verification
    from llm_serving.stack import timing as stack_timing
    from llm_serving.verification import await_seconds
    from stacks.environment import load_stack_file

    config = load_stack_file(stack_files.stack_file_path("prod"))[1]
    model = config.models[0]
    plan = planning.model_plan(config, model)
    assert doc_figures.prod_startup_budget(facts) == f"{plan.startup_budget_seconds // 10} × 10 s"
    assert doc_figures.prod_scale_down_window(facts) == f"{planning.scale_down_window(config, model, plan):,} s"
    assert doc_figures.prod_cold_start(facts) == f"{plan.cold_start_seconds:,} s"
    assert doc_figures.prod_read_speed(facts) == "500 MiB/s"
    # The node update ends where the timeline the docs print ends.
    minutes, seconds = stack_timing.node_update_timeline(config)[-1][0].split(":")
    assert doc_figures.prod_node_update(facts) == (
        f"about {round((int(minutes) * 60 + int(seconds)) / 60)} minutes, 2 extra nodes")
    # The weights Job, then the rollout's await, then the gate's (tests/test_workflows.py).
    gate = await_seconds(verification.deadline_seconds(verification.settings(config, model)))
    longest = 5683 + stack_timing.rollout_await_seconds(config, model) + gate
    assert doc_figures.prod_longest_await(facts) == f"{round(longest / 60)} minutes"
    assert "| endpoint picker | `--drain-timeout`; `terminationGracePeriodSeconds` | 1,805 s; 1,835 s |" in (
        doc_figures.prod_timeouts(facts)
    )


# --- config key paths --------------------------------------------------------------------------------


def _paths(model: type, prefix: str, out: set[str]) -> set[str]:
    for name, field in fields_of(model).items():
        path = f"{prefix}.{field.alias or name}" if prefix else field.alias or name
        out.add(path)
        for sub in config_reference._models_in(field.annotation):
            _paths(sub, path + ("[]" if typing.get_origin(field.annotation) is list else ""), out)
    return out


SCHEMA_PATHS = _paths(ServingStackArgs, "", set())
FIELD_NAMES = {segment.removesuffix("[]") for path in SCHEMA_PATHS for segment in path.split(".")}
FILE_SUFFIXES = {"py", "md", "yaml", "yml", "json", "txt", "toml"}  # `models.py` is a file, not a key
INLINE_CODE = re.compile(r"`([^`\n]+)`")
KEY_PATH = re.compile(
    r"(?:llm-serving:)?([a-z][A-Za-z0-9]*(?:\[[^\]]*\])?(?:\.[a-z][A-Za-z0-9]*(?:\[[^\]]*\])?)+)(?:\s*[:=].*)?"
)


PREFLIGHT_CHECK_IDS = frozenset(check.id for check in CHECKS)


def key_path_mentions(text: str) -> list[str]:
    """Dotted paths in inline code (outside fences) whose first segment is a config key: `models[].route.priority`,
    `edge.streamIdleTimeoutSeconds: 300`, `route.priority` (relative to the model). List selectors
    (`models[llama-70b]`) count as `[]`."""
    found = []
    for code in INLINE_CODE.findall(FENCE.sub("", text)):
        match = KEY_PATH.fullmatch(code.strip())
        if match and match[1].rsplit(".", 1)[1] not in FILE_SUFFIXES:
            path = re.sub(r"\[[^\]]*\]", "[]", match[1])
            # Preflight's check ids (`cluster.exists`) read like key paths and are not config.
            if path.split(".")[0].removesuffix("[]") in FIELD_NAMES and path not in PREFLIGHT_CHECK_IDS:
                found.append(path)
    return found


def key_path_exists(path: str) -> bool:
    """A full path, or the tail of one (a key named relative to its object)."""
    return any(full == path or full.endswith("." + path) for full in SCHEMA_PATHS)


@pytest.mark.parametrize("page", PAGES, ids=IDS)
def test_every_config_key_path_the_page_mentions_exists(page: Path):
    mentions = key_path_mentions(PAGES[page])
    assert [path for path in mentions if not key_path_exists(path)] == []


def test_key_path_check_catches_a_key_the_schema_rejects():
    text = ("set `models[].storage.readMibPerSecond` and `models[llama-70b].route.priority`, not "
            "`shutdown.drainTimeout` nor `models.py`")
    assert key_path_mentions(text) == ["models[].storage.readMibPerSecond", "models[].route.priority"]
    assert not key_path_exists("models[].storage.readMibPerSecond")
    assert key_path_exists("models[].route.priority")
    assert key_path_exists("weightsStorage.existingStorageClass.readMibPerSecond")
    assert key_path_exists("route.priority")
    assert not key_path_exists("edge.streamIdleTimeout")


def test_the_pages_mention_config_keys_at_all():
    assert len({p for text in PAGES.values() for p in key_path_mentions(text)}) > 100


# --- commands in fenced blocks -----------------------------------------------------------------------


def fenced_commands() -> list[tuple[str, str]]:
    """(page, command) of every command in a shell or console fence not marked as needing the cloud."""
    found = []
    for page, text in PAGES.items():
        for info, body in FENCE.findall(text):
            if info.split(" ")[0] not in SHELL_FENCES or body.startswith(NEEDS_THE_CLOUD):
                continue
            lines = body.splitlines()
            if info.startswith("console"):
                lines = [line[2:] for line in lines if line.startswith("$ ")]
            for line in lines:
                if line.strip() and not line.lstrip().startswith("#"):
                    found.append((page.relative_to(PROJECT_DIR).as_posix(), line))
    return found


COMMANDS = fenced_commands()


def _run_stacks(argv: list[str], project: Path, monkeypatch: pytest.MonkeyPatch) -> int:
    """A `python -m stacks` command in this process, in a scratch copy of the project (a clone writes there)."""
    monkeypatch.setattr(stack_files, "PROJECT_DIR", project)
    monkeypatch.chdir(project)
    return cli.main(argv)


def _make_recipe(argv: list[str]) -> list[list[str]]:
    """The commands `make <argv>` would run (a dry run; the virtualenv stamp taken as current)."""
    done = subprocess.run(["make", "-n", "--no-print-directory", "-o", ".venv/.installed", *argv], cwd=PROJECT_DIR,
                          env={k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")},
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return [shlex.split(line) for line in done.stdout.splitlines() if line.strip()]


@pytest.mark.parametrize(("page", "command"), COMMANDS, ids=[f"{p}: {c[:60]}" for p, c in COMMANDS])
def test_every_command_in_a_fence_runs_offline(page, command, stack_dir, monkeypatch, capsys, session_renders):
    argv = shlex.split(command, comments=True)
    expected = docs.expected_exit(command)
    if argv[0] == "make":
        recipe = _make_recipe(argv[1:])
    else:
        recipe = [argv]
    assert recipe, f"{page}: `{command}` runs nothing"
    for line in recipe:
        if line[:3] in STACKS_COMMANDS:
            # A render command's render is the session's of the same stack file (the subject is the command).
            assert _run_stacks(line[3:], stack_dir, monkeypatch) == expected, capsys.readouterr()
        elif line[0] != "echo":  # a target saying what it does
            # The suite itself is the one command a test cannot run; anything else needs a runner here,
            # or the block's first line `# needs the cloud`.
            assert line[:3] == SUITE_COMMAND, f"{page}: `{' '.join(line)}` is not run by any test"


def test_the_fenced_commands_include_render_clone_and_plan():
    shown = " | ".join(command for _, command in COMMANDS)
    for expected in ("make render STACK=dev", "make test", "-m stacks clone prod", "-m stacks plan --stack prod"):
        assert expected in shown


def test_cloud_blocks_are_marked_and_run_nothing_here():
    marked = [body for text in PAGES.values() for info, body in FENCE.findall(text)
              if info.split(" ")[0] in SHELL_FENCES and body.startswith(NEEDS_THE_CLOUD)]
    # The quickstart and the two deploy walkthroughs (README, operations.md), and the blocks that need an account, a
    # cluster or a deployed model: preflight, key rotation, CRD removal, verify against a real URL, a compile-cache
    # seed's log, the state change of moving a stack from EFS to S3, the upload of a LoRA adapter to S3, and the
    # promotion loop (a revision's gate report from the cluster, a pull request per step).
    assert len(marked) == 12
    assert sum("pulumi login" in body for body in marked) == 2
    assert not any(command.startswith(("pulumi ", "make preview", "make up")) for _, command in COMMANDS)
