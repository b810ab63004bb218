"""Regenerate tests/fixtures/reference/ from the pinned upstream data in shared/reference/.

Tests must run from a bare clone, so they read these compact JSON fixtures instead. The fixtures hold
facts only (schemas without descriptions, key trees, name lists), never upstream prose or code.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import io
import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_REFERENCE = REPO_ROOT.parent / "shared" / "reference"
DEFAULT_OUT = REPO_ROOT / "tests" / "fixtures" / "reference"

# Top-level entries of the output directory this script owns; anything else there is left alone,
# everything in here is rewritten so a removed pin cannot leave a stale fixture behind.
OWNED_ENTRIES = ("crds", "charts", "vllm", "dcgm-exporter", "aws", "addons", "pins.json")

# CRD manifests the program applies itself (no chart publishes them), one file per upstream release
# manifest, derived here so preview and up apply exactly these reviewed bytes instead of whatever a
# release URL serves that day (llm-d-router re-uploads its release assets under the same tag).
# Each bundle holds the CRDs the release's manifests.yaml carries, in its order.
DEFAULT_MANIFESTS_OUT = REPO_ROOT / "llm_serving" / "platform" / "crds"
CRD_BUNDLES: dict[str, tuple[str, ...]] = {
    # GIE v1.6.0 manifests.yaml: InferencePool and InferencePoolImport only (GIE README @v1.6.0).
    "gateway-api-inference-extension-v1.6.0.yaml": (
        "inference.networking.k8s.io_inferencepools.yaml",
        "inference.networking.x-k8s.io_inferencepoolimports.yaml",
    ),
    # llm-d-router v0.10.0 manifests.yaml: `make artifacts` concatenates config/crd/bases.
    "llm-d-router-v0.10.0.yaml": (
        "llm-d.ai_inferencemodelrewrites.yaml",
        "llm-d.ai_inferenceobjectives.yaml",
    ),
}

# Schema keywords whose value is a single sub-schema or a list of sub-schemas.
_SUBSCHEMA_KEYS = ("items", "additionalProperties", "not")
_SUBSCHEMA_LIST_KEYS = ("anyOf", "allOf", "oneOf")
# Schema keywords whose value maps arbitrary names to sub-schemas (so a property called
# "description" must survive while the description annotation is dropped).
_SCHEMA_MAP_KEYS = ("properties", "patternProperties", "definitions")
# Dropped from CRD schemas: prose, and CEL rules (upstream code with prose messages) that
# jsonschema cannot evaluate anyway.
_DROPPED_SCHEMA_KEYS = frozenset({"description", "x-kubernetes-validations"})

_FLAG_FIELDS = (
    "flag",
    "aliases",
    "kind",
    "nargs",
    "choices",
    "known_values",
    "post_parse_known_values",
    "true_forms",
    "false_forms",
    "deprecated",
    "value_type",
    "repeatable",
    "accepts_none",
)
_METRIC_FIELDS = ("name", "family", "type", "labels", "exposed_series", "label_values", "always_present")
_DCGM_ROW = re.compile(r"^\s*(#)?\s*(DCGM_FI_[A-Z0-9_]+)\s*,\s*([a-z]+)\s*,")


def _load_yaml(path: Path) -> Any:
    # CSafeLoader: the Envoy and LWS CRDs are over a megabyte and the pure-Python loader is slow.
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with path.open(encoding="utf-8") as handle:
        return yaml.load(handle, Loader=loader)  # noqa: S506 - CSafeLoader or SafeLoader, both safe


def _dump(data: Any, compact: bool = False) -> str:
    # indent=1 keeps diffs reviewable; the deeply nested CRD schemas are written unindented since
    # indentation alone would double their size. Sorted keys and a trailing newline keep output
    # byte-stable.
    return json.dumps(data, indent=None if compact else 1, sort_keys=True, ensure_ascii=False) + "\n"


def strip_schema(node: Any, dropped: frozenset[str] = _DROPPED_SCHEMA_KEYS) -> Any:
    """Return a copy of an OpenAPI schema node without descriptions and (by default) CEL rules."""
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in dropped:
            continue
        if key in _SCHEMA_MAP_KEYS and isinstance(value, dict):
            out[key] = {name: strip_schema(sub, dropped) for name, sub in value.items()}
        elif key in _SUBSCHEMA_KEYS and isinstance(value, dict):
            out[key] = strip_schema(value, dropped)
        elif key in _SUBSCHEMA_LIST_KEYS and isinstance(value, list):
            out[key] = [strip_schema(sub, dropped) for sub in value]
        else:
            # default/enum/required/... are data: copied untouched even if they hold a
            # "description" key of their own.
            out[key] = value
    return out


def derive_crd(path: Path) -> tuple[str, dict[str, Any]]:
    crd = _load_yaml(path)
    spec = crd["spec"]
    versions = {
        version["name"]: {
            "served": bool(version.get("served", False)),
            "schema": strip_schema(version.get("schema", {}).get("openAPIV3Schema", {})),
        }
        for version in spec["versions"]
    }
    group, plural = spec["group"], spec["names"]["plural"]
    fixture = {
        "group": group,
        "kind": spec["names"]["kind"],
        "plural": plural,
        "scope": spec["scope"],
        "versions": versions,
    }
    return f"crds/{group}_{plural}.json", fixture


def deployable_crd(path: Path) -> dict[str, Any]:
    """The upstream CRD as the API server should receive it, minus descriptions only: CEL rules stay,
    since they are what the API server enforces (apiextensions keeps no prose it needs)."""
    crd = _load_yaml(path)
    versions = []
    for version in crd["spec"]["versions"]:
        version = dict(version)
        if "schema" in version:
            version["schema"] = {
                "openAPIV3Schema": strip_schema(version["schema"]["openAPIV3Schema"], frozenset({"description"}))
            }
        versions.append(version)
    return {**crd, "spec": {**crd["spec"], "versions": versions}}


def derive_manifests(reference: Path) -> dict[str, str]:
    """Every CRD bundle the program applies, as {file name: YAML text}."""
    out: dict[str, str] = {}
    for bundle, files in CRD_BUNDLES.items():
        documents = [deployable_crd(reference / "crds" / name) for name in files]
        out[bundle] = yaml.safe_dump_all(documents, sort_keys=True, width=1_000_000)
    return out


def derive_addon_schema(path: Path) -> dict[str, Any]:
    """An EKS add-on's configuration schema (draft-07 JSON schema) without its prose."""
    return strip_schema(json.loads(path.read_text(encoding="utf-8")))


