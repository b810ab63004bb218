"""llm_serving/stack/chart_images.py against the renders: the Helm releases it says a stack installs are the ones the
program creates, and once a stack carries every digest `pin-images` writes, each release and the Envoy proxy pull
exactly those digests, through keys the pinned charts have."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from llm_serving.platform import chart_images as platform_images
from llm_serving.platform import versions
from llm_serving.stack import chart_images
from policies import rules
from stacks.environment import load_stack_file
from tests.conftest import PROJECT_DIR, STACK_FILES, render_file
from tests.support import reference, stack_variants

EXAMPLES = sorted((PROJECT_DIR / "examples").glob("Pulumi.*.yaml"))


def releases(result: Any) -> list[tuple[str, str]]:
    """(chart, version) of each Helm release of a render, by the chart's name."""
    return sorted((r["inputs"]["chart"].rsplit("/", 1)[-1], r["inputs"]["version"])
                  for r in result.resources if r["type"] == rules.HELM_RELEASE)


@pytest.mark.parametrize("path", [*STACK_FILES, *EXAMPLES], ids=lambda p: p.name)
def test_the_charts_it_lists_are_the_releases_the_program_creates(path: Path):
    config = load_stack_file(path)[1]
    listed = sorted((chart.pin.chart, chart.version) for chart in chart_images.installed_charts(config))
    assert listed == releases(render_file(path))


def test_the_alb_edge_installs_its_load_balancer_controller_with_its_image(variants_dir):
    path = stack_variants.prod_behind_an_alb(variants_dir)
    config = load_stack_file(path)[1]
    (alb,) = [c for c in chart_images.installed_charts(config) if c.pin is versions.AWS_LOAD_BALANCER_CONTROLLER]
    assert alb.images == versions.AWS_LOAD_BALANCER_CONTROLLER.images
    # No Envoy Gateway, so no Envoy proxy to pin either.
    assert versions.ENVOY_PROXY_IMAGE not in chart_images.chart_images(config)
    assert sorted((c.pin.chart, c.version) for c in chart_images.installed_charts(config)) == releases(
        render_file(path))


def _at(values: Any, key: str) -> Any:
    for part in key.split("."):
        values = values[part]
    return values


def test_a_pinned_stack_pulls_every_chart_image_by_the_digest_it_names(variants_dir):
    path = stack_variants.pinned(variants_dir, "prod")
    config = load_stack_file(path)[1]
    result = render_file(path)
    by_chart = {r["inputs"]["chart"].rsplit("/", 1)[-1]: r["inputs"] for r in result.resources
                if r["type"] == rules.HELM_RELEASE}
    checked = 0
    for chart in chart_images.installed_charts(config):
        values = by_chart[chart.pin.chart]["values"]
        assert reference.helm_value_errors(chart.pin.chart, chart.version.removeprefix("v"), values) == []
        for image in chart.images:
            digest = config.chart_image_digests[image.reference]
            if image is versions.ENVOY_PROXY_IMAGE:
                proxy = result.manifest("EnvoyProxy", "llm-serving-proxy")
                assert _at(proxy, image.key) == f"{image.reference}@{digest}"
            else:
                assert _at(values, image.key) == platform_images.pinned_value(image, digest)
            checked += 1
    assert checked == len(config.chart_image_digests) >= 10


def test_an_entry_for_no_image_the_stack_runs_is_named():
    path = next(p for p in STACK_FILES if p.name == "Pulumi.dev.yaml")
    config = load_stack_file(path)[1]
    stale = "docker.io/envoyproxy/gateway:v1.8.0"
    running = chart_images.chart_images(config)[0].reference
    digest = "sha256:" + "a" * 64
    with_entries = replace(config, chart_image_digests={stale: digest, running: digest})
    assert chart_images.unused_digests(with_entries) == [stale]
    # A chart at another version than its pin: its images are not the listed ones, so none is running.
    other = replace(config, addons=replace(config.addons, dcgm_exporter=replace(
        config.addons.dcgm_exporter, chart_version="4.8.1")))
    (dcgm,) = [c for c in chart_images.installed_charts(other) if c.pin is versions.DCGM_EXPORTER]
    assert (dcgm.known, dcgm.images) == (False, ())
