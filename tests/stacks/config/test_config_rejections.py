"""Invalid stack files: every problem is reported as one line naming key path, value and what is
allowed, before anything is registered."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from stacks.config.problems import ConfigError
from stacks.environment import load_stack_file


def write_stack(directory: Path, name: str, config: dict[str, Any]) -> Path:
    path = directory / f"Pulumi.{name}.yaml"
    path.write_text(yaml.safe_dump({"config": config}, sort_keys=False))
    return path


def edit(directory: Path, name: str, key: str, change) -> Path:
    """Apply `change` to the value of `llm-serving:<key>` in a copied stack file."""
    path = directory / f"Pulumi.{name}.yaml"
    document = yaml.safe_load(path.read_text())
    full = f"llm-serving:{key}"
    document["config"][full] = change(document["config"].get(full))
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def problems(path: Path) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load_stack_file(path)
    return [p.line() for p in caught.value.problems]


def with_item(mapping: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    node = mapping
    parts = dotted.split(".")
    for part in parts[:-1]:
        node = node[part]
    node[parts[-1]] = value
    return mapping


def test_repo_stack_files_load(stack_dir):
    for name in ("dev", "prod", "staging"):
        _, config = load_stack_file(stack_dir / f"Pulumi.{name}.yaml")
        assert config.environment.value == name


def test_rejects_misspelt_key_with_suggestion(stack_dir):
    path = edit(stack_dir, "prod", "gpuNodeGroup", lambda g: {**g, "instanceTyp": "p5.48xlarge"})
    assert problems(path) == [
        'llm-serving:gpuNodeGroup.instanceTyp: unknown key; did you mean "instanceType"? '
        '(got "p5.48xlarge"; expected one of amiReleaseVersion, amiType, autoRepair, capacityReservationId, '
        "capacityType, containerStorage, customInstance, efaInterfaces, existing, imagePrePull, imagePullSeconds, "
        "instanceType, labels, mode, nodeReadySeconds, placement, rootVolumeGib, scaling, ssmAccess, subnets)"
    ]


def test_rejects_misspelt_top_level_key_with_suggestion(stack_dir):
    path = stack_dir / "Pulumi.prod.yaml"
    document = yaml.safe_load(path.read_text())
    document["config"]["llm-serving:observabilty"] = document["config"].pop("llm-serving:observability")
    path.write_text(yaml.safe_dump(document))
    missing, misspelt = problems(path)
    assert misspelt.startswith('llm-serving:observabilty: unknown key; did you mean "observability"? ')
    assert missing == "llm-serving:observability: required key is missing (got nothing; expected a value)"


def test_rejects_wrong_type(stack_dir):
    path = edit(stack_dir, "prod", "gpuNodeGroup", lambda g: with_item(g, "scaling.maxNodes", "four"))
    assert problems(path) == [
        'llm-serving:gpuNodeGroup.scaling.maxNodes: wrong type (got "four"; expected an integer)'
    ]


def test_rejects_out_of_range_value(stack_dir):
    path = edit(stack_dir, "prod", "gpuNodeGroup", lambda g: with_item(g, "rootVolumeGib", 10))
    assert problems(path) == [
        "llm-serving:gpuNodeGroup.rootVolumeGib: Input should be greater than or equal to 20 "
        "(got 10; expected >= 20)"
    ]


def test_rejects_value_not_in_enum(stack_dir):
    path = edit(stack_dir, "prod", "gpuNodeGroup", lambda g: with_item(g, "capacityType", "RESERVED"))
    assert problems(path) == [
        "llm-serving:gpuNodeGroup.capacityType: not an allowed value "
        "(got \"RESERVED\"; expected one of 'ON_DEMAND', 'SPOT' or 'CAPACITY_BLOCK')"
    ]


def test_rejects_missing_required_value(stack_dir):
    path = edit(stack_dir, "prod", "cluster", lambda c: {"kubernetesVersion": "1.34"})
    assert problems(path) == [
        "llm-serving:cluster.name: required key is missing (got nothing; expected a value)"
    ]


def test_reports_every_problem_at_once(stack_dir):
    def break_group(group):
        with_item(group, "scaling.maxNodes", "four")
        group["subnets"][0]["id"] = "sub-1"
        return group

    path = edit(stack_dir, "prod", "gpuNodeGroup", break_group)
    lines = problems(path)
    assert len(lines) == 2
    assert lines[0].startswith('llm-serving:gpuNodeGroup.scaling.maxNodes: wrong type (got "four"')
    assert lines[1].startswith('llm-serving:gpuNodeGroup.subnets[0].id: not a valid value (got "sub-1"')


def test_rejects_cyclic_extends(stack_dir):
    edit(stack_dir, "prod", "extends", lambda _: "staging")
    assert problems(stack_dir / "Pulumi.staging.yaml") == [
        'llm-serving:extends: cyclic extends: staging -> prod -> staging (got "staging"; '
        "expected a chain that ends)"
    ]


def test_rejects_missing_base_stack(stack_dir):
    path = edit(stack_dir, "staging", "extends", lambda _: "prd")
    assert problems(path) == [
        "llm-serving:extends: base stack file Pulumi.prd.yaml not found "
        '(got "prd"; expected one of dev, prod, staging)'
    ]


def test_rejects_secret_not_set_on_a_clone(stack_dir):
    # dev sets grafanaAdminPassword as a secret; a clone of dev must set its own.
    write_stack(stack_dir, "dev-eu", {"llm-serving:extends": "dev"})
    assert problems(stack_dir / "Pulumi.dev-eu.yaml") == [
        f"llm-serving:{key}: secret not set on stack dev-eu; secrets are not inherited "
        f"from dev (got nothing; expected its own value: `pulumi config set --secret "
        f"llm-serving:{key} <value> -s dev-eu`)"
        for key in ("apiKey", "grafanaAdminPassword", "hfToken")
    ]


def test_accepts_a_clone_that_sets_its_own_secret(stack_dir):
    write_stack(
        stack_dir,
        "dev-eu",
        {
            "llm-serving:extends": "dev",
            "llm-serving:grafanaAdminPassword": {"secure": "v1:abc"},
            "llm-serving:apiKey": {"secure": "v1:ghi"},
            "llm-serving:hfToken": {"secure": "v1:jkl"},
        },
    )
    _, config = load_stack_file(stack_dir / "Pulumi.dev-eu.yaml")
    assert config.grafana_admin_password is not None


def test_rejects_plaintext_secret_without_echoing_it(stack_dir):
    path = edit(stack_dir, "dev", "grafanaAdminPassword", lambda _: "hunter2hunter2hunter2")
    lines = problems(path)
    assert lines == [
        'llm-serving:grafanaAdminPassword: must be a secret, not plaintext (got "[secret]"; expected a '
        "value set with `pulumi config set --secret llm-serving:grafanaAdminPassword`)"
    ]
    assert "hunter2" not in "\n".join(lines)


def test_rejects_malformed_yaml(stack_dir):
    path = stack_dir / "Pulumi.prod.yaml"
    path.write_text("config:\n  llm-serving:environment: [prod\n")
    assert problems(path)[0].startswith("llm-serving:file: not valid YAML at line ")


def test_misspelt_secret_key_never_echoes_the_secret(stack_dir):
    write_stack(
        stack_dir,
        "dev-eu",
        {
            "llm-serving:extends": "dev",
            "llm-serving:grafanaAdminPassword": {"secure": "v1:abc"},
            "llm-serving:grafanaAdminPasswrd": {"secure": "v1:def"},
            "llm-serving:apiKey": {"secure": "v1:ghi"},
            "llm-serving:hfToken": {"secure": "v1:jkl"},
        },
    )
    (line,) = problems(stack_dir / "Pulumi.dev-eu.yaml")
    assert line.startswith(
        'llm-serving:grafanaAdminPasswrd: unknown key; did you mean "grafanaAdminPassword"? (got "[secret]"; '
    )


def test_every_stack_file_sets_its_own_region():
    # The engine passes only the stack's own file; provider settings do not travel through extends.
    from stacks.config.files import PROJECT_DIR

    for path in PROJECT_DIR.glob("Pulumi.*.yaml"):
        assert "aws:region" in yaml.safe_load(path.read_text())["config"], path.name


def test_every_declared_project_key_is_set_on_every_stack():
    # Pulumi treats a key declared in Pulumi.yaml without a default as required on every stack.
    from stacks.config.files import PROJECT_DIR

    declared = yaml.safe_load((PROJECT_DIR / "Pulumi.yaml").read_text())["config"]
    required = [k for k, v in declared.items() if "default" not in v]
    for path in PROJECT_DIR.glob("Pulumi.*.yaml"):
        config = yaml.safe_load(path.read_text())["config"]
        assert [k for k in required if k not in config] == [], path.name
