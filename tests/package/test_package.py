"""The library as others adopt it: installable by pip, its components analyzable by Pulumi's own schema analyzer
for every language, the committed schema current, and both examples (a Python program on the installed library,
a YAML program through the package) building the same deployment."""

from __future__ import annotations

import copy
import json
import runpy
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from llm_serving import ServingStack, package
from llm_serving.platform.args import fields_of, is_args_type
from stacks.offline.mocks import RenderMocks
from stacks.offline.render import record
from tests.support.components import run
from tools import package_schema

ROOT = Path(__file__).resolve().parents[2]
PYTHON_EXAMPLE = ROOT / "examples" / "existing-cluster-python"
YAML_EXAMPLE = ROOT / "examples" / "existing-cluster-yaml" / "Pulumi.yaml"
SECRETS = {"apiKey": "an-api-key-of-32-characters-----", "hfToken": "hf_" + "t" * 34}


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    """The package's schema (package.schema()), analyzed once for the module's readers: each analysis of the
    components takes about half a second. A reader builds what it needs from it and changes nothing."""
    return package.schema()


def test_the_committed_schema_is_the_analyzers_own():
    assert package_schema.SCHEMA_FILE.read_text(encoding="utf-8") == package_schema.text(), "run `make schema`"


def _properties(schema: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    found = []
    for token, resource in schema["resources"].items():
        for section in ("inputProperties", "properties"):
            found += [(f"{token}.{name}", prop) for name, prop in resource.get(section, {}).items()]
    for token, type_ in schema["types"].items():
        found += [(f"{token}.{name}", prop) for name, prop in type_.get("properties", {}).items()]
    return found


def test_every_public_component_has_a_schema_with_no_untyped_property(schema):
    assert sorted(schema["resources"]) == sorted(f"llm-serving:index:{c.__name__}" for c in package.COMPONENTS)
    untyped = [name for name, prop in _properties(schema)
               if "type" not in prop and "$ref" not in prop]
    assert untyped == []
    # Every referenced type is defined: nothing the analyzer could only name.
    refs = {prop.get("$ref") or prop.get("items", {}).get("$ref") or prop.get("additionalProperties", {}).get("$ref")
            for _, prop in _properties(schema)} - {None}
    assert {ref.removeprefix("#/types/") for ref in refs} <= set(schema["types"])


def test_an_input_is_required_in_every_language_exactly_when_python_requires_it(schema):
    for token, type_ in schema["types"].items():
        cls = next((c for c in _args_types(ServingStack) if c.__name__ == token.rsplit(":", 1)[1]), None)
        if cls is None or "enum" in type_:
            continue
        required = {f.alias for f in fields_of(cls).values() if f.is_required()}
        assert set(type_.get("required", [])) == required, token


def _args_types(component: type) -> set[type]:
    import typing

    seen: set[type] = set()

    def walk(cls: type) -> None:
        if cls in seen:
            return
        seen.add(cls)
        for field in fields_of(cls).values():
            stack = [field.annotation]
            while stack:
                annotation = stack.pop()
                if is_args_type(annotation):
                    walk(annotation)
                stack.extend(typing.get_args(annotation))

    walk(typing.get_type_hints(component.__init__)["args"])
    return seen


def json_schema(schema: dict[str, Any], token: str) -> dict[str, Any]:
    """A Pulumi package schema's component inputs as JSON Schema: objects closed, enums by value, `$ref`s to
    definitions (what a YAML program's `properties` must satisfy)."""

    def convert(prop: dict[str, Any]) -> dict[str, Any]:
        if "$ref" in prop:
            return {"$ref": "#/definitions/" + prop["$ref"].rsplit(":", 1)[1]}
        kind = prop["type"]
        if kind == "array":
            return {"type": "array", "items": convert(prop["items"])}
        if kind == "object" and "additionalProperties" in prop:
            return {"type": "object", "additionalProperties": convert(prop["additionalProperties"])}
        return {"type": kind}

    def closed(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
        return {"type": "object", "additionalProperties": False, "required": required,
                "properties": {name: convert(prop) for name, prop in properties.items()}}

    definitions = {}
    for name, type_ in schema["types"].items():
        short = name.rsplit(":", 1)[1]
        definitions[short] = ({"enum": [e["value"] for e in type_["enum"]]} if "enum" in type_
                              else closed(type_.get("properties", {}), type_.get("required", [])))
    resource = schema["resources"][token]
    return {**closed(resource["inputProperties"], resource.get("requiredInputs", [])), "definitions": definitions}


def _yaml_properties() -> dict[str, Any]:
    program = yaml.safe_load(YAML_EXAMPLE.read_text(encoding="utf-8"))
    return program["resources"]["llm"]["properties"]


def test_the_yaml_example_sets_only_what_the_schema_has(schema):
    validator = jsonschema.Draft7Validator(json_schema(schema, "llm-serving:index:ServingStack"))
    assert [error.message for error in validator.iter_errors(_yaml_properties())] == []
    wrong = copy.deepcopy(_yaml_properties())
    wrong["models"][0]["maxModelLenght"] = 8192
    wrong["gpuNodeGroup"]["mode"] = "borrowed"
    assert sorted(error.message for error in validator.iter_errors(wrong)) == [
        "'borrowed' is not one of ['create', 'existing']",
        "Additional properties are not allowed ('maxModelLenght' was unexpected)"]


def _kind_names(result: Any) -> list[tuple[str, str]]:
    return sorted((r["type"], r["name"]) for r in result.resources if not r["type"].startswith("pulumi:providers"))


def test_the_yaml_example_builds_through_the_package_what_the_python_example_builds():
    # What the package's provider hands the component: the YAML properties, config references resolved.
    inputs = {**_yaml_properties(), **SECRETS}
    hosted = package.provider().map_inputs(inputs, None)
    through_package = run(lambda: ServingStack("llm", hosted))
    config = {f"llm-on-our-cluster:{k}": v for k, v in SECRETS.items()}
    python = record(lambda: runpy.run_path(str(PYTHON_EXAMPLE / "__main__.py"), run_name="__main__"),
                    stack="test", mocks=RenderMocks("1.34"), project="llm-on-our-cluster", config=config,
                    secret_keys=list(config))
    assert _kind_names(through_package) == _kind_names(python)
    assert ("kubernetes:apps/v1:Deployment", "llama-8b-deployment") in _kind_names(python)


def test_the_build_pin_is_the_one_the_tests_build_with():
    build = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["build-system"]["requires"]
    pins = [line.strip() for line in (ROOT / "requirements-dev.txt").read_text().splitlines()
            if line.startswith("setuptools==")]
    assert build == pins


def test_the_python_example_runs_on_the_installed_wheel_outside_the_repository(tmp_path: Path):
    # The wheel `pip install .` installs, unpacked into a directory of its own: only llm_serving, with its data.
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet",
                            "--wheel-dir", str(tmp_path / "dist"), str(ROOT)], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp_path / "dist").glob("llm_serving-*.whl")
    site = tmp_path / "site"
    shutil.unpack_archive(wheel, site, format="zip")
    assert sorted(p.name for p in site.iterdir() if not p.name.endswith(".dist-info")) == ["llm_serving"]
    # The program and the harness alone, away from the checkout.
    work = tmp_path / "elsewhere"
    shutil.copytree(PYTHON_EXAMPLE, work / "program")
    for helper in (ROOT / "tests/support/example_harness.py", ROOT / "stacks/offline/mocks.py"):
        shutil.copy(helper, work / helper.name)
    done = subprocess.run(
        [sys.executable, str(work / "example_harness.py"), str(work / "program"), "llm-on-our-cluster", "dev",
         *(f"{k}={v}" for k, v in SECRETS.items())],
        cwd=work, capture_output=True, text=True, env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.splitlines()[-1])
    assert Path(report["library"]).is_relative_to(site)
    kinds = {r["type"] for r in report["resources"]}
    assert {"kubernetes:apps/v1:Deployment", "kubernetes:gateway.networking.k8s.io/v1:HTTPRoute",
            "kubernetes:keda.sh/v1alpha1:ScaledObject"} <= kinds
    assert not kinds & {"aws:eks/nodeGroup:NodeGroup", "kubernetes:helm.sh/v3:Release"}


@pytest.mark.parametrize("name", ["PulumiPlugin.yaml", "__main__.py", "requirements.txt"])
def test_the_plugin_directory_holds_what_pulumi_package_add_runs(name):
    assert (ROOT / "provider" / name).is_file()
    plugin = yaml.safe_load((ROOT / "provider" / "PulumiPlugin.yaml").read_text())
    assert plugin["runtime"]["name"] == "python"
    assert (ROOT / "provider" / "requirements.txt").read_text().splitlines()[-2:] == ["..", "-r ../requirements.txt"]