def values_tree(value: Any, subcharts: frozenset[str] = frozenset()) -> dict[str, Any]:
    """Describe a values.yaml default as a comment-free type tree (see tests/support/reference.py)."""
    if isinstance(value, dict):
        if not value and not subcharts:
            return {"type": "map", "open": True}
        keys = {str(key): values_tree(sub) for key, sub in value.items()}
        for name in subcharts:
            # A subchart's own defaults are not in the reference, so its key is marked and kept
            # even where the parent lists nothing for it.
            node = keys.get(name)
            if node is None or node["type"] != "map":
                node = {"type": "map", "keys": {}}
            node = {**node, "subchart": True}
            node.pop("open", None)
            node.setdefault("keys", {})
            keys[name] = node
        return {"type": "map", "keys": keys}
    if isinstance(value, list):
        return {"type": "list"}
    if value is None:
        return {"type": "null"}
    if isinstance(value, bool):  # before int: bool is an int subclass
        return {"type": "bool"}
    if isinstance(value, int):
        return {"type": "int"}
    if isinstance(value, float):
        return {"type": "float"}
    if isinstance(value, str | datetime.date):
        # YAML timestamps reach Helm as strings.
        return {"type": "string"}
    raise TypeError(f"unexpected YAML value type {type(value).__name__}")


def _first_token(text: str) -> str:
    # index.json annotates some fields, e.g. "v1.9.0 (also pushed as 1.9.0)" or
    # "https://... (chart keda)"; the fact is the first token.
    return text.split()[0] if text.strip() else text


