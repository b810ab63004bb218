"""CRDs the program applies itself come from files in the repository: preview and up apply exactly the
reviewed bytes, and nothing is downloaded at deploy time."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from llm_serving.platform import crd_manifest_text, versions
from tests.support import reference

REPO_ROOT = Path(__file__).resolve().parents[2]
# A remote manifest: any http(s) URL ending in a YAML or JSON file name (Helm repositories are named by
# repository URL plus a pinned chart version, never by a manifest file).
REMOTE_MANIFEST = re.compile(r"^https?://\S+\.(ya?ml|json)(\?\S*)?$", re.IGNORECASE)
# Inputs through which the kubernetes provider reads manifests (yaml/v2 ConfigFile `file`, ConfigGroup
# `files`, and the v1 forms).
MANIFEST_INPUTS = ("file", "files")


def _strings(node: Any, path: str) -> Iterator[tuple[str, str]]:
    if isinstance(node, str):
        yield path, node
    elif isinstance(node, dict):
        for key, value in node.items():
            yield from _strings(value, f"{path}.{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _strings(value, f"{path}[{index}]")


def remote_manifest_inputs(resources: list[dict[str, Any]]) -> list[str]:
    """Every resource input that names a remote manifest, or a yaml resource reading from a URL."""
    found = []
    for resource in resources:
        where = f"{resource['type']}::{resource['name']}"
        for path, value in _strings(resource["inputs"], "inputs"):
            if REMOTE_MANIFEST.match(value):
                found.append(f"{where} {path}: {value}")
        if resource["type"].startswith("kubernetes:yaml/"):
            for key in MANIFEST_INPUTS:
                for path, value in _strings(resource["inputs"].get(key), f"inputs.{key}"):
                    if "://" in value and not REMOTE_MANIFEST.match(value):
                        found.append(f"{where} {path}: {value}")
    return found


def test_no_resource_input_names_a_remote_manifest(rendered):
    for stack, result in rendered.items():
        assert remote_manifest_inputs(result.resources) == [], stack


def test_the_remote_manifest_check_catches_the_release_urls_applied_before():
    resources = [
        {"type": "kubernetes:yaml/v2:ConfigFile", "name": "edge-inference-pool-crds", "inputs": {
            "file": "https://github.com/kubernetes-sigs/gateway-api-inference-extension/releases/download/v1.6.0/"
                    "manifests.yaml"}},
        {"type": "kubernetes:yaml/v2:ConfigGroup", "name": "g", "inputs": {"files": ["https://example.com/crds"]}},
        {"type": "kubernetes:helm.sh/v3:Release", "name": "keda", "inputs": {
            "repositoryOpts": {"repo": "https://kedacore.github.io/charts"}, "version": "2.20.2"}},
    ]
    assert remote_manifest_inputs(resources) == [
        "kubernetes:yaml/v2:ConfigFile::edge-inference-pool-crds inputs.file: https://github.com/kubernetes-sigs/"
        "gateway-api-inference-extension/releases/download/v1.6.0/manifests.yaml",
        "kubernetes:yaml/v2:ConfigGroup::g inputs.files[0]: https://example.com/crds",
    ]


def test_crd_manifests_are_applied_from_the_packaged_files_content(rendered):
    applied = {r["inputs"]["yaml"] for result in rendered.values() for r in result.resources
               if r["type"] == "kubernetes:yaml/v2:ConfigGroup"}
    assert applied == {crd_manifest_text(versions.INFERENCE_POOL_CRDS_FILE),
                       crd_manifest_text(versions.LLM_D_ROUTER_CRDS_FILE)}
    assert not any("file" in r["inputs"] or "files" in r["inputs"] for result in rendered.values()
                   for r in result.resources if r["type"].startswith("kubernetes:yaml/"))


def test_crd_manifests_keep_the_state_of_the_config_files_that_applied_them_before(rendered):
    carriers = [r for r in rendered["prod"].resources if r["type"] == "kubernetes:yaml/v2:ConfigGroup"]
    assert carriers and all(r["options"]["aliases"] == [{"type": "kubernetes:yaml/v2:ConfigFile"}] for r in carriers)


def _documents(name: str) -> list[dict[str, Any]]:
    return list(yaml.safe_load_all(crd_manifest_text(name)))


def test_crd_manifests_carry_the_pinned_crds_without_prose():
    kinds = {name: [(d["spec"]["group"], d["spec"]["names"]["kind"]) for d in _documents(name)]
             for name in (versions.INFERENCE_POOL_CRDS_FILE, versions.LLM_D_ROUTER_CRDS_FILE)}
    assert kinds == {
        versions.INFERENCE_POOL_CRDS_FILE: [("inference.networking.k8s.io", "InferencePool"),
                                            ("inference.networking.x-k8s.io", "InferencePoolImport")],
        versions.LLM_D_ROUTER_CRDS_FILE: [("llm-d.ai", "InferenceModelRewrite"), ("llm-d.ai", "InferenceObjective")],
    }
    for name in kinds:
        text = crd_manifest_text(name)
        assert "description:" not in text, name


def test_crd_manifests_hold_the_same_schemas_the_tests_validate_against():
    # The applied schema, minus the CEL rules the fixtures drop, is the fixture the renders are checked with:
    # what the tests accept is what the API server will accept.
    for name in (versions.INFERENCE_POOL_CRDS_FILE, versions.LLM_D_ROUTER_CRDS_FILE):
        for crd in _documents(name):
            spec = crd["spec"]
            fixture = reference._load(f"crds/{spec['group']}_{spec['names']['plural']}.json")
            for version in spec["versions"]:
                applied = _without(version["schema"]["openAPIV3Schema"], "x-kubernetes-validations")
                assert applied == fixture["versions"][version["name"]]["schema"], (name, version["name"])


def _without(node: Any, key: str) -> Any:
    if isinstance(node, dict):
        return {k: _without(v, key) for k, v in node.items() if k != key}
    if isinstance(node, list):
        return [_without(v, key) for v in node]
    return node
