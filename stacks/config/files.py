"""Read stack files and resolve `extends` (environment cloning) into one set of values.

A stack file may say `llm-serving:extends: prod`: its values deep-merge over prod's file. Secrets
are never inherited, so a clone cannot silently talk to prod with prod's credentials.
"""

from __future__ import annotations

import difflib
import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from stacks.config.problems import PROJECT, ConfigError, Problem
from stacks.config.stack import LOADER_KEYS

PROJECT_DIR = Path(__file__).resolve().parents[2]
STACK_FILE = re.compile(r"^Pulumi\.(?P<stack>[A-Za-z0-9_.-]+)\.yaml$")
# Stand-in for a `secure:` value the offline render cannot decrypt; long enough to pass the
# length checks real secrets must pass, and masked as "[secret]" wherever it is shown.
SECRET_PLACEHOLDER = "[secret: encrypted in the stack file]"


@dataclass(frozen=True)
class StackFile:
    """One `Pulumi.<stack>.yaml`, split into our keys, secret keys and other providers' keys."""

    stack: str
    path: Path
    values: dict[str, Any]  # our keys, without the `llm-serving:` prefix; secrets as placeholders
    secret_keys: frozenset[str]
    other: dict[str, Any] = field(default_factory=dict)  # e.g. `aws:region`


@dataclass(frozen=True)
class ResolvedConfig:
    """A stack's own values merged over its `extends` chain, before validation."""

    stack: str
    values: dict[str, Any]
    secret_keys: frozenset[str]
    chain: tuple[str, ...]  # the stack, then each base it extends
    other: dict[str, Any]
    # Secrets a base stack sets that this stack does not: never inherited, so they are missing.
    uninherited_secrets: frozenset[str] = frozenset()


def stack_file_path(stack: str, project_dir: Path = PROJECT_DIR) -> Path:
    return project_dir / f"Pulumi.{stack}.yaml"


def find_stack_file(target: str, project_dir: Path = PROJECT_DIR, option: str = "stack") -> Path:
    """A stack name (`prod`) or a path to a stack file, as every command takes it; an unknown name
    lists the stacks that exist."""
    path = Path(target)
    if path.suffix == ".yaml" or path.is_file():
        return path
    path = stack_file_path(target, project_dir)
    if not path.is_file():
        known = stack_names(project_dir)
        close = difflib.get_close_matches(target, known, n=1)
        hint = f'did you mean "{close[0]}"? ' if close else ""
        raise ConfigError([Problem(option, f"no stack file Pulumi.{target}.yaml; {hint}stacks here: "
                                   f"{', '.join(known)}", target, "one of the stacks, or a path to a stack file")])
    return path


def stack_names(project_dir: Path = PROJECT_DIR) -> tuple[str, ...]:
    """Every stack with a file in the project, sorted: Pulumi.<stack>.yaml."""
    files = project_dir.glob("Pulumi.*.yaml")
    return tuple(sorted(p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in files))


def secret_placeholder(ciphertext: str) -> str:
    """What an encrypted value renders as offline: the placeholder and a fingerprint of its ciphertext, so a
    rotated secret (a new ciphertext in the stack file) is a different value to the diff, which masks it with a
    keyed digest (stacks/offline/render.py). The ciphertext is in the repository already: nothing is revealed."""
    return f"{SECRET_PLACEHOLDER} {hashlib.sha256(ciphertext.encode()).hexdigest()[:16]}"


def split_config(stack: str, path: Path, config: dict[str, Any]) -> StackFile:
    """Separate `llm-serving:` keys (un-prefixed keys belong to the project too) from the rest."""
    values: dict[str, Any] = {}
    other: dict[str, Any] = {}
    secrets: set[str] = set()
    for key, value in config.items():
        namespace, _, name = str(key).rpartition(":")
        if namespace and namespace != PROJECT:
            other[str(key)] = value
            continue
        if isinstance(value, dict) and set(value) == {"secure"}:
            secrets.add(name)
            value = secret_placeholder(str(value["secure"]))
        values[name] = value
    return StackFile(stack, path, values, frozenset(secrets), other)


def read_stack_file(path: Path) -> StackFile:
    """Parse one stack file; a missing or malformed file is a `ConfigError`."""
    match = STACK_FILE.match(path.name)
    if not match:
        raise ConfigError([Problem("file", "not a stack file name", path.name, "Pulumi.<stack>.yaml")])
    if not path.is_file():
        raise ConfigError([Problem("file", "stack file not found", str(path), "an existing file")])
    try:
        document = parse_yaml(path.read_text(encoding="utf-8")) or {}
    except UnicodeDecodeError as exc:
        # YAML is UTF-8 here (and what the Pulumi CLI reads); a Latin-1 byte is named, not a traceback.
        line = path.read_bytes()[:exc.start].count(b"\n") + 1
        raise ConfigError([Problem("file", f"not UTF-8: byte 0x{exc.object[exc.start]:02x} on line {line}",
                                   path.name, "a UTF-8 file (re-save it as UTF-8)")]) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(
            [Problem("file", f"not valid YAML{where}: {problem}", path.name, "a YAML mapping")]
        ) from None
    config = document.get("config", {}) if isinstance(document, dict) else None
    if not isinstance(config, dict):
        raise ConfigError([Problem("file", "no `config:` mapping", path.name, "a `config:` mapping")])
    return split_config(match["stack"], path, config)


