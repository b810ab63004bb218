"""The documentation stays true: the generated configuration reference is current, every relative
link resolves (files and heading anchors), every alert has its runbook section, and the planner
example is the planner's real output."""

from __future__ import annotations

import io
import re
import shlex
import typing
from pathlib import Path

import pytest

from llm_serving.edge import edge_alert_groups
from llm_serving.gpu.alerts import gpu_health_rule_groups
from llm_serving.observability.serving_alerts import ModelSlo, alert_names, serving_rule_groups
from llm_serving.platform.pod_identity import refusal_alert_groups
from llm_serving.routing import Admission, RoutedModel, picker_alert_groups
from stacks.cli import plan as plan_cli
from stacks.config import ServingStackArgs, fields_of
from stacks.config.files import PROJECT_DIR
from tools import config_reference, planner_tables, verification_table

DOCS = PROJECT_DIR / "docs"
PAGES = [PROJECT_DIR / "README.md", *sorted(DOCS.glob("*.md"))]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.M | re.S)


def _models(model: type, seen: set[type]) -> set[type]:
    seen.add(model)
    for field in fields_of(model).values():
        for sub in config_reference._models_in(field.annotation):
            if sub not in seen:
                _models(sub, seen)
    return seen


def _anchor(heading: str) -> str:
    """GitHub's heading anchor: lowercase, punctuation but `_` dropped, spaces to hyphens (no heading here
    uses `_` for emphasis; inside code spans it is text)."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return {_anchor(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, re.M)}


def test_every_config_field_has_a_description():
    missing = [
        f"{model.__name__}.{name}"
        for model in _models(ServingStackArgs, set())
        for name, field in fields_of(model).items()
        if not field.description
    ]
    assert missing == []


def test_every_config_model_forbids_unknown_keys_and_is_frozen():
    for model in _models(ServingStackArgs, set()):
        assert model.__pydantic_config__["extra"] == "forbid", model.__name__
        assert model.__dataclass_params__.frozen is True, model.__name__


def test_configuration_reference_is_current():
    page = (DOCS / "configuration.md").read_text(encoding="utf-8")
    assert config_reference.splice(page) == page, "run `make config-docs`"


def test_reference_lists_nested_keys_with_their_paths():
    text = config_reference.reference()
    assert "| `gpuNodeGroup.scaling.minNodes` | int | **required** |" in text
    assert "| `gpuNodeGroup.subnets[].availabilityZone` | str | **required** |" in text
    assert typing.get_origin(fields_of(ServingStackArgs)["gpu_node_group"].annotation) is None


def test_anchor_rule_matches_githubs_for_the_headings_we_link():
    layout = "Layout: one package per domain, layering enforced"
    assert _anchor(layout) == "layout-one-package-per-domain-layering-enforced"
    assert _anchor("Autoscaling: `llm_serving/scaling/`, with the serving alerts and dashboards") == (
        "autoscaling-llm_servingscaling-with-the-serving-alerts-and-dashboards"
    )
    assert _anchor("GpuXidCritical") == "gpuxidcritical"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(PROJECT_DIR).as_posix())
def test_every_relative_link_resolves(page: Path):
    broken = []
    for target in LINK.findall(FENCE.sub("", page.read_text(encoding="utf-8"))):
        if re.match(r"^[a-z]+:", target):  # https:, mailto: ...
            continue
        path_part, _, fragment = target.partition("#")
        resolved = (page.parent / path_part).resolve() if path_part else page
        if not resolved.exists():
            broken.append(f"{target}: no such file")
        elif fragment and resolved.suffix == ".md" and fragment not in _anchors(resolved):
            broken.append(f"{target}: no heading #{fragment}")
    assert broken == []


def test_readme_is_the_front_door_and_links_every_docs_page():
    readme = (PROJECT_DIR / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 260
    for page in sorted(DOCS.glob("*.md")):
        assert f"](docs/{page.name})" in readme, page.name


def _emitted_alerts() -> set[str]:
    slo = ModelSlo(
        served_model_name="m", deployment_name="m", namespace="n", max_replicas=2, ttft_p95_seconds=2,
        itl_p95_seconds=0.1, kv_offload_gib=428,  # a CPU KV tier: its hit-rate and pod-memory alerts
    )  # fmt: skip
    group = ModelSlo(
        served_model_name="g", deployment_name="g", namespace="n", max_replicas=2, ttft_p95_seconds=2,
        itl_p95_seconds=0.1, group_size=2,
    )  # fmt: skip
    groups = gpu_health_rule_groups(runbook_base_url="https://x") + serving_rule_groups(
        [slo, group], runbook_base_url="https://x"
    )
    routed = RoutedModel(name="m", namespace="n", pod_selector={}, port=8000, drain_seconds=60,
                         admission=Admission(True, 2, 7, 1.0, 7, 2, scale_out_seconds=840),
                         ttft_objective_seconds=2)
    waking = RoutedModel(name="w", namespace="n", pod_selector={}, port=8000, drain_seconds=60,
                         admission=Admission(True, 901, 7, 1.0, 7, 2, scale_out_seconds=840),
                         ttft_objective_seconds=2, wake_seconds=901)
    groups += picker_alert_groups((routed, waking), replicas=2, runbook_base_url="https://x")
    groups += edge_alert_groups("llm-serving", "envoy-gateway-system", "https://x", by_model=True)
    groups += refusal_alert_groups("https://x")
    return set(alert_names(groups))


def test_every_alert_has_exactly_one_runbook_section_at_its_link_anchor():
    text = FENCE.sub("", (DOCS / "runbooks.md").read_text(encoding="utf-8"))
    sections = re.findall(r"^### (.+)$", text, re.M)
    emitted = _emitted_alerts()
    assert len(emitted) == 41
    assert sorted(sections) == sorted(emitted)
    # Each alert links to <base>#<alert lowercased>; the section's anchor must be exactly that.
    assert {name.lower() for name in emitted} <= _anchors(DOCS / "runbooks.md")


def test_planner_examples_are_the_planners_real_output():
    blocks = re.findall(r"^```console\n\$ (.+?)\n(.*?)^```", (DOCS / "capacity-planner.md").read_text(), re.M | re.S)
    assert len(blocks) == 4
    for command, shown in blocks:
        argv = shlex.split(command, comments=True)
        assert argv[:4] == [".venv/bin/python", "-m", "stacks", "plan"]
        out, err = io.StringIO(), io.StringIO()
        plan_cli.main(argv[4:], out, err)
        assert out.getvalue() + err.getvalue() == shown


def test_calibration_and_benchmark_tables_are_the_planners_real_figures():
    page = (DOCS / "capacity-planner.md").read_text()
    assert planner_tables.splice(page) == page, "run `make planner-docs`"
    assert page.count("| [github.com](") >= 15


@pytest.mark.parametrize("stack", ["prod", "dev"])
def test_readme_cost_figures_are_the_stacks_own(stack):
    from llm_serving.stack import planning
    from stacks import environment
    from stacks.cli.plan import _replica_cost, stack_model_performance
    from stacks.config import files as stack_files

    _, config = environment.load_stack_file(stack_files.stack_file_path(stack))
    total = planning.stack_cost(config)
    (model,) = config.models
    result = planning.model_plan(config, model)
    cost = _replica_cost(result)
    found = stack_model_performance(config, model, result, cost, prompt_tokens=1024, output_tokens=256)
    row = (
        f"| {stack} | {total.nodes_at_min} / {total.nodes_at_max} {total.instance_type} | "
        f"${total.at(total.nodes_at_min):.2f} / ${total.at(total.nodes_at_max):.2f} | {model.name} "
    )
    figures = (
        f"${cost['usd_per_replica_hour']:.2f}; ${found['usd_per_million_output_tokens']:.2f} at "
        f"{found['slo_concurrency']} requests, {found['tpot_ms']} ms per token, "
        f"{found['output_tokens_per_second']:,} tokens/s |"
    )
    (line,) = [line for line in (PROJECT_DIR / "README.md").read_text().splitlines() if line.startswith(row)]
    assert line.endswith(figures)


def test_verification_table_is_the_stacks_own_settings():
    page = (DOCS / "verification.md").read_text()
    assert verification_table.splice(page) == page, "run `make planner-docs`"
    assert "| prod | llama-70b | gate | 512 | 1,024 / 256 |" in page
