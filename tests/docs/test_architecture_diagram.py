"""README's architecture diagram names exactly the components the renders create: each node's `<package>:
<Component>, ...` first line against the `llmserving:<package>:<Component>` types of prod's and the sandbox example's
renders. A component added, renamed or moved to another package fails here until the diagram says so."""

from __future__ import annotations

import re

from stacks.config.files import PROJECT_DIR
from tests.conftest import render_file

README = (PROJECT_DIR / "README.md").read_text()
DIAGRAM = re.search(r"^```mermaid\n(.*?)^```", README, re.M | re.S)
# A node label's first line: `pkg: Component, Component<br/>...`.
NAMED = re.compile(r"\[(\w+): ((?:[A-Z]\w+)(?:, [A-Z]\w+)*)(?:<br/>|\])")
# prod (existing cluster, routed) and sandbox (created cluster, installed Prometheus) between them create every
# component type; dev and staging add none (each stack's own golden render holds its types).
RENDERED_FILES = [PROJECT_DIR / "Pulumi.prod.yaml", PROJECT_DIR / "examples" / "Pulumi.sandbox.yaml"]


def _diagram_components() -> set[str]:
    assert DIAGRAM is not None, "README.md has no mermaid diagram"
    return {f"{package}:{name}" for package, names in NAMED.findall(DIAGRAM[1]) for name in names.split(", ")}


def _rendered_components() -> set[str]:
    return {r["type"].removeprefix("llmserving:") for path in RENDERED_FILES for r in render_file(path).resources
            if r["type"].startswith("llmserving:")}


def test_the_diagram_names_every_rendered_component_and_no_other():
    drawn, rendered = _diagram_components(), _rendered_components()
    assert rendered - drawn == set(), "components the renders create that the diagram leaves out"
    assert drawn - rendered == set(), "components the diagram draws that no render creates"


def test_the_diagram_shows_the_endpoint_picker_on_the_request_path():
    assert DIAGRAM is not None
    assert "endpoint pickers" in DIAGRAM[1] and "-->|/v1 only| RT -->" in DIAGRAM[1]
