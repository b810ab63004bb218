"""The EndpointPickerConfig schema of the pinned picker, llm-d/llm-d-router v0.10.0, as a JSON Schema.

Not in the reference folder (the picker ships no CRD for its config file), so the fields are encoded here
from the Go types at the tag, each block naming its file:
- apix/config/v1alpha1/endpointpickerconfig_types.go: EndpointPickerConfig, PluginSpec, SchedulingProfile,
  SchedulingPlugin, SaturationDetectorConfig, FlowControlConfig, PriorityBandConfig (json tags; the
  `+required` markers; Quantity and Duration fields as Kubernetes writes them);
- pkg/epp/framework/plugins/flowcontrol/saturationdetector/utilization/config.go: the parameters of
  `utilization-detector` and their ranges (validateConfig);
- pkg/epp/flowcontrol/config.go: the feature gate's name.
Stricter than the picker in one way on purpose: unknown keys are errors (Go's decoder would drop them
silently, which is exactly how a misspelt threshold goes unnoticed). Cross-references (a pluginRef that
names a declared plugin) are checked in `picker_config_errors`.
"""

from __future__ import annotations

from typing import Any

import jsonschema
import yaml

# k8s.io/apimachinery resource.Quantity, as a string or a whole number ("100", "1k", "1Gi").
_QUANTITY = {"oneOf": [{"type": "integer", "minimum": 0},
                       {"type": "string", "pattern": r"^[0-9]+(\.[0-9]+)?([KMGTPE]i?|[mkMGTPE])?$"}]}
# metav1.Duration: a Go duration string.
_DURATION = {"type": "string", "pattern": r"^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$"}
_REF = {"type": "string", "minLength": 1}


def _object(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(required), "additionalProperties": False}


_PRIORITY_BAND = _object({
    "priority": {"type": "integer"},
    "maxBytes": _QUANTITY,
    "maxRequests": _QUANTITY,
    "fairnessPolicyRef": {"type": "string"},
    "orderingPolicyRef": {"type": "string"},
}, ("priority",))
_DETECTOR_REF = _object({"pluginRef": {"type": "string"}})

SCHEMA: dict[str, Any] = _object({
    "apiVersion": {"enum": ["llm-d.ai/v1alpha1", "inference.networking.x-k8s.io/v1alpha1"]},
    "kind": {"const": "EndpointPickerConfig"},
    "featureGates": {"type": "array", "items": {"type": "string", "pattern": r"^[A-Za-z]+(=(true|false))?$"}},
    "plugins": {"type": "array", "items": _object(
        {"name": {"type": "string"}, "type": _REF, "parameters": {"type": "object"}}, ("type",))},
    "schedulingProfiles": {"type": "array", "items": _object({
        "name": _REF,
        "plugins": {"type": "array", "items": _object(
            {"pluginRef": _REF, "weight": {"type": "number"}}, ("pluginRef",))},
    }, ("name", "plugins"))},
    "dataLayer": {"type": "object"},
    "flowControl": _object({
        "maxBytes": _QUANTITY,
        "maxRequests": _QUANTITY,
        "defaultRequestTTL": _DURATION,
        "defaultPriorityBand": _PRIORITY_BAND,
        "defaultNegativePriorityBand": _PRIORITY_BAND,
        "priorityBands": {"type": "array", "items": _PRIORITY_BAND},
        "usageLimitPolicyPluginRef": {"type": "string"},
        "saturationDetector": _DETECTOR_REF,
        "enableEviction": {"type": "boolean"},
    }),
    "requestHandler": {"type": "object"},
    "saturationDetector": _DETECTOR_REF,  # deprecated at v0.10.0 in favour of flowControl.saturationDetector
    "parser": {"type": "object"},
}, ("plugins", "schedulingProfiles"))

# Parameters of the plugin types whose parameters we set, with upstream's ranges.
PLUGIN_PARAMETERS: dict[str, dict[str, Any]] = {
    "utilization-detector": _object({
        "queueDepthThreshold": {"type": "integer", "exclusiveMinimum": 0},
        "kvCacheUtilThreshold": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
        "metricsStalenessThreshold": _DURATION,
        "headroom": {"type": "number", "minimum": 0},
    }),
}

_VALIDATOR = jsonschema.Draft7Validator(SCHEMA)


def picker_config_errors(text: str) -> list[str]:
    """Why the picker at v0.10.0 would not read `text` as we mean it; empty when it would."""
    config = yaml.safe_load(text)
    errors = [f"{'.'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
              for e in sorted(_VALIDATOR.iter_errors(config), key=lambda e: list(map(str, e.absolute_path)))]
    if errors:
        return errors
    names = {plugin.get("name") or plugin["type"]: plugin for plugin in config["plugins"]}
    for index, plugin in enumerate(config["plugins"]):
        schema = PLUGIN_PARAMETERS.get(plugin["type"])
        if schema is not None:
            errors += [f"plugins.{index}.parameters: {e.message}"
                       for e in jsonschema.Draft7Validator(schema).iter_errors(plugin.get("parameters") or {})]
    refs = [ref["pluginRef"] for profile in config["schedulingProfiles"] for ref in profile["plugins"]]
    detector = (config.get("flowControl") or {}).get("saturationDetector") or {}
    if detector.get("pluginRef"):
        refs.append(detector["pluginRef"])
    errors += [f"pluginRef {ref!r} names no plugin (declared: {sorted(names)})" for ref in refs if ref not in names]
    return errors