def derive_chart(chart_dir: Path, index_entry: dict[str, Any]) -> dict[str, Any]:
    chart_yaml = _load_yaml(chart_dir / "Chart.yaml")
    dependencies = [
        {"name": dep["name"], "alias": dep.get("alias")} for dep in chart_yaml.get("dependencies") or []
    ]
    published = index_entry.get("published_version")
    helm_repo = index_entry.get("helm_repo")
    return {
        "name": chart_yaml["name"],
        # Git carries placeholders for some charts (gateway-helm v0.0.0-latest, lws 0.1.0); the
        # version helm installs is the published one.
        "version": _first_token(str(published)) if published else str(chart_yaml["version"]),
        "appVersion": str(chart_yaml.get("appVersion")) if chart_yaml.get("appVersion") else None,
        "kubeVersion": chart_yaml.get("kubeVersion"),
        "repository": _first_token(helm_repo) if helm_repo else None,
        "dependencies": dependencies,
    }


def derive_dcgm_csv(path: Path, include_commented: bool) -> list[list[str]]:
    rows: list[list[str]] = []
    for line in io.StringIO(path.read_text(encoding="utf-8")):
        match = _DCGM_ROW.match(line)
        if not match:
            continue
        commented, field, prom_type = match.groups()
        if commented and not include_commented:
            continue
        # Cross-check the regex against a real CSV parse of the row: fields have stray spaces.
        parsed = next(csv.reader([line.lstrip("#").strip()]))
        assert parsed[0].strip() == field and parsed[1].strip() == prom_type, line
        rows.append([field, prom_type])
    return rows


def derive_flags(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text(encoding="utf-8"))
    flags = [{key: flag.get(key) for key in _FLAG_FIELDS} for flag in data["flags"]]
    return {
        "version": data["vllm_version"],
        "all_option_strings": sorted(data["all_option_strings"]),
        "flags": sorted(flags, key=lambda flag: flag["flag"]),
    }


def derive_metrics(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text(encoding="utf-8"))

    def compact(metric: dict[str, Any]) -> dict[str, Any]:
        return {key: metric[key] for key in _METRIC_FIELDS if key in metric}

    http = data["http_metrics"]
    http_metrics = http["metrics"] if isinstance(http, dict) else http
    return {
        "version": data["vllm_version"],
        "metrics": sorted((compact(m) for m in data["metrics"]), key=lambda m: m["name"]),
        "http_metrics": sorted((compact(m) for m in http_metrics), key=lambda m: m["name"]),
    }


SCHEDULING_KEYS = ("nodeSelector", "affinity", "tolerations")


