"""Checkers that hold emitted config against the pinned upstream facts in tests/fixtures/reference.

Tests use them to prove that CRD objects, Kubernetes objects, Helm values, vLLM flags and metric names
exist at the pinned versions. They read only the committed fixtures, so a bare clone can run them.

Length: one checker per kind of upstream fact (CRD, Kubernetes schema, Helm values, vLLM flags and
metrics), sharing the fixture loading.
"""

from __future__ import annotations

import copy
import difflib
import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
from kubernetes_validate import utils as kv_utils

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "reference"

DEFAULT_VLLM_VERSION = "0.33.0"
DEFAULT_DCGM_EXPORTER_VERSION = "4.8.2"

_DCGM_FILES = {
    "default": "default-counters.json",
    "dcp": "dcp-metrics-included.json",
    "all": "all-known-fields.json",
}
# vLLM value types that FlexibleArgumentParser also accepts as dotted sub-keys
# (`--compilation-config.mode 3`).
_JSON_VALUE_TYPES = frozenset({"json_config_object", "json", "json_object_or_str"})
# Only --kv-cache-dtype is checked against its documented values: for the other flags with
# known_values (e.g. --distributed-executor-backend) vLLM really does accept free strings.
_ENFORCED_KNOWN_VALUES = frozenset({"--kv-cache-dtype"})
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")
_OPTIMIZATION_LEVEL = re.compile(r"^-O\d*$")
_INLINE_FLAGS = re.compile(r"\(\?([imsx]+)\)")
_MAX_MESSAGE = 300


# --------------------------------------------------------------------------------------------
# Fixture loading


@lru_cache(maxsize=256)
def _load(relative: str) -> Any:
    path = FIXTURES / relative
    if not path.is_file():
        raise FileNotFoundError(
            f"no reference fixture {relative} (regenerate with tools/derive_reference_fixtures.py)"
        )
    return json.loads(path.read_text(encoding="utf-8"))


def _available(directory: str) -> list[str]:
    base = FIXTURES / directory
    return sorted(p.name for p in base.iterdir()) if base.is_dir() else []


def pinned_versions() -> dict[str, str]:
    """The pin summary of the reference data (component → version)."""
    return dict(_load("pins.json"))


# --------------------------------------------------------------------------------------------
# Custom resources (CRD schemas)


def _split_api_version(api_version: str) -> tuple[str, str]:
    group, _, version = api_version.rpartition("/")
    return group, version


@lru_cache(maxsize=1)
def _crd_index() -> dict[tuple[str, str], str]:
    """(group, kind) → fixture path of its CRD."""
    index: dict[tuple[str, str], str] = {}
    for path in sorted((FIXTURES / "crds").glob("*.json")):
        relative = f"crds/{path.name}"
        crd = _load(relative)
        index[(crd["group"], crd["kind"])] = relative
    return index


@lru_cache(maxsize=1)
def _crd_groups() -> frozenset[str]:
    return frozenset(group for group, _ in _crd_index())


def is_custom_kind(api_version: str, kind: str) -> bool:
    """True when a reference CRD defines this group and kind (any version)."""
    group, _ = _split_api_version(api_version)
    return (group, kind) in _crd_index()


def _python_pattern(pattern: str) -> str:
    """Translate a Go (RE2) pattern into one Python's re accepts, keeping its meaning."""
    try:
        re.compile(pattern)
        return pattern
    except re.error:
        pass
    # RE2 allows inline flags after an anchor (prometheus-operator: `^(?i)(abort|warn)?$`);
    # Python wants global flags first. Moving them is equivalent when nothing precedes them
    # but anchors.
    found = list(_INLINE_FLAGS.finditer(pattern))
    if len(found) != 1 or pattern[: found[0].start()] not in ("", "^"):
        raise ValueError(f"cannot translate CRD pattern {pattern!r} to a Python regex")
    flag = found[0]
    moved = flag.group(0) + pattern[: flag.start()] + pattern[flag.end() :]
    re.compile(moved)
    return moved


