"""The layering contracts in pyproject.toml hold on the tree, and they fail on a wrong import.

import-linter is run the way `make lint` runs it, so a contract that could never break (a typo in a
module name, a wildcard that matches nothing) shows up here rather than as a silently green lint.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from stacks.loader import PROJECT_DIR

LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
# The packages the contracts cover, as pyproject.toml names them.
PACKAGES = tomllib.loads((PROJECT_DIR / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"][
    "root_packages"
]


def _lint(project: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--config", str(project / "pyproject.toml")],
        cwd=project, capture_output=True, text=True, check=False,
    )  # fmt: skip


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the program's packages and pyproject.toml that a test may break."""
    root = tmp_path_factory.mktemp("tree")
    for package in PACKAGES:
        shutil.copytree(PROJECT_DIR / package, root / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(PROJECT_DIR / "pyproject.toml", root / "pyproject.toml")
    return root


def _break(tree: Path, module: str, line: str) -> Path:
    path = tree / module
    original = path.read_text(encoding="utf-8")
    future = "from __future__ import annotations\n"
    assert future in original, f"{module} has no anchor line for the injected import"
    path.write_text(original.replace(future, f"{future}{line}\n", 1), encoding="utf-8")
    return path


def test_every_contract_is_kept_on_the_tree(tree: Path) -> None:
    result = _lint(tree)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Contracts: 11 kept, 0 broken." in result.stdout


@pytest.mark.parametrize(
    ("module", "line", "broken"),
    [
        # A domain package reaching into another one: both the layer and the privacy contract break.
        ("components/gpu/alerts.py", "from components.serving.engine import PORT",
         ["components.gpu is not allowed to import components.serving",
          "Illegal imports of protected package components.serving.engine"]),
        # A pure module importing Pulumi.
        ("components/serving/capacity.py", "import pulumi",
         ["components.serving.capacity is not allowed to import pulumi"]),
        # A component importing the layer above it.
        ("components/platform/helm.py", "from stacks import config",
         ["components.platform is not allowed to import stacks"]),
        # The policy pack importing the program.
        ("policies/rules.py", "from components import serving",
         ["policies is not allowed to import components"]),
        # stacks reaching past a package's public names.
        ("stacks/checks.py", "from components.edge.objects import Route",
         ["Illegal imports of protected package components.edge.objects"]),
    ],
)  # fmt: skip
def test_a_wrong_import_breaks_its_contract(tree: Path, module: str, line: str, broken: list[str]) -> None:
    path = _break(tree, module, line)
    original = (PROJECT_DIR / module).read_text(encoding="utf-8")
    try:
        result = _lint(tree)
    finally:
        path.write_text(original, encoding="utf-8")
    assert result.returncode == 1
    for message in broken:
        assert message in result.stdout
