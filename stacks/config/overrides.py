"""`key.path=value` overrides, as `clone --set` and `plan --stack` take them, applied to stack values.

A path names mapping keys with dots and one of a named list's items by its name in brackets:
`models[llama-70b].replicas=1`. Values are YAML scalars or flow collections; nothing is guessed.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any

import yaml

from stacks.config.problems import MISSING, PROJECT, ConfigError, Problem

# One path segment: a camelCase key, optionally followed by `[name]` (an item of a named list).
_SEGMENT = re.compile(r"^(?P<key>[A-Za-z][A-Za-z0-9]*)(\[(?P<name>[a-z0-9]([-a-z0-9]*[a-z0-9])?)\])?$")
# A Pulumi config namespace before the key: `aws:region`, `llm-serving:cluster.name`.
_NAMESPACE = re.compile(r"^(?P<namespace>[A-Za-z][A-Za-z0-9_-]*):(?P<rest>.+)$")
SYNTAX = "key.path=value, models[<name>].key=value, or <namespace>:<name>=value such as aws:region=eu-west-1"


@dataclass(frozen=True)
class Segment:
    key: str
    name: str | None = None  # the item of a named list, e.g. models[llama-70b]

    def __str__(self) -> str:
        return f"{self.key}[{self.name}]" if self.name else self.key


@dataclass(frozen=True)
class Override:
    """One parsed override: our own key path, or a provider key (`namespace` set)."""

    namespace: str | None
    path: tuple[Segment, ...]
    value: Any
    option: str = "--set"

    @property
    def key(self) -> str:
        return ".".join(str(s) for s in self.path)


def parse_path(key: str, option: str) -> tuple[Segment, ...]:
    """`weightsStorage.efs.stagingNodeSecurityGroupIds` or `models[llama-70b].image.repository` as segments, for
    an option that names a key without a value (`clone --keep`); our own keys only."""
    matches = [_SEGMENT.match(part) for part in key.strip().split(".")]
    segments = tuple(Segment(m["key"], m["name"]) for m in matches if m is not None)
    if not key.strip() or len(segments) != len(matches):
        raise ConfigError([Problem(option, "not a key path", key, "key.path or models[<name>].key, as --set names it")])
    return segments


def lookup(tree: Any, path: tuple[Segment, ...]) -> Any:
    """The value at `path` (a named item by its name), or MISSING where the tree has none (a `null` is a value: a
    clone's file may set one)."""
    node = tree
    for segment in path:
        node = node.get(segment.key, MISSING) if isinstance(node, dict) else MISSING
        if segment.name is not None:
            node = next((i for i in node if isinstance(i, dict) and i.get("name") == segment.name), MISSING) \
                if isinstance(node, list) else MISSING
    return node


def parse(text: str, option: str = "--set") -> Override:
    """`gpuNodeGroup.scaling.maxNodes=2`, `models[llama-70b].replicas=1` or `aws:region=eu-west-1`."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    namespace = None
    found = _NAMESPACE.match(key)
    if found:
        namespace, key = found["namespace"], found["rest"]
        if namespace == PROJECT:
            namespace = None
    segments: list[Segment] = []
    for part in key.split(".") if sep and key else []:
        match = _SEGMENT.match(part)
        if match is None or (namespace is not None and match["name"]):
            segments = []
            break
        segments.append(Segment(match["key"], match["name"]))
    if not segments:
        raise ConfigError([Problem(option, "not a key.path=value override", text, SYNTAX)])
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at column {mark.column + 1}" if mark else ""
        raise ConfigError([Problem(option, f"the value is not valid YAML{where}", raw.strip(),
                                   "a YAML scalar, list or mapping, quoted if it holds [ ] { } : or #")]) from None
    if namespace is not None and value in ("", None):
        raise ConfigError([Problem(option, f"an empty value for provider key {namespace}:{key}", text,
                                   "a value, e.g. aws:region=eu-west-1")])
    return Override(namespace, tuple(segments), value, option)


def apply(tree: dict[str, Any], override: Override, *, create_items: bool) -> dict[str, Any]:
    """A copy of `tree` with the override set. A named item that does not exist is appended as
    `{name: ...}` when `create_items` (a clone's own file, merged by name over its base later),
    else refused with the names that exist (the values are already resolved)."""
    result = copy.deepcopy(tree)
    node: Any = result
    for index, segment in enumerate(override.path):
        last = index == len(override.path) - 1
        where = ".".join(str(s) for s in override.path[: index + 1])
        if not isinstance(node, dict):
            raise ConfigError([Problem(override.key, f"cannot set a key below the plain value at {where}",
                                       node, "a path through mappings")])
        if segment.name is None:
            if last:
                node[segment.key] = override.value
            else:
                node = node.setdefault(segment.key, {})
            continue
        items = node.setdefault(segment.key, [])
        if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
            raise ConfigError([Problem(override.key, f"{segment.key} is not a list of named items", items,
                                       f"{segment.key}[<name>] only on a list such as models")])
        item = next((i for i in items if i.get("name") == segment.name), None)
        if item is None:
            if not create_items:
                names = ", ".join(str(i.get("name")) for i in items) or "none"
                raise ConfigError([Problem(override.key, f"no item named {segment.name} in {segment.key}",
                                           segment.name, f"one of: {names}")])
            item = {"name": segment.name}
            items.append(item)
        if last:
            if not isinstance(override.value, dict):
                raise ConfigError([Problem(override.key, "a whole list item takes a mapping", override.value,
                                           f"{where}.<key>=value")])
            item.update(override.value)
        node = item
    return result