def _to_draft7(node: Any) -> Any:
    """Convert a Kubernetes structural schema node into plain Draft 7 (a new object)."""
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key.startswith("x-kubernetes-") or key == "nullable":
            continue
        if key in ("properties", "patternProperties") and isinstance(value, dict):
            out[key] = {name: _to_draft7(sub) for name, sub in value.items()}
        elif key in ("items", "additionalProperties", "not") and isinstance(value, dict):
            out[key] = _to_draft7(value)
        elif key in ("anyOf", "allOf", "oneOf") and isinstance(value, list):
            out[key] = [_to_draft7(sub) for sub in value]
        elif key == "pattern" and isinstance(value, str):
            out[key] = _python_pattern(value)
        else:
            out[key] = value
    if node.get("x-kubernetes-int-or-string"):
        out["type"] = ["integer", "string"]
        # The anyOf that controller-gen adds next to int-or-string only repeats the two types;
        # dropping it avoids a second, vaguer error for the same mistake.
        if all(set(branch) == {"type"} for branch in out.get("anyOf", [])):
            out.pop("anyOf", None)
    if node.get("nullable"):
        types = out.get("type")
        if isinstance(types, str):
            out["type"] = [types, "null"]
        elif isinstance(types, list) and "null" not in types:
            out["type"] = [*types, "null"]
        if "enum" in out and None not in out["enum"]:
            out["enum"] = [*out["enum"], None]
    if (
        node.get("type") == "object"
        and "additionalProperties" not in node
        and not node.get("x-kubernetes-preserve-unknown-fields")
    ):
        # The API server prunes fields a structural schema does not declare, silently. For us an
        # undeclared field is always a bug, so reject it. This also covers objects declared with
        # no properties at all (e.g. an empty `http3: {}` switch): Kubernetes prunes everything
        # inside those too.
        out["additionalProperties"] = False
    return out


def crd_schema(relative: str, version: str) -> dict[str, Any]:
    """The Draft 7 schema objects of one CRD version are validated against (a new object)."""
    schema = _to_draft7(_load(relative)["versions"][version]["schema"])
    # metadata is checked separately (scope) and is the API server's business, not the CRD's.
    schema.get("properties", {}).pop("metadata", None)
    return schema


def crd_versions() -> list[tuple[str, str]]:
    """(fixture, version) of every CRD version in the fixtures."""
    return [(relative, version) for relative in sorted(set(_crd_index().values()))
            for version in _load(relative)["versions"]]


@lru_cache(maxsize=256)
def _crd_validator(relative: str, version: str) -> jsonschema.protocols.Validator:
    # That the schema is valid Draft 7 is checked once for every CRD version, by
    # tests/support/test_reference.py, rather than in every worker that validates an object (about 1 s of
    # CPU each: the Envoy Gateway schemas are megabytes).
    return jsonschema.Draft7Validator(crd_schema(relative, version))


def _object_id(obj: dict[str, Any]) -> str:
    metadata = obj.get("metadata") or {}
    name = metadata.get("name", "<no name>")
    namespace = metadata.get("namespace")
    where = f"{namespace}/{name}" if namespace else name
    return f"{obj.get('kind', '<no kind>')} {where}"


def _json_path(parts: Any) -> str:
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(root)"


def _shorten(message: str) -> str:
    return message if len(message) <= _MAX_MESSAGE else message[: _MAX_MESSAGE - 3] + "..."


def _close(word: str, candidates: Any) -> str:
    matches = difflib.get_close_matches(word, sorted(candidates), n=3, cutoff=0.6)
    return f"; did you mean {', '.join(matches)}?" if matches else ""


def _schema_errors(who: str, validator: jsonschema.protocols.Validator, body: dict[str, Any],
                   unknown: str = "the API server would prune it silently") -> list[str]:
    errors: list[str] = []
    for error in validator.iter_errors(body):
        path = list(error.absolute_path)
        schema = error.schema if isinstance(error.schema, dict) else {}
        if error.validator == "additionalProperties" and isinstance(error.instance, dict):
            declared = schema.get("properties", {})
            patterns = schema.get("patternProperties", {})
            for key in sorted(error.instance):
                if key in declared or any(re.search(p, key) for p in patterns):
                    continue
                errors.append(
                    f"{who}: {_json_path([*path, key])}: unknown field (not in the schema; "
                    f"{unknown}){_close(key, declared)}"
                )
            continue
        errors.append(f"{who}: {_json_path(path)}: {_shorten(error.message)}")
    return sorted(errors)


