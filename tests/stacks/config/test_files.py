"""Stack files are parsed by libyaml where PyYAML has it (stacks/config/files.py parse_yaml): the same
documents and the same errors as the pure-Python `yaml.safe_load`."""

from __future__ import annotations

import pytest
import yaml

from stacks.config import files
from stacks.config.files import PROJECT_DIR, parse_yaml

COMMITTED = sorted([*PROJECT_DIR.glob("Pulumi.*.yaml"), *(PROJECT_DIR / "examples").glob("Pulumi.*.yaml")])


def test_the_installed_pyyaml_has_libyaml_so_stack_files_take_the_fast_parser():
    # PyYAML's wheels for Linux and macOS ship libyaml; without it parse_yaml is safe_load itself.
    assert files._FAST_LOADER is yaml.CSafeLoader


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: str(p.relative_to(PROJECT_DIR)))
def test_every_committed_stack_file_parses_to_the_document_safe_load_gives(path):
    text = path.read_text()
    document = parse_yaml(text)
    assert document == yaml.safe_load(text)
    assert isinstance(document["config"], dict) and document["config"]


@pytest.mark.parametrize("text", [
    "config:\n  llm-serving:environment: [prod\n",
    "config:\n\tllm-serving:environment: prod\n",
    "config: {llm-serving:environment: prod\n",
    "config:\n  a: b: c\n",
    # Tabs that libyaml takes as separators or scalar text and the pure parser refuses.
    "config:\n  llm-serving:environment: dev\t\n",
    "config:\n  llm-serving:environment: dev\t# a comment\n",
    "config:\n  llm-serving:environment:\tdev\n",
    "config:\n  llm-serving:zones: [a,\tb]\n",
    "config:\n  llm-serving:subnet: subnet-0cc0000000\t0000002\n",
])
def test_a_syntax_error_is_the_pure_parsers_error_with_its_line(text):
    with pytest.raises(yaml.YAMLError) as pure:
        yaml.safe_load(text)
    with pytest.raises(yaml.YAMLError) as ours:
        parse_yaml(text)
    assert type(ours.value) is type(pure.value)
    assert str(ours.value) == str(pure.value)


def test_values_resolve_as_safe_load_resolves_them():
    text = "a: yes\nb: 0o17\nc: 2026-12-01\nd: ~\ne: 1e3\nf: '1e3'\ng: [1, 2.5, null]\n"
    assert parse_yaml(text) == yaml.safe_load(text)
    assert parse_yaml(text)["a"] is True and parse_yaml(text)["f"] == "1e3"


def test_a_stack_file_that_is_not_utf8_is_one_line_naming_the_byte_and_line(tmp_path):
    from stacks.config import files as stack_files
    from stacks.config.problems import ConfigError

    path = tmp_path / "Pulumi.dev.yaml"
    path.write_bytes(b"config:\n  aws:region: us-east-1\n  # caf\xe9 (Latin-1)\n")
    with pytest.raises(ConfigError) as error:
        stack_files.read_stack_file(path)
    assert [p.line() for p in error.value.problems] == [
        'llm-serving:file: not UTF-8: byte 0xe9 on line 3 (got "Pulumi.dev.yaml"; expected a UTF-8 file (re-save it '
        'as UTF-8))']


def test_ctrl_c_in_any_command_is_one_line_and_status_130():
    import subprocess
    import sys

    from stacks.config.files import PROJECT_DIR

    # The entry point as `python -m stacks` runs it, its command interrupted as a SIGINT would. The command is a
    # stand-in module for stacks.cli whose main raises KeyboardInterrupt: what is under test is stacks/__main__.py in
    # a process of its own, without the CLI's imports (Pulumi and both providers, about a second of CPU).
    code = ("import runpy, sys, types\n"
            "def interrupted(argv=None):\n    raise KeyboardInterrupt\n"
            "cli = types.ModuleType('stacks.cli')\n"
            "cli.main = interrupted\n"
            "sys.modules['stacks.cli'] = cli\n"
            "runpy.run_module('stacks', run_name='__main__')\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=PROJECT_DIR, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr) == (130, "\ninterrupted\n")


def test_a_null_in_the_extending_file_removes_the_inherited_key_and_other_values_merge_as_before():
    from stacks.config.files import deep_merge

    base = {"efs": {"stagingNodeSelector": {"pool": "cpu", "team": "ml"}, "stagingNodeRoleArn": "arn:x"},
            "models": [{"name": "a", "replicas": 2, "route": {"host": "a.example"}}]}
    clone = {"efs": {"stagingNodeSelector": {"team": None}, "stagingNodeRoleArn": None},
             "models": [{"name": "a", "route": None}]}
    assert deep_merge(base, clone) == {"efs": {"stagingNodeSelector": {"pool": "cpu"}},
                                       "models": [{"name": "a", "replicas": 2}]}
    assert deep_merge(base, {"efs": None}) == {"models": base["models"]}