def derive(reference: Path) -> dict[str, str]:
    """Return every fixture as {relative path: file text}."""
    index = json.loads((reference / "index.json").read_text(encoding="utf-8"))
    out: dict[str, str] = {"pins.json": _dump(index["pins"])}

    for crd_path in sorted((reference / "crds").glob("*.yaml")):
        rel, fixture = derive_crd(crd_path)
        out[rel] = _dump(fixture, compact=True)

    chart_entries = {
        (entry["chart"], entry["chart_version"]): entry
        for entry in index["files"]
        if entry.get("kind") == "helm-chart-file" and entry["path"].endswith("/Chart.yaml")
    }
    for chart_dir in sorted(p.parent for p in (reference / "charts").glob("*/*/Chart.yaml")):
        chart, version = chart_dir.parent.name, chart_dir.name
        info = derive_chart(chart_dir, chart_entries.get((chart, version), {}))
        subcharts = frozenset(dep["alias"] or dep["name"] for dep in info["dependencies"])
        defaults = _load_yaml(chart_dir / "values.yaml") or {}
        out[f"charts/{chart}/{version}/chart.json"] = _dump(info)
        out[f"charts/{chart}/{version}/values-tree.json"] = _dump(values_tree(defaults, subcharts))
        # Default scheduling values (data, no comments): tests merge ours over them the way Helm
        # does to prove where the chart's pods can land.
        scheduling = {k: defaults[k] for k in SCHEDULING_KEYS if k in defaults}
        worker = ((defaults.get("nfd") or {}).get("worker") or {})
        if "tolerations" in worker:
            scheduling["nfd"] = {"worker": {"tolerations": worker["tolerations"]}}
        out[f"charts/{chart}/{version}/scheduling-defaults.json"] = _dump(scheduling)

    for dcgm_dir in sorted((reference / "charts" / "dcgm-exporter").glob("*/")):
        default_csv = dcgm_dir / "default-counters.csv"
        dcp_csv = dcgm_dir / "dcp-metrics-included.csv"
        if not default_csv.exists():
            continue
        base = f"dcgm-exporter/{dcgm_dir.name}"
        out[f"{base}/default-counters.json"] = _dump({"fields": derive_dcgm_csv(default_csv, False)})
        out[f"{base}/dcp-metrics-included.json"] = _dump({"fields": derive_dcgm_csv(dcp_csv, False)})
        # Live rows win over commented ones: DCGM_FI_PROF_PCIE_TX_BYTES is a commented "counter"
        # (the old NVML meaning) and a live "gauge" (the DCP rate) in the same file.
        known: dict[str, str] = {}
        for include_commented in (False, True):
            for csv_path in (default_csv, dcp_csv):
                for field, prom_type in derive_dcgm_csv(csv_path, include_commented):
                    known.setdefault(field, prom_type)
        for field, prom_type in (row for p in (default_csv, dcp_csv) for row in derive_dcgm_csv(p, False)):
            if known[field] != prom_type:
                raise ValueError(f"{field} is exported as both {known[field]} and {prom_type}")
        out[f"{base}/all-known-fields.json"] = _dump({"fields": sorted([f, t] for f, t in known.items())})

    for schema_path in sorted((reference / "aws" / "addons").glob("*.configuration.schema.json")):
        addon = schema_path.name.removesuffix(".configuration.schema.json")
        out[f"aws/addons/{addon}.json"] = _dump(derive_addon_schema(schema_path))
    # EKS add-on configuration schemas without their prose, as DescribeAddonConfiguration returns them
    # (preflight's tests answer that call with these).
    for schema_path in sorted((reference / "aws" / "addons").glob("*.configuration.schema.json")):
        schema = strip_schema(json.loads(schema_path.read_text(encoding="utf-8")))
        out[f"addons/{schema_path.name}"] = _dump(schema, compact=True)

    for vllm_dir in sorted((reference / "vllm").glob("*/")):
        out[f"vllm/{vllm_dir.name}/flags.json"] = _dump(derive_flags(vllm_dir / "serve-flags.json"))
        out[f"vllm/{vllm_dir.name}/metrics.json"] = _dump(derive_metrics(vllm_dir / "metrics.json"))
    return out


def write(fixtures: dict[str, str], out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    for entry in OWNED_ENTRIES:
        target = out_dir / entry
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()
    for rel, text in sorted(fixtures.items()):
        path = out_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", type=Path, default=DEFAULT_REFERENCE)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--manifests-out", type=Path, default=DEFAULT_MANIFESTS_OUT,
                        help="where the CRD manifests the program applies are written")
    args = parser.parse_args(argv)
    if not (args.reference / "index.json").is_file():
        print(f"no reference data at {args.reference} (expected index.json)", file=sys.stderr)
        return 2
    fixtures = derive(args.reference)
    write(fixtures, args.out)
    manifests = derive_manifests(args.reference)
    args.manifests_out.mkdir(parents=True, exist_ok=True)
    for stale in args.manifests_out.glob("*.yaml"):
        if stale.name not in manifests:
            stale.unlink()
    for name, text in manifests.items():
        (args.manifests_out / name).write_text(text, encoding="utf-8")
    total = sum(len(text.encode("utf-8")) for text in fixtures.values())
    print(f"wrote {len(fixtures)} fixture files ({total / 1024:.0f} KiB) to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