# Custom kinds the program emits whose CRD the reference folder lacks (`make reference-fixtures` derives the folder
# from upstream copies that do not carry it): only the top-level shape is checked here, each filter type's fields
# are pinned in tests/components/edge/test_objects.py against Envoy Gateway v1.9.0's
# api/v1alpha1/httproutefilter_types.go (HTTPRouteFilterSpec: urlRewrite, directResponse, credentialInjection).
NO_REFERENCE_CRD: dict[tuple[str, str, str], frozenset[str]] = {
    ("gateway.envoyproxy.io", "v1alpha1", "HTTPRouteFilter"): frozenset(
        {"urlRewrite", "directResponse", "credentialInjection"}),
}


def custom_resource_errors(obj: dict[str, Any]) -> list[str]:
    """Validate a custom resource against its pinned CRD: kind, served version, scope and schema."""
    who = _object_id(obj)
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str):
        return [f"{who}: apiVersion and kind must both be set"]
    group, version = _split_api_version(api_version)
    spec_keys = NO_REFERENCE_CRD.get((group, version, kind))
    if spec_keys is not None:
        spec = obj.get("spec")
        namespaced = bool((obj.get("metadata") or {}).get("namespace"))
        if not isinstance(spec, dict) or len(spec) != 1 or not set(spec) <= spec_keys or not namespaced:
            return [f"{who}: a namespaced {kind} with exactly one of {sorted(spec_keys)} in its spec"]
        return []
    relative = _crd_index().get((group, kind))
    if relative is None:
        known = sorted(k for g, k in _crd_index() if g == group)
        hint = _close(kind, known) if known else f" (no reference CRD for group '{group}')"
        return [f"{who}: unknown custom resource kind {kind} in {api_version}{hint}"]
    crd = _load(relative)
    served = sorted(name for name, v in crd["versions"].items() if v["served"])
    if version not in served:
        return [f"{who}: {api_version} is not a served version of {kind} (served: {', '.join(served)})"]

    errors: list[str] = []
    namespace = (obj.get("metadata") or {}).get("namespace")
    if crd["scope"] == "Namespaced" and not namespace:
        errors.append(f"{who}: {kind} is namespaced but metadata.namespace is not set")
    if crd["scope"] == "Cluster" and namespace:
        errors.append(f"{who}: {kind} is cluster-scoped but metadata.namespace is set to '{namespace}'")
    body = {key: value for key, value in obj.items() if key not in ("apiVersion", "kind", "metadata")}
    errors.extend(_schema_errors(who, _crd_validator(relative, version), body))
    return errors


# --------------------------------------------------------------------------------------------
# Built-in Kubernetes objects


# kubernetes-validate reads and parses its 1.5 MB `_definitions.json` (and the kind's schema file) again
# for every object it validates (kubernetes_validate/utils.py: validate -> schema_contents): about 4 s of
# the suite's CPU for ~360 objects. Those files are read-only and jsonschema never changes a schema, so
# each parsed document is kept for the process; what is validated, and how, is unchanged.
kv_utils.schema_contents = lru_cache(maxsize=None)(kv_utils.schema_contents)


@lru_cache(maxsize=1)
def _kubernetes_validate_versions() -> tuple[str, ...]:
    # kubernetes-validate ships one schema set per minor release ("1.34.0"); all_versions() lists
    # each twice (plain and -strict directories).
    return tuple(sorted({kv_utils.major_minor(v) for v in kv_utils.all_versions()}, key=_version_key))


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def kubernetes_object_errors(obj: dict[str, Any], kubernetes_version: str) -> list[str]:
    """Validate any object we emit: built-in kinds in strict mode, custom kinds against their CRD.

    kubernetes-validate stops at the first schema error, so a built-in object reports at most one.
    """
    group, _ = _split_api_version(str(obj.get("apiVersion", "")))
    if group in _crd_groups():
        return custom_resource_errors(obj)
    who = _object_id(obj)
    minor = kv_utils.major_minor(kubernetes_version.removeprefix("v"))
    supported = _kubernetes_validate_versions()
    # Checked here because kubernetes-validate compares versions as strings and raises a bare
    # IndexError for versions older than its oldest schema set.
    if minor not in supported:
        return [
            f"{who}: kubernetes-validate {kubernetes_validate.__version__} has no schemas for Kubernetes "
            f"{kubernetes_version} (it ships {supported[0]} to {supported[-1]})"
        ]
    try:
        kubernetes_validate.validate(obj, minor, strict=True)
    except kubernetes_validate.ValidationError as error:
        return [
            f"{who}: {_json_path(error.path)}: {_shorten(error.message)} "
            f"(Kubernetes {error.version} strict schema)"
        ]
    except kubernetes_validate.SchemaNotFoundError as error:
        return [f"{who}: {error.message}"]
    except (kubernetes_validate.InvalidSchemaError, kv_utils.VersionNotSupportedError) as error:
        return [f"{who}: {error.message}"]
    return []


