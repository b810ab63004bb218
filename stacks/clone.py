"""`python -m stacks clone <from> <to> --set key.path=value`: a new stack file that extends another.

The new file holds only `extends` and the overrides, so it stays a clone: later changes to the
base reach it. It is validated before it is written, and an existing file is never overwritten.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import yaml

from stacks import loader
from stacks.problems import ConfigError, Problem


def parse_override(text: str) -> tuple[list[str], Any]:
    """`gpuNodeGroup.scaling.maxNodes=2` -> (["gpuNodeGroup", "scaling", "maxNodes"], 2)."""
    key, sep, raw = text.partition("=")
    parts = [p for p in key.strip().split(".") if p]
    if not sep or not parts:
        raise ConfigError([Problem("--set", "not a key.path=value override", text, "key.path=value")])
    value = yaml.safe_load(raw) if raw.strip() else ""
    return parts, value


def _set(tree: dict[str, Any], parts: list[str], value: Any) -> None:
    node = tree
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError([Problem(".".join(parts), "cannot set a key below a plain value",
                                       node, "a mapping")])
    node[parts[-1]] = value


def clone_document(base: str, overrides: list[str], base_other: dict[str, Any] | None = None) -> dict[str, Any]:
    """The YAML document of the new stack file. Provider keys (aws:region) are copied from the
    base: `pulumi up` passes only the clone's own file, so they cannot be inherited."""
    values: dict[str, Any] = {}
    for text in overrides:
        parts, value = parse_override(text)
        if parts[0] == "extends":
            raise ConfigError([Problem("extends", "set by clone itself", text, "no --set extends")])
        _set(values, parts, value)
    config: dict[str, Any] = {**(base_other or {}), f"{loader.PROJECT}:extends": base}
    for key in sorted(values):
        config[f"{loader.PROJECT}:{key}"] = values[key]
    return {"config": config}


def clone(base: str, new: str, overrides: list[str], project_dir: Path) -> tuple[Path, list[str]]:
    """Write the clone; returns its path and the secrets it must set before a preview."""
    target = loader.stack_file_path(new, project_dir)
    if not loader.STACK_FILE.match(target.name):
        raise ConfigError([Problem("stack", "not a valid stack name", new, "letters, digits, - _ .")])
    if target.exists():
        raise ConfigError([Problem("stack", f"{target.name} already exists; not overwriting it", new,
                                   "the name of a new stack")])
    if not loader.stack_file_path(base, project_dir).is_file():
        raise ConfigError([Problem("extends", "no such stack to clone", base, "an existing stack file")])
    base_file = loader.read_stack_file(loader.stack_file_path(base, project_dir))
    document = clone_document(base, overrides, base_file.other)
    own = loader.split_config(new, target, document["config"])
    resolved = loader.resolve(own, project_dir)
    # Secrets cannot be cloned and cannot be given here; validate everything else with stand-ins
    # and tell the user which secrets to set (raises ConfigError on anything else: nothing written).
    stand_ins = {key: loader.SECRET_PLACEHOLDER for key in resolved.uninherited_secrets}
    loader.validate(
        dataclasses.replace(
            resolved,
            values={**resolved.values, **stand_ins},
            secret_keys=resolved.secret_keys | set(stand_ins),
            uninherited_secrets=frozenset(),
        )
    )
    header = (
        f"# Clone of {base}: values here deep-merge over Pulumi.{base}.yaml.\n"
        f"# Secrets are not inherited; set each with `pulumi config set --secret ... -s {new}`.\n"
    )
    target.write_text(header + yaml.safe_dump(document, sort_keys=False, default_flow_style=False))
    return target, sorted(resolved.uninherited_secrets)
