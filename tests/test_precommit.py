"""The pre-commit configuration runs what `make lint` and the docs tests run, with this repository's pins:
local hooks only, each command a Makefile target or a test path that exists."""

from __future__ import annotations

import re
import shlex

import yaml

from stacks.config.files import PROJECT_DIR

CONFIG = yaml.safe_load((PROJECT_DIR / ".pre-commit-config.yaml").read_text())
TARGETS = set(re.findall(r"^([a-z][a-z-]*):", (PROJECT_DIR / "Makefile").read_text(), re.MULTILINE))


def hooks() -> list[dict]:
    return [hook for repo in CONFIG["repos"] for hook in repo["hooks"]]


def test_every_hook_is_local_and_runs_in_this_repositorys_virtualenv():
    assert [repo["repo"] for repo in CONFIG["repos"]] == ["local"]
    for hook in hooks():
        assert hook["language"] == "system" and hook["pass_filenames"] is False, hook["id"]


def test_each_hook_runs_a_make_target_or_tests_that_exist():
    ran = set()
    for hook in hooks():
        argv = shlex.split(hook["entry"])
        if argv[0] == "make":
            assert set(argv[1:]) <= TARGETS, hook["id"]
            ran.update(argv[1:])
        else:
            assert argv[:3] == [".venv/bin/python", "-m", "pytest"], hook["id"]
            paths = [a.split("::")[0] for a in argv[3:] if not a.startswith("-") and a != "no:cacheprovider"]
            assert paths and all((PROJECT_DIR / p).exists() for p in paths), hook["id"]
            ran.update(paths)
    # Lint, and the generated-docs and schema staleness checks.
    assert {"lint", "tests/docs", "tests/package/test_package.py"} <= ran