# --------------------------------------------------------------------------------------------
# EKS add-on configuration


def addons_with_schema() -> list[str]:
    """Add-ons whose published configuration schema is vendored (aws/addons/<name>.json)."""
    return sorted(path.removesuffix(".json") for path in _available("aws/addons"))


def addon_configuration_errors(addon: str, configuration_values: str) -> list[str]:
    """Validate an add-on's configurationValues (the JSON string CreateAddon receives) against the
    add-on's published schema, the one EKS applies: a key it does not declare fails the call."""
    who = f"add-on {addon}"
    if addon not in addons_with_schema():
        return [f"{who}: no vendored configuration schema (add it to ../shared/reference/aws/addons/ and "
                "re-derive the fixtures), so its configurationValues cannot be checked"]
    try:
        document = json.loads(configuration_values)
    except json.JSONDecodeError as error:
        return [f"{who}: configurationValues is not JSON: {error}"]
    schema = _load(f"aws/addons/{addon}.json")
    validator = jsonschema.Draft7Validator(schema)
    return _schema_errors(who, validator, document, unknown="EKS refuses CreateAddon and UpdateAddon")


# --------------------------------------------------------------------------------------------
# Helm values


def chart_info(chart: str, version: str) -> dict[str, Any]:
    """name, published version, appVersion, kubeVersion, repository and subchart dependencies."""
    return copy.deepcopy(_load(f"charts/{chart}/{version}/chart.json"))


def _value_type(value: Any) -> str | None:
    if isinstance(value, dict):
        return "map"
    if isinstance(value, list | tuple):
        return "list"
    if value is None:
        return "null"
    if isinstance(value, bool):  # before int: bool is an int subclass
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    return None  # e.g. a pulumi.Output: a scalar we cannot see yet


def _kind_error(default: str, override: str | None) -> str | None:
    if default == "null" or override == "null":
        # A null default is an unset placeholder that charts fill with maps and lists as well as
        # scalars; a null override is how Helm deletes a default.
        return None
    if override is None or override == default or (override == "int" and default == "float"):
        return None
    return f"override is {override} but the default is {default}"


# Maps whose defaults list a few keys but whose template takes any key: cluster-autoscaler renders
# each extraArgs entry as `--key=value` (templates/deployment.yaml, checked with `helm template`
# on chart 9.53.0), so any Cluster Autoscaler flag is a valid key there.
# gateway-helm renders `config.envoyGateway` whole into the EnvoyGateway ConfigMap
# (templates/envoy-gateway-config.yaml @v1.9.0, checked with `helm template`), so any field of the
# EnvoyGateway API is a valid key there; tests/components/edge check ours against that API's fields.
FREE_FORM_VALUES: dict[str, frozenset[str]] = {
    "cluster-autoscaler": frozenset({"extraArgs"}),
    "gateway-helm": frozenset({"config.envoyGateway"}),
    # lws renders podSecurityContext whole (templates/manager/manager.yaml @v0.10.0, `helm template`).
    "lws": frozenset({"podSecurityContext"}),
}


def helm_value_errors(chart: str, version: str, values: dict[str, Any]) -> list[str]:
    """Check every key path we set exists in the chart defaults and keeps the default's type."""
    if not (FIXTURES / "charts" / chart / version).is_dir():
        have = _available(f"charts/{chart}") or _available("charts")
        return [f"{chart} {version}: no reference values for this chart version (have: {', '.join(have)})"]
    tree = _load(f"charts/{chart}/{version}/values-tree.json")
    errors: list[str] = []

    def walk(overrides: dict[str, Any], node: dict[str, Any], prefix: str, open_below: bool) -> None:
        known = node.get("keys", {})
        for key, value in overrides.items():
            dotted = f"{prefix}{key}"
            default = known.get(key)
            if default is None:
                if not (node.get("open") or open_below):
                    errors.append(f"{chart} {version}: unknown value key {dotted}{_close(str(key), known)}")
                continue
            problem = _kind_error(default["type"], _value_type(value))
            if problem:
                errors.append(f"{chart} {version}: {dotted}: {problem}")
            elif isinstance(value, dict) and default["type"] == "map" and not default.get("open"):
                free = dotted in FREE_FORM_VALUES.get(chart, frozenset())
                walk(value, default, f"{dotted}.", open_below or free or bool(default.get("subchart")))

    if not isinstance(values, dict):
        return [f"{chart} {version}: values must be a mapping, got {type(values).__name__}"]
    walk(values, tree, "", False)
    return errors


