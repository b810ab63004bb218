"""`python -m stacks clone <from> <to> --set key.path=value`: a new stack file that extends another.

The new file holds `extends`, the overrides, the keys the Pulumi CLI needs in the stack's own file
(required declarations such as `llm-serving:environment`, provider keys such as `aws:region`) and a
placeholder per secret, so it stays a clone: later changes to the base reach it. It is validated,
against our models and the CLI's own rules (stacks/keys.py), before it is written, and an
existing file is never overwritten.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from stacks import environment
from stacks.config import files, keys
from stacks.config.problems import ConfigError, Problem


def parse_override(text: str) -> tuple[str | None, list[str], Any]:
    """`gpuNodeGroup.scaling.maxNodes=2` -> (None, ["gpuNodeGroup", "scaling", "maxNodes"], 2);
    `aws:region=eu-west-1` -> ("aws", ["region"], "eu-west-1"): a provider key, written as the CLI
    spells it; `llm-serving:cluster.name=x` is our own key."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    namespace = None
    if ":" in key:
        head, dot, rest = key.partition(".")
        parsed = keys.parse_key(head)
        if parsed is None:
            raise ConfigError([Problem("--set", "the Pulumi CLI cannot parse this config key", key,
                                       "key.path=value, or <namespace>:<name>=value such as aws:region=eu-west-1")])
        namespace, name = parsed
        key = name + dot + rest
        if namespace == files.PROJECT:
            namespace = None
    parts = [p for p in key.split(".") if p]
    if not sep or not parts:
        raise ConfigError([Problem("--set", "not a key.path=value override", text, "key.path=value")])
    value = yaml.safe_load(raw) if raw.strip() else ""
    return namespace, parts, value


def _set(tree: dict[str, Any], parts: list[str], value: Any) -> None:
    node = tree
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError([Problem(".".join(parts), "cannot set a key below a plain value",
                                       node, "a mapping")])
    node[parts[-1]] = value


def clone_document(
    base: str,
    overrides: list[str],
    base_other: dict[str, Any] | None = None,
    required: dict[str, Any] | None = None,
    secrets: list[str] | None = None,
) -> dict[str, Any]:
    """The YAML document of the new stack file.

    Provider keys (aws:region) are copied from the base and keys `Pulumi.yaml` requires are written
    from the base's resolved values (`required`, e.g. environment): the CLI reads only the clone's
    own file, so neither can be inherited. Each secret gets the placeholder the render accepts and
    `make preview` refuses.
    """
    values: dict[str, Any] = dict(required or {})
    other: dict[str, Any] = dict(base_other or {})
    for text in overrides:
        namespace, parts, value = parse_override(text)
        if namespace is not None:
            node: dict[str, Any] = {}
            _set(node, parts, value)
            key = f"{namespace}:{parts[0]}"
            other[key] = files.deep_merge(other.get(key), node[parts[0]]) if isinstance(other.get(key), dict) \
                else node[parts[0]]
            continue
        if parts[0] == "extends":
            raise ConfigError([Problem("extends", "set by clone itself", text, "no --set extends")])
        _set(values, parts, value)
    config: dict[str, Any] = {**other, f"{files.PROJECT}:extends": base}
    for key in sorted(values):
        config[f"{files.PROJECT}:{key}"] = values[key]
    for key in sorted(secrets or []):
        config[f"{files.PROJECT}:{key}"] = dict(keys.PLACEHOLDER_SECRET)
    return {"config": config}


def create_cluster_overrides(base_values: dict[str, Any], zones: list[str]) -> list[str]:
    """`clone --create-cluster a,b,c`: the overrides that turn a clone into a stack creating its own
    cluster over these zones (a new account or region has no cluster to attach to). The GPU nodes
    keep as many zones as the base gave them (one for a placement group or capacity block), now the
    first of the new zones, in the created subnets; every other cluster.create key keeps its default."""
    if not 2 <= len(zones) <= 3 or len(set(zones)) != len(zones):
        raise ConfigError([Problem("--create-cluster", "two or three distinct availability zones", ",".join(zones),
                                   "e.g. eu-west-1a,eu-west-1b,eu-west-1c")])
    subnets = base_values.get("gpuNodeGroup", {}).get("subnets", [])
    gpu_zones = max(1, min(len({s.get("availabilityZone") for s in subnets}), len(zones)))
    return [
        "cluster.mode=create",
        f"cluster.create.zones=[{', '.join(zones)}]",
        "gpuNodeGroup.subnets=[" + ", ".join(f"{{availabilityZone: {z}}}" for z in zones[:gpu_zones]) + "]",
    ]


def clone(
    base: str, new: str, overrides: list[str], project_dir: Path, create_zones: list[str] | None = None
) -> tuple[Path, list[str]]:
    """Write the clone; returns its path and the secrets it must set before a preview. With
    `create_zones` the clone creates its own cluster there (`create_cluster_overrides`), before the
    `overrides`, which win."""
    target = files.stack_file_path(new, project_dir)
    if not files.STACK_FILE.match(target.name):
        raise ConfigError([Problem("stack", "not a valid stack name", new, "letters, digits, - _ .")])
    if target.exists():
        raise ConfigError([Problem("stack", f"{target.name} already exists; not overwriting it", new,
                                   "the name of a new stack")])
    if not files.stack_file_path(base, project_dir).is_file():
        raise ConfigError([Problem("extends", "no such stack to clone", base, "an existing stack file")])
    base_file = files.read_stack_file(files.stack_file_path(base, project_dir))
    project = keys.load_project(project_dir)
    base_resolved = files.resolve(base_file, project_dir)
    required = {}
    for key in keys.required_keys(project):
        namespace, name = key.split(":", 1)
        if namespace == files.PROJECT and name in base_resolved.values:
            required[name] = base_resolved.values[name]
    if create_zones is not None:
        overrides = [*create_cluster_overrides(base_resolved.values, create_zones), *overrides]
    # Secrets are never inherited: the clone gets a placeholder for each secret its base chain has.
    first = clone_document(base, overrides, base_file.other, required)
    secrets = sorted(files.resolve(files.split_config(new, target, first["config"]), project_dir).uninherited_secrets)
    document = clone_document(base, overrides, base_file.other, required, secrets)
    problems = keys.stack_file_problems(document, project, target.name)
    if problems:
        raise ConfigError(problems)
    # Validates everything (raises ConfigError on any problem: nothing written).
    environment.validate(files.resolve(files.split_config(new, target, document["config"]), project_dir))
    header = (
        f"# Clone of {base}: values here deep-merge over Pulumi.{base}.yaml.\n"
        f"# Secrets are not inherited: replace each placeholder with "
        f"`pulumi config set --secret <key> <value> -s {new}`.\n"
    )
    target.write_text(header + yaml.safe_dump(document, sort_keys=False, default_flow_style=False))
    return target, secrets