# libyaml's parser where PyYAML was built with it (its wheels are), under the same safe constructor and
# resolver, so the same documents: a stack file is parsed for every render, check and command, and the
# pure-Python parser spent nearly 4 s of the test suite's CPU on them (tests/stacks/config/test_files.py
# compares both on every committed stack file).
_FAST_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def parse_yaml(text: str) -> Any:
    """`yaml.safe_load(text)`, parsed by libyaml when it can be. On a syntax error the pure parser
    parses again, so the error and its line are the ones `safe_load` gives. A text with a tab goes to
    the pure parser alone: libyaml (PyYAML 6.0) accepts a tab between tokens (`key:\tvalue`, `value\t`,
    `[a,\tb]`) and inside a plain scalar, where `safe_load` refuses the file."""
    if "\t" in text:
        return yaml.safe_load(text)
    try:
        return yaml.load(text, Loader=_FAST_LOADER)  # noqa: S506 - a safe loader (CSafeLoader or SafeLoader)
    except yaml.YAMLError:
        return yaml.safe_load(text)


def deep_merge(base: Any, override: Any) -> Any:
    """Objects key by key; lists of named objects by `name`; anything else is replaced. A `null` in the extending
    file removes the inherited key, so its default applies: the one way to drop a label of a base's node selector
    (mappings merge key by key). Every optional key defaults to null, so for those it is the same as before."""
    if isinstance(base, dict) and isinstance(override, dict):
        merged = dict(base)
        for key, value in override.items():
            if value is None:
                merged.pop(key, None)
                continue
            merged[key] = deep_merge(base[key], value) if key in base else value
        return merged
    if _named_list(base) and _named_list(override):
        by_name = {item["name"]: item for item in base}
        merged_items = [deep_merge(item, _find(override, item["name"])) for item in base]
        merged_items += [item for item in override if item["name"] not in by_name]
        return merged_items
    return override


def _named_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(i, dict) and "name" in i for i in value)


def _find(items: list[dict[str, Any]], name: str) -> Any:
    for item in items:
        if item["name"] == name:
            return item
    return {}


def resolve(own: StackFile, project_dir: Path) -> ResolvedConfig:
    """Merge a stack over its `extends` chain; a missing base or a cycle is a `ConfigError`."""
    chain = [own]
    seen = [own.stack]
    current = own
    while "extends" in current.values:
        base_name = current.values["extends"]
        if not isinstance(base_name, str) or not STACK_FILE.match(f"Pulumi.{base_name}.yaml"):
            raise ConfigError([Problem("extends", "not a stack name", base_name, "the name of a stack")])
        if base_name in seen:
            cycle = " -> ".join([*seen, base_name])
            raise ConfigError(
                [Problem("extends", f"cyclic extends: {cycle}", base_name, "a chain that ends")]
            )
        base_path = stack_file_path(base_name, project_dir)
        if not base_path.is_file():
            known = sorted(p.name for p in project_dir.glob("Pulumi.*.yaml"))
            raise ConfigError(
                [
                    Problem(
                        "extends",
                        f"base stack file {base_path.name} not found",
                        base_name,
                        "one of " + ", ".join(m["stack"] for k in known if (m := STACK_FILE.match(k))),
                    )
                ]
            )
        current = read_stack_file(base_path)
        chain.append(current)
        seen.append(base_name)

    merged: dict[str, Any] = {}
    # Provider keys (aws:region) are not ours to merge: `pulumi up` passes only this stack's file.
    other = dict(own.other)
    uninherited: set[str] = set()
    for layer in reversed(chain):
        layer_values = {k: v for k, v in layer.values.items() if k not in LOADER_KEYS}
        if layer is not own:
            # Secrets stay with the stack that set them: a clone must set its own, or it would
            # reach prod's systems with prod's credentials.
            uninherited |= {k for k in layer.secret_keys if k not in own.values}
            layer_values = {k: v for k, v in layer_values.items() if k not in layer.secret_keys}
        merged = deep_merge(merged, layer_values)
    chain_names = tuple(s.stack for s in chain)
    return ResolvedConfig(own.stack, merged, own.secret_keys, chain_names, other, frozenset(uninherited))