# --------------------------------------------------------------------------------------------
# vLLM flags


@lru_cache(maxsize=256)
def _flag_table(version: str) -> tuple[dict[str, dict[str, Any]], frozenset[str]]:
    data = _load(f"vllm/{version}/flags.json")
    table: dict[str, dict[str, Any]] = {}
    for flag in data["flags"]:
        for spelling in (
            flag["flag"],
            *(flag["aliases"] or []),
            *(flag["true_forms"] or []),
            *(flag["false_forms"] or []),
        ):
            table[spelling] = flag
    return table, frozenset(data["all_option_strings"])


def _is_option(token: Any) -> bool:
    # argparse treats "-5" as a value when no option looks like a negative number (true for vLLM).
    if not isinstance(token, str) or token == "-":
        return False
    return token.startswith("-") and not _NEGATIVE_NUMBER.match(token)


def vllm_flag_errors(args: list[str], version: str = DEFAULT_VLLM_VERSION) -> list[str]:
    """Check container args for `vllm serve` (image vllm/vllm-openai): model first, then options."""
    if not (FIXTURES / "vllm" / version).is_dir():
        return [f"no vLLM {version} flag reference (have: {', '.join(_available('vllm'))})"]
    table, all_options = _flag_table(version)
    if not args:
        return ["vllm serve args are empty: the first argument must be the model"]
    errors: list[str] = []
    start = 1
    if not isinstance(args[0], str) or _is_option(args[0]):
        errors.append(f"the first argument must be the model (positional), got '{args[0]}'")
        start = 0
    seen: dict[str, str] = {}
    i = start
    while i < len(args):
        token = args[i]
        i += 1
        if not isinstance(token, str):
            errors.append(f"argument {token!r} is not a string")
            continue
        if not _is_option(token):
            errors.append(f"unexpected positional argument '{token}' (only the model is positional)")
            continue
        if token == "--":
            errors.append("'--' ends option parsing; everything after it would be read as positionals")
            break
        name, has_inline, inline = token.partition("=")
        if _OPTIMIZATION_LEVEL.match(name):
            # vLLM rewrites -O<n>, -O <n> and -O=<n> to --optimization-level <n>.
            if name != "-O":
                name, has_inline, inline = "-O", "=", name[2:]
            flag = table["--optimization-level"]
        elif name.startswith("--") and "_" in name and name.replace("_", "-") in all_options:
            # FlexibleArgumentParser accepts underscores, but one spelling keeps greps and the
            # duplicate check below honest. Parse on as the dashed flag.
            errors.append(f"{name} must be written {name.replace('_', '-')}")
            flag = table[name.replace("_", "-")]
        else:
            flag = table.get(name)
        sub_key = ""
        if flag is None:
            base, dot, sub_key = name.partition(".")
            base_flag = table.get(base)
            if dot and base_flag and base_flag.get("value_type") in _JSON_VALUE_TYPES:
                flag = base_flag
            else:
                errors.append(f"unknown vllm serve option {name} (vLLM {version}){_close(name, all_options)}")
                # Skip its would-be values so one typo does not also report stray positionals.
                while i < len(args) and not _is_option(args[i]):
                    i += 1
                continue

        kind = flag["kind"]
        values: list[str] = []
        if kind in ("switch", "boolean_optional"):
            forms = ""
            if kind == "boolean_optional":
                forms = f"; write {flag['true_forms'][0]} or {flag['false_forms'][0]}"
            if has_inline:
                errors.append(f"{name} is a switch and takes no value, but was given '={inline}'{forms}")
            elif i < len(args) and not _is_option(args[i]):
                errors.append(f"{name} is a switch and takes no value, but is followed by '{args[i]}'{forms}")
                i += 1
        elif has_inline:
            values = [inline]
        elif kind == "optional_value":
            if i < len(args) and not _is_option(args[i]):
                values, i = [args[i]], i + 1
        elif flag["nargs"] == "+" and not sub_key:
            while i < len(args) and not _is_option(args[i]):
                values.append(args[i])
                i += 1
            if not values:
                errors.append(f"{name} expects one or more values but none follows")
        elif i < len(args) and not _is_option(args[i]):
            values, i = [args[i]], i + 1
        else:
            errors.append(f"{name} expects a value but none follows")

        for value in values:
            errors.extend(_value_errors(name, flag, value, version))
        if flag["deprecated"]:
            errors.append(f"{name} is deprecated in vLLM {version}")
        key = flag["flag"] + (f".{sub_key}" if sub_key else "")
        if key in seen and not flag.get("repeatable"):
            errors.append(
                f"{name} is given more than once (also as {seen[key]}); argparse keeps only the last"
            )
        seen.setdefault(key, name)
    return errors


