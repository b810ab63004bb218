"""Every stack file, committed or cloned, passes the rules the Pulumi CLI itself applies."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml

from stacks import clone
from stacks.config import keys as cli_rules
from stacks.config.files import PROJECT_DIR
from stacks.offline import render
from tests.conftest import STACK_FILES

PROJECT = cli_rules.load_project(PROJECT_DIR)


@pytest.mark.parametrize("path", STACK_FILES, ids=lambda p: p.name)
def test_committed_stack_files_pass_the_cli_rules(path: Path):
    assert cli_rules.stack_file_problems(yaml.safe_load(path.read_text()), PROJECT, path.name) == []


def test_the_project_requires_the_environment_in_every_stack_file():
    assert cli_rules.required_keys(PROJECT) == ["llm-serving:environment"]


@pytest.mark.parametrize(("key", "parsed"), [
    ("aws:region", ("aws", "region")),
    ("llm-serving:gpuNodeGroup", ("llm-serving", "gpuNodeGroup")),
    ("llm-serving:config:models", ("llm-serving", "models")),  # the legacy form
    ("llm-serving:aws:region", None),
    ("region", None),
    (":region", None),
])
def test_keys_parse_as_the_cli_parses_them(key, parsed):
    assert cli_rules.parse_key(key) == parsed


def test_a_stack_file_the_cli_would_refuse_names_every_reason():
    document = {"config": {
        "llm-serving:aws:region": "eu-west-1",
        "llm-serving:apiKey": {"secure": ""},
        "aws:region": "eu-west-1",
    }}
    assert [p.line() for p in cli_rules.stack_file_problems(document, PROJECT, "Pulumi.x.yaml")] == [
        'llm-serving:config: the Pulumi CLI cannot parse this config key (got "llm-serving:aws:region"; expected '
        "<namespace>:<name> with exactly one colon, e.g. aws:region)",
        'llm-serving:apiKey: not a secret the CLI can read (got "a malformed secure value"; expected '
        "{secure: <ciphertext>})",
        "llm-serving:environment: declared in Pulumi.yaml without a default, so the CLI requires it in "
        "Pulumi.x.yaml itself (it does not follow extends) (got null; expected a value)",
    ]


def test_the_documented_clone_command_runs_as_printed_and_renders(stack_dir):
    text = (PROJECT_DIR / "docs" / "operations.md").read_text()
    (command,) = re.findall(r"^(\.venv/bin/python -m stacks clone .+)$", text, re.M)
    argv = shlex.split(command)[4:]
    base, new = argv[0], argv[1]
    overrides = [argv[i + 1] for i, arg in enumerate(argv) if arg == "--set"]
    path = clone.clone(base, new, overrides, stack_dir).path
    assert cli_rules.stack_file_problems(yaml.safe_load(path.read_text()), PROJECT, path.name) == []
    assert render.render_stack(path).stack == new
