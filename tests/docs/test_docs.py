"""The configuration reference in the README is generated from the models and must be current."""

from __future__ import annotations

import typing

from pydantic import BaseModel

from stacks.config import StackConfig
from stacks.loader import PROJECT_DIR
from tools import config_reference


def _models(model: type[BaseModel], seen: set[type[BaseModel]]) -> set[type[BaseModel]]:
    seen.add(model)
    for field in model.model_fields.values():
        for sub in config_reference._models_in(field.annotation):
            if sub not in seen:
                _models(sub, seen)
    return seen


def test_every_config_field_has_a_description():
    missing = [
        f"{model.__name__}.{name}"
        for model in _models(StackConfig, set())
        for name, field in model.model_fields.items()
        if not field.description
    ]
    assert missing == []


def test_every_config_model_forbids_unknown_keys_and_is_frozen():
    for model in _models(StackConfig, set()):
        assert model.model_config["extra"] == "forbid", model.__name__
        assert model.model_config["frozen"] is True, model.__name__


def test_readme_configuration_reference_is_current():
    readme = (PROJECT_DIR / "README.md").read_text()
    assert config_reference.splice(readme) == readme, "run `make config-docs`"


def test_reference_lists_nested_keys_with_their_paths():
    text = config_reference.reference()
    assert "| `gpuNodeGroup.scaling.minNodes` | int | **required** |" in text
    assert "| `gpuNodeGroup.subnets[].availabilityZone` | str | **required** |" in text
    assert typing.get_origin(StackConfig.model_fields["gpu_node_group"].annotation) is None