def _value_errors(name: str, flag: dict[str, Any], value: str, version: str) -> list[str]:
    if flag.get("accepts_none") and value in ("None", ""):
        return []
    if flag["choices"] is not None and value not in {str(choice) for choice in flag["choices"]}:
        choices = ", ".join(str(choice) for choice in flag["choices"])
        return [f"{name} '{value}' is not one of its choices: {choices}"]
    if flag["flag"] in _ENFORCED_KNOWN_VALUES and flag["known_values"] and value not in flag["known_values"]:
        return [f"{name} '{value}' is not a known value in vLLM {version}: {', '.join(flag['known_values'])}"]
    post_parse = flag["post_parse_known_values"]
    if post_parse and value not in post_parse:
        known = ", ".join(post_parse)
        return [f"{name} '{value}' is rejected by vLLM {version} after parsing; known: {known}"]
    return []


# --------------------------------------------------------------------------------------------
# vLLM metrics


def vllm_metrics(version: str = DEFAULT_VLLM_VERSION) -> dict[str, dict[str, Any]]:
    """Every metric family /metrics serves (vllm:* and the http_* ones), keyed by family name.

    The family name has no `_total` suffix (e.g. `vllm:prompt_tokens`); `name` in each entry is the
    series a query uses for counters and gauges.
    """
    data = _load(f"vllm/{version}/metrics.json")
    return {m["family"]: copy.deepcopy(m) for m in (*data["metrics"], *data["http_metrics"])}


@lru_cache(maxsize=256)
def _series_labels(version: str) -> dict[str, frozenset[str]]:
    data = _load(f"vllm/{version}/metrics.json")
    series: dict[str, frozenset[str]] = {}
    for metric in (*data["metrics"], *data["http_metrics"]):
        for name in metric["exposed_series"]:
            extra = {"le"} if name.endswith("_bucket") else set()
            series[name] = frozenset(metric["labels"]) | extra
    return series


def vllm_series_names(version: str = DEFAULT_VLLM_VERSION) -> set[str]:
    """Every series name a PromQL query may use (histogram _bucket/_sum/_count, counter _total)."""
    return set(_series_labels(version))


def vllm_metric_labels(series: str, version: str = DEFAULT_VLLM_VERSION) -> set[str]:
    """Labels of one exposed series (plus `le` on histogram buckets); KeyError if unknown."""
    labels = _series_labels(version).get(series)
    if labels is None:
        raise KeyError(f"unknown vLLM {version} series {series!r}{_close(series, _series_labels(version))}")
    return set(labels)


# --------------------------------------------------------------------------------------------
# DCGM exporter fields


def dcgm_fields(kind: str, version: str = DEFAULT_DCGM_EXPORTER_VERSION) -> dict[str, str]:
    """DCGM field → Prometheus type: "default" and "dcp" are the exported rows of each CSV, "all"
    also has the commented-out rows a custom counters file may enable."""
    if kind not in _DCGM_FILES:
        raise ValueError(f"dcgm_fields kind must be one of {', '.join(_DCGM_FILES)}, not {kind!r}")
    return dict(_load(f"dcgm-exporter/{version}/{_DCGM_FILES[kind]}")["fields"])


def scheduling_defaults(chart: str, version: str) -> dict[str, Any]:
    """The chart's default nodeSelector, affinity and tolerations (and the NFD worker's)."""
    return copy.deepcopy(_load(f"charts/{chart}/{version}/scheduling-defaults.json"))
