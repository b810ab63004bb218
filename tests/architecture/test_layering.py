"""The layering contracts in pyproject.toml hold on the tree, and they fail on a wrong import.

import-linter is run the way `make lint` runs it, so a contract that could never break (a typo in a
module name, a wildcard that matches nothing) shows up here rather than as a silently green lint.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from stacks.config.files import PROJECT_DIR

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
def tree(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A copy of the program's packages and pyproject.toml that a test may break (removed after the module,
    rather than by the cleanup at the end of a later run)."""
    root = tmp_path_factory.mktemp("tree")
    for package in PACKAGES:
        shutil.copytree(PROJECT_DIR / package, root / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(PROJECT_DIR / "pyproject.toml", root / "pyproject.toml")
    yield root
    shutil.rmtree(root, ignore_errors=True)


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
    contracts = len(tomllib.loads((tree / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"])
    assert f"Contracts: {contracts} kept, 0 broken." in result.stdout


# Each wrong import and the messages it must cause. All are injected into one copy of the tree and
# linted once: every message names its own importer and imported module, so each case still shows
# that its own import breaks its contract, for one import-linter run instead of one per case.
WRONG_IMPORTS = [
    # A domain package reaching into another one: both the layer and the privacy contract break.
    ("llm_serving/gpu/alerts.py", "from llm_serving.serving.engine import PORT",
     ["llm_serving.gpu is not allowed to import llm_serving.serving",
      "Illegal imports of protected package llm_serving.serving.engine"]),
    # A pure module importing Pulumi.
    ("llm_serving/serving/capacity.py", "import pulumi",
     ["llm_serving.serving.capacity is not allowed to import pulumi"]),
    # A component importing the layer above it.
    ("llm_serving/platform/helm.py", "from stacks import config",
     ["llm_serving.platform is not allowed to import stacks"]),
    # The policy pack importing the program.
    ("policies/rules.py", "from llm_serving import serving",
     ["policies is not allowed to import llm_serving"]),
    # stacks reaching past a package's public names.
    ("llm_serving/stack/rules/models.py", "from llm_serving.edge.objects import Route",
     ["Illegal imports of protected package llm_serving.edge.objects"]),
    # The schema reaching up into the checks, and the checks into the offline tools.
    ("stacks/config/files.py", "from stacks import checks",
     ["stacks.config is not allowed to import stacks.checks"]),
    ("llm_serving/stack/planning.py", "from stacks.offline import awaits",
     ["llm_serving.stack is not allowed to import stacks"]),
    # The program (or any layer but preflight) growing its own path to the account.
    ("stacks/program.py", "import boto3",
     ["stacks.program is not allowed to import boto3"]),
    ("stacks/checks/prerequisites.py", "from stacks.preflight import intent",
     ["stacks.checks is not allowed to import stacks.preflight"]),
    # The verification probe, which runs alone on a bare Python image, importing the project.
    ("llm_serving/verification/probe.py", "from llm_serving.platform import versions",
     ["llm_serving.verification.probe is not allowed to import llm_serving.platform"]),
    # The drain barrier's preStop, which runs alone as `python -c` on a slim Python image, importing the project.
    ("llm_serving/gpu/barrier_prestop.py", "import yaml",
     ["llm_serving.gpu.barrier_prestop is not allowed to import yaml"]),
    # One domain section of the schema importing the root that composes it.
    ("stacks/config/problems.py", "from stacks.config.files import PROJECT_DIR",
     ["stacks.config.problems is not allowed to import stacks.config.files"]),
]  # fmt: skip


@pytest.fixture(scope="module")
def broken_lint(tmp_path_factory: pytest.TempPathFactory) -> subprocess.CompletedProcess[str]:
    """import-linter on a copy of the tree with every wrong import of WRONG_IMPORTS injected."""
    root = tmp_path_factory.mktemp("broken")
    for package in PACKAGES:
        shutil.copytree(PROJECT_DIR / package, root / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(PROJECT_DIR / "pyproject.toml", root / "pyproject.toml")
    for module, line, _ in WRONG_IMPORTS:
        _break(root, module, line)
    linted = _lint(root)
    shutil.rmtree(root)  # its files are the lint's input only; removed now rather than by a later run's cleanup
    return linted


@pytest.mark.parametrize(("module", "line", "broken"), WRONG_IMPORTS)
def test_a_wrong_import_breaks_its_contract(broken_lint: subprocess.CompletedProcess[str], module: str, line: str,
                                            broken: list[str]) -> None:
    assert broken_lint.returncode == 1
    for message in broken:
        assert message in broken_lint.stdout


_EDGES = """
import json, sys
import grimp
graph = grimp.build_graph(*sys.argv[1:], include_external_packages=False, cache_dir=None)
print(json.dumps({m: sorted(graph.find_modules_directly_imported_by(m)) for m in graph.modules}))
"""


def _import_edges(project: Path) -> dict[str, list[str]]:
    """Each module of the tree and the project modules it imports, read by grimp in a fresh process
    (this one has already imported the packages from the checkout)."""
    result = subprocess.run([sys.executable, "-c", _EDGES, *PACKAGES], cwd=project, capture_output=True,
                            text=True, check=True)  # fmt: skip
    return json.loads(result.stdout)


def _import_cycles(edges: dict[str, list[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan), each sorted: the import cycles."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in edges.get(module, []):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                cycles.append(sorted(group))

    for module in sorted(edges):
        if module not in index:
            visit(module)
    return cycles


def test_no_module_imports_itself_through_others() -> None:
    assert _import_cycles(_import_edges(PROJECT_DIR)) == []


def test_the_cycle_finder_reports_a_two_module_cycle(tree: Path) -> None:
    # The shape issue 21 removed: a planner's helper importing the planner that imports it.
    path = _break(tree, "llm_serving/stack/memo.py", "from llm_serving.stack import planning")
    original = (PROJECT_DIR / "llm_serving/stack/memo.py").read_text(encoding="utf-8")
    try:
        cycles = _import_cycles(_import_edges(tree))
    finally:
        path.write_text(original, encoding="utf-8")
    assert cycles == [["llm_serving.stack.memo", "llm_serving.stack.planning"]]
