"""The multi-language package: the components TypeScript, Go, C#, Java and YAML programs use through
`pulumi package add`, and the schema Pulumi's analyzer infers from their args.

provider/ (PulumiPlugin.yaml and its entry point) runs `main()`; provider/schema.json is `schema()` committed,
and a test fails when it is stale (`make schema` rewrites it). Two things differ from the SDK's
`component_provider_host` (pulumi 3.272, pulumi/provider/experimental), each for a reason:

- the analyzer marks an input optional only when its annotation is `Optional[...]`; a field with a default is
  optional here as it is in Python, so a YAML program need not restate every default;
- the component receives its inputs as the caller sent them (camelCase keys, values as given) and validates them
  itself with its args type (llm_serving.platform.args.validate): the SDK's own mapping turns integers into
  floats and enums inside lists into empty mappings, and drops a nested object that arrives as one Output.
"""

import dataclasses
import json
import sys
from typing import Any

import pulumi.provider
from pulumi.provider.experimental.analyzer import Analyzer, PropertyDefinition
from pulumi.provider.experimental.component import ComponentProvider
from pulumi.provider.experimental.schema import generate_schema
from pulumi.provider.provider import Provider

from llm_serving import __version__
from llm_serving.platform.args import fields_of, is_args_type
from llm_serving.stack import ServingStack

NAME = "llm-serving"
COMPONENTS: list[type[pulumi.ComponentResource]] = [ServingStack]


class DefaultsAreOptional(Analyzer):
    """Pulumi's analyzer, with a field that has a default optional in the schema (see the module docstring)."""

    def analyze_type(self, typ: type, *, is_component_output: bool) -> tuple[dict[str, PropertyDefinition],
                                                                           dict[str, str]]:
        properties, mapping = super().analyze_type(typ, is_component_output=is_component_output)
        if not is_component_output and is_args_type(typ):
            fields = fields_of(typ)
            for schema_name, python_name in mapping.items():
                if not fields[python_name].is_required():
                    properties[schema_name] = dataclasses.replace(properties[schema_name], optional=True)
        return properties, mapping


class LlmServingProvider(ComponentProvider):
    """The SDK's component provider, with the analyzer above and the inputs handed over as given."""

    def __init__(self, components: list[type[pulumi.ComponentResource]], name: str, version: str) -> None:
        # ComponentProvider.__init__ (pulumi 3.272), with DefaultsAreOptional in place of its Analyzer.
        self._name = name
        self.analyzer = DefaultsAreOptional(name)
        result = self.analyzer.analyze(components)
        self._components = {component.__name__: component for component in components}
        self._component_defs = result["component_definitions"]
        self._type_defs = result["type_definitions"]
        self._external_enum_types = result["external_enum_types"]
        self._dependencies = sorted(result["dependencies"], key=lambda d: f"{d.name}{d.version}")
        schema = generate_schema(name, version, None, self._component_defs, self._type_defs, self._dependencies)
        Provider.__init__(self, version, json.dumps(schema.to_json()))

    def map_inputs(self, inputs: Any, component_def: Any) -> Any:
        return inputs

    def get_state(self, instance: pulumi.ComponentResource, component_def: Any) -> dict[str, Any]:
        """The SDK's outputs, with the objects inside a map output (ServingStack.models) in camelCase too."""
        state = super().get_state(instance, component_def)
        for schema_name, prop in component_def.outputs.items():
            items = prop.additional_properties
            type_def = self.get_type_definition(items) if items is not None and items.ref else None
            if schema_name in state and type_def is not None and not type_def.enum:
                state[schema_name] = pulumi.Output.from_input(state[schema_name]).apply(
                    # (A default argument binds this type; mypy cannot type a lambda with one.)
                    lambda values, t=type_def: {k: self.map_complex_output(v, t)  # type: ignore[misc]
                                                for k, v in values.items()})
        return state


def provider(version: str = __version__) -> LlmServingProvider:
    return LlmServingProvider(COMPONENTS, NAME, version)


def schema(version: str = __version__) -> dict[str, Any]:
    """The package's schema, as `pulumi package get-schema provider/` prints it for this version."""
    text = provider(version).schema
    assert text is not None  # the component provider always builds one from the components
    return json.loads(text)


def main() -> None:
    """Serve the components to the Pulumi engine (the plugin's entry point; the engine's address is the last
    argument)."""
    pulumi.provider.main(provider(), sys.argv[1:])
