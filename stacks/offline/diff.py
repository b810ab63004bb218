"""`python -m stacks diff <stack>`: what a change does to a stack's rendered resources, offline.

Renders the stack at a base git ref and in the working tree and lists, in the symbols of
`pulumi preview --diff`, what the engine would do: `+-` replace (with the inputs that force it),
`-` delete, `+` create, `~` update, each changed input or resource option as a dotted path with
old -> new, and the consequences it would show as separate steps (a node group rolling its nodes,
a protected resource blocking the update). Resources are matched by URN, so renaming or re-nesting
a component shows as delete + create. Exit 0: no change; 1: changes; 2: error.

Length: one command's pipeline, read top to bottom (export the base, render both sides, compare,
classify as the engine does: ignoreChanges, replacements, delete-first order, protect, the dependents
of replaced resources; format as text or markdown); the per-type replacement rules live in
replacements.py and the cost lines in consequences.py.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import os
import re
import secrets
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, TextIO

from llm_serving.serving import lookup_model
from llm_serving.stack import revisions
from stacks import environment
from stacks.config import files as stack_files
from stacks.config.problems import CommandLineParser
from stacks.offline import aliases, consequences, render, replacements, sides

EXIT_UNCHANGED = 0
EXIT_CHANGED = 1
EXIT_ERROR = 2
# `--check`: a change the real preview refuses, or one it lets through and `pulumi up` then fails on.
EXIT_REFUSED = 3
DEFAULT_BRANCH = "main"
VALUE_CHARS = 120  # longest value shown; longer ones are clipped around their first difference
LINE_DIFF_LINES = 40  # most changed lines shown for one multi-line string
MARKDOWN_BUDGET = 60_000  # a GitHub comment holds 65,536 characters; leave room for the rest
LONG_SECTION_ROWS = 25  # a markdown section longer than this is folded into <details>


class _Absent:
    """A field on one side only; distinct from JSON null, which is a real value."""

    def __repr__(self) -> str:
        return "(absent)"


ABSENT: Any = _Absent()


class _Unknown:
    """An input the engine cannot know at preview: an output of a resource being replaced."""

    def __repr__(self) -> str:
        return "(unknown)"


UNKNOWN: Any = _Unknown()


class DiffError(Exception):
    """Anything that stops the diff; each line is printed to stderr and the command exits 2."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        super().__init__("\n".join(lines))


@dataclass(frozen=True)
class FieldChange:
    path: str  # e.g. inputs.spec.template.spec.containers[vllm].args[13]
    old: Any  # ABSENT when the field is new
    new: Any  # ABSENT when the field is gone
    lines: tuple[str, ...] = ()  # unified-diff lines when both sides are multi-line strings
    note: str = ""  # "order": a named list has the same items in a different order


ACTIONS = ("replace", "delete", "create", "update")  # the order a reviewer reads them in
# Options the engine records in state without a step: with inputs unchanged its step generator makes a `same`
# step whatever they became (pulumi/pulumi pkg/resource/deploy/step_generator.go: the diff it asks the provider
# for is over inputs; dependsOn, customTimeouts, ignoreChanges, replaceOnChanges and deleteBeforeReplace only
# shape that diff or the order and timing of later steps). Shown apart, never counted as updates.
OPTIONS_ONLY = "options"
NO_STEP_OPTIONS = ("dependsOn", "customTimeouts", "ignoreChanges", "replaceOnChanges", "deleteBeforeReplace")
ORDER = (*ACTIONS, OPTIONS_ONLY)
SYMBOLS = {"replace": "+-", "delete": "-", "create": "+", "update": "~", OPTIONS_ONLY: "="}
TITLES = {"replace": "Replaced", "delete": "Deleted", "create": "Created", "update": "Updated",
          OPTIONS_ONLY: "Options only (no step: the engine records them in state)"}


@dataclass(frozen=True)
class ResourceChange:
    type: str
    name: str
    fields: tuple[FieldChange, ...] = ()
    action: str = "update"  # create | update | replace | delete
    forced_by: tuple[str, ...] = ()  # input paths that force a replacement
    notes: tuple[str, ...] = ()  # what the engine would also do, or refuse
    consequences: tuple[str, ...] = ()  # what it costs while `pulumi up` runs (stacks/offline/consequences.py)


@dataclass(frozen=True)
class StackDiff:
    stack: str
    base: str  # the ref given, or how it was chosen: "the merge base with main"
    commit: str = ""  # the base commit, abbreviated
    changes: tuple[ResourceChange, ...] = ()
    note: str = ""  # e.g. the stack file is new, so every resource is added

    @property
    def empty(self) -> bool:
        return not self.changes

    @property
    def against(self) -> str:
        return f"{self.base} ({self.commit})" if self.commit else self.base

    @property
    def preview_errors(self) -> tuple[str, ...]:
        """The changes the real `pulumi preview` already refuses, as "<type> <name>"."""
        return tuple(f"{c.type} {c.name}" for c in self.changes
                     if any(n.startswith(PROTECTED_ERROR) for n in c.notes))

    @property
    def up_errors(self) -> tuple[str, ...]:
        """The changes the preview lets through and `pulumi up` then fails on, as "<type> <name>"."""
        return tuple(f"{c.type} {c.name}" for c in self.changes if any(n.startswith(UP_ERROR) for n in c.notes))

    def of(self, action: str) -> tuple[ResourceChange, ...]:
        return tuple(c for c in self.changes if c.action == action)

    def refusals(self) -> tuple[str, ...]:
        """`--check`'s lines: each change the real preview refuses or `pulumi up` fails on, with what to do
        instead. The preview itself only catches the first kind; nothing in the engine catches the second before
        the update has started (DeleteStep.Apply skips a retained resource's delete, then the create of the same
        name fails)."""
        lines = []
        for change in self.changes:
            what = f"{self.stack}: {change.action} of {change.type} {change.name}"
            if any(n.startswith(UP_ERROR) for n in change.notes):
                lines.append(f"{what}: `pulumi up` would fail (AlreadyExists): it is retained and replaced under its "
                             "own name. Instead take what uses it out of the stack in one up, delete the object by "
                             "hand and bring it back in the next, or move to a new stack beside this one "
                             "(docs/operations.md, \"Replacing a retained object\")")
            elif any(n.startswith(PROTECTED_ERROR) for n in change.notes):
                lines.append(f"{what}: `pulumi preview` would fail: it is protected. If the {change.action} is "
                             "meant, unprotect it first (a model's workload: `models[].allowWorkloadReplacement`; "
                             "anything else: `pulumi state unprotect <urn>`), then run this change")
        return tuple(lines)

    def counts(self) -> str:
        options = len(self.of(OPTIONS_ONLY))
        return ", ".join(f"{len(self.of(a))} to {a}" for a in ACTIONS) + (
            f", {options} with options only" if options else "")


# --- comparing values ----------------------------------------------------------------------------

_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
# A list item's name is shown bare unless it could be misread as an index or break the brackets.
_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.:/-]*")


def _key_path(path: str, key: str) -> str:
    if _PLAIN_KEY.fullmatch(key):
        return f"{path}.{key}" if path else key
    return f"{path}[{json.dumps(key)}]"  # labels like app.kubernetes.io/name contain dots


def _name_path(path: str, name: str) -> str:
    return f"{path}[{name}]" if _PLAIN_NAME.fullmatch(name) else f"{path}[{json.dumps(name)}]"


def _names(items: list[Any]) -> list[str] | None:
    """The items' names when every item is a dict with a unique string `name`, else None."""
    if not all(isinstance(i, dict) and isinstance(i.get("name"), str) for i in items):
        return None
    names = [i["name"] for i in items]
    # Duplicate names (two volumeMounts of one volume) cannot key the items: compare by index.
    return names if len(set(names)) == len(names) else None


def _same(old: Any, new: Any) -> bool:
    # True == 1 and 1 == 1.0 in Python, but a manifest that turns a bool into an int has changed.
    return type(old) is type(new) and old == new


def _line_diff(old: Any, new: Any) -> tuple[str, ...]:
    if not (isinstance(old, str) and isinstance(new, str) and ("\n" in old or "\n" in new)):
        return ()
    diff = difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=0)
    return tuple(line for line in diff if not line.startswith(("---", "+++")))


def diff_values(old: Any, new: Any, path: str = "") -> list[FieldChange]:
    """Every leaf that differs, as dotted paths; a subtree on one side only is one change."""
    if isinstance(old, dict) and isinstance(new, dict):
        changes: list[FieldChange] = []
        for key in sorted(old.keys() | new.keys()):
            changes += diff_values(old.get(key, ABSENT), new.get(key, ABSENT), _key_path(path, key))
        return changes
    if isinstance(old, list) and isinstance(new, list):
        old_names, new_names = _names(old), _names(new)
        if old_names is not None and new_names is not None and (old or new):
            return _diff_named(old, new, old_names, new_names, path)
        if len(old) != len(new) and all(_scalar(v) for v in [*old, *new]):
            return _diff_scalars(old, new, path)
        changes = []
        for index in range(max(len(old), len(new))):
            changes += diff_values(
                old[index] if index < len(old) else ABSENT,
                new[index] if index < len(new) else ABSENT,
                f"{path}[{index}]",
            )
        return changes
    if _same(old, new):
        return []
    return [FieldChange(path, old, new, _line_diff(old, new))]


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def _diff_scalars(old: list[Any], new: list[Any], path: str) -> list[FieldChange]:
    """Lists of plain values that grew or shrank (dependsOn, args), aligned so one added item is one change:
    removed items at their old index, added ones at their new index, a replaced run changed in place."""
    changes: list[FieldChange] = []
    matcher = difflib.SequenceMatcher(a=[repr(v) for v in old], b=[repr(v) for v in new], autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        paired = min(i2 - i1, j2 - j1)  # a replaced run: its first items changed in place, the rest added or removed
        changes += [FieldChange(f"{path}[{j1 + k}]", old[i1 + k], new[j1 + k]) for k in range(paired)
                    if not _same(old[i1 + k], new[j1 + k])]
        changes += [FieldChange(f"{path}[{i}]", old[i], ABSENT) for i in range(i1 + paired, i2)]
        changes += [FieldChange(f"{path}[{j}]", ABSENT, new[j]) for j in range(j1 + paired, j2)]
    return changes


def _diff_named(
    old: list[dict[str, Any]], new: list[dict[str, Any]], old_names: list[str], new_names: list[str], path: str
) -> list[FieldChange]:
    """Lists of named objects (containers, env, ports) by name, so an insertion shifts nothing."""
    changes: list[FieldChange] = []
    old_by_name = dict(zip(old_names, old, strict=True))
    new_by_name = dict(zip(new_names, new, strict=True))
    common_old = [n for n in old_names if n in new_by_name]
    common_new = [n for n in new_names if n in old_by_name]
    if common_old != common_new:
        # Order can matter (env vars referring to earlier ones), so a pure reorder is reported.
        changes.append(FieldChange(path, common_old, common_new, note="order"))
    for name in old_names + [n for n in new_names if n not in old_by_name]:
        changes += diff_values(old_by_name.get(name, ABSENT), new_by_name.get(name, ABSENT), _name_path(path, name))
    return changes


def _key(resource: dict[str, Any], by_urn: bool) -> tuple[str, ...]:
    if by_urn:
        return (resource["urn"],)
    # Renders from before URNs were recorded: Pulumi allows one (type, name) under two parents, so
    # the parent joins the key only then (see _ambiguous).
    return (resource["type"], resource["name"])


def _keyed(
    resources: list[dict[str, Any]], by_urn: bool, ambiguous: set[tuple[str, str]]
) -> dict[tuple[str, ...], Any]:
    keyed: dict[tuple[str, ...], dict[str, Any]] = {}
    for r in resources:
        key = _key(r, by_urn)
        if not by_urn and key in ambiguous:
            key = (*key, r.get("parent") or "")
        keyed[key] = r
    return keyed


def _aliased(old: dict[tuple[str, ...], Any], new: dict[tuple[str, ...], Any]) -> dict[tuple[str, ...],
                                                                                   tuple[str, ...]]:
    """New key -> the removed old key one of its aliases (or its parent's) names."""
    answers = aliases.answers_to(list(new.values()))
    found: dict[tuple[str, ...], tuple[str, ...]] = {}
    for key in sorted(new.keys() - old.keys()):
        for urn in sorted(answers.get(key[0], ())):
            if (urn,) in old and (urn,) not in new and (urn,) not in found.values():
                found[key] = (urn,)
                break
    return found


def _ambiguous(resources: list[dict[str, Any]]) -> set[tuple[str, str]]:
    seen: set[tuple[str, str]] = set()
    twice: set[tuple[str, str]] = set()
    for r in resources:
        key = (r["type"], r["name"])
        (twice if key in seen else seen).add(key)
    return twice


def _options(resource: dict[str, Any]) -> dict[str, Any]:
    return resource.get("options") or {}


PROTECTED_ERROR = "preview error"  # the note prefix of a change the engine refuses at preview
# A chart's objects are rendered by the provider (helm template, or Helm itself for a v3 Release) during a real
# preview; the mock render records the chart's inputs, never its objects (remote components and releases have no
# children here). So a chart or values change shows as its inputs only: its CRD and object changes do not appear.
CHART_TYPES = ("kubernetes:helm.sh/v3:Release", "kubernetes:helm.sh/v4:Chart")
CHART_CONTENTS_NOTE = ("contents not shown: the objects this chart renders (CRDs included) are computed by the "
                       "provider in a real preview; `pulumi preview --diff` lists their changes")
UP_ERROR = "up fails"  # the note prefix of a change the preview lets through and `pulumi up` cannot apply


def _removal_notes(resource: dict[str, Any], action: str, after: dict[str, Any] | None = None) -> list[str]:
    """What the engine does with a resource it must delete or replace: `after` is the new side of a replace."""
    options = _options(resource)
    notes = []
    # pulumi/pulumi pkg/resource/deploy: the step generator refuses a replace when the resource is
    # protected in the state and still in the program (`new.Protect && old.Protect`: unprotecting and
    # replacing in one update is allowed), and DeleteStep.Apply refuses a delete of a protected
    # resource even in preview. Either way the real `pulumi preview` reports an error.
    if options.get("protect") and (after is None or _options(after).get("protect")):
        notes.append(f"{PROTECTED_ERROR}: protected, so `pulumi preview` and `pulumi up` fail instead of this "
                     f"{action} until protect is removed (protect=False in the program, or `pulumi state "
                     "unprotect`)")
    if options.get("retainOnDelete") and action == "delete":
        notes.append("retainOnDelete: the engine forgets it but leaves it in the cloud or cluster, unmanaged")
    return notes


def _crd_warning(resource: dict[str, Any], moved: bool) -> str:
    """A CRD carrier leaving its URN: say whether the cluster's custom resources of its kinds survive."""
    why = "its URN changes" if moved else "it leaves the program"
    if _options(resource).get("retainOnDelete"):
        return (f"WARNING: applies CRDs and {why}; retainOnDelete keeps the CRDs (and every object of their "
                "kinds) in the cluster, unmanaged until a resource applies them again")
    return (f"WARNING: applies CRDs and {why}, without retainOnDelete: the delete removes the CRDs and every "
            "object of their kinds in the cluster, other teams' included; add an `aliases` option or "
            "retainOnDelete first")
def _name_and_namespace(resource: dict[str, Any]) -> tuple[Any, Any]:
    metadata = (resource.get("inputs") or {}).get("metadata") or {}
    return metadata.get("name"), metadata.get("namespace")


def _deletes_first(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """Whether a replacement deletes the old object before creating the new one.

    The `deleteBeforeReplace` option says so for any type. pulumi-kubernetes also answers
    DeleteBeforeReplace itself (provider/pkg/provider/provider.go, Diff) when the object is named by the
    program (not autonamed) and keeps its name and namespace: the new object cannot exist beside the
    old one. Helm releases never do (helm_release.go, Diff)."""
    if _options(new).get("deleteBeforeReplace"):
        return True
    kubernetes_object = new["type"].startswith("kubernetes:") and not new["type"].startswith("kubernetes:helm.sh/")
    name, namespace = _name_and_namespace(new)
    return kubernetes_object and name is not None and (name, namespace) == _name_and_namespace(old)


def _replace_order(old: dict[str, Any], new: dict[str, Any]) -> str:
    # pulumi/pulumi pkg/resource/deploy/step.go, DeleteStep.Apply: a resource with RetainOnDelete is dropped from
    # the state and never deleted from the provider, so a delete-first replacement leaves the old object in place.
    retained = bool(_options(old).get("retainOnDelete"))
    if _deletes_first(old, new):
        if retained:
            return (f"{UP_ERROR}: retainOnDelete makes the engine's delete a no-op, so the old object stays and the "
                    "replacement's create of the same name fails (AlreadyExists); the preview does not see it "
                    "(docs/operations.md, \"Replacing a retained object\", says what works)")
        return ("deleted before its replacement is created (same name and namespace, or deleteBeforeReplace): it is "
                "absent until the new one is ready")
    if retained:
        return ("the replacement is created first; the old one is then only forgotten (retainOnDelete): it stays in "
                "the cloud or cluster, unmanaged")
    return "the replacement is created first; the old one is deleted at the end of the update"


def _update(old: dict[str, Any], new: dict[str, Any], by_urn: bool) -> ResourceChange | None:
    before = {"inputs": old.get("inputs", {}), "options": _options(old)}
    after = {"inputs": new.get("inputs", {}), "options": _options(new)}
    if not by_urn:
        before["parent"], after["parent"] = old.get("parent"), new.get("parent")
    # ignoreChanges first, as the engine does: those inputs take their old values before the diff.
    ignored = _options(new).get("ignoreChanges") or []
    fields = [f for f in diff_values(before, after) if not (
        f.path.startswith("inputs") and replacements.is_ignored(replacements.plain_path(f.path), ignored))]
    if not fields:
        return None
    if all(f.path.split(".")[0] == "options" and f.path.split(".")[1].split("[")[0] in NO_STEP_OPTIONS
           for f in fields):
        return ResourceChange(new["type"], new["name"], tuple(fields), OPTIONS_ONLY, notes=(
            "options only: `pulumi up` records them in state and runs no step for this resource",))
    inputs = [replacements.plain_path(f.path) for f in fields if f.path.startswith("inputs")]
    forced = replacements.replacing_paths(new["type"], inputs, _options(new).get("replaceOnChanges") or [],
                                          old.get("inputs", {}), new.get("inputs", {}))
    notes: list[str] = []
    if forced:
        notes += [_replace_order(old, new), *_removal_notes(old, "replacement", new)]
        if new["type"] == replacements.HELM_RELEASE:
            notes.append("a new release beside the old one until the end of the update: cluster-scoped objects of "
                         "the chart (CRDs, ClusterRoles, webhooks) exist twice under the same names and the "
                         "install fails unless the chart names them per release")
    elif new["type"] == replacements.NODE_GROUP and replacements.rolls_nodes(inputs):
        notes.append("EKS replaces every node in place, draining each under the PodDisruptionBudgets "
                     "(PodEvictionFailure after 15 minutes a node)")
    if new["type"] == replacements.NODE_GROUP:
        notes += _min_size_notes(old, new)
    if new["type"] in CHART_TYPES and any(p.startswith("inputs") for p in (f.path for f in fields)):
        notes.append(CHART_CONTENTS_NOTE)
    return ResourceChange(new["type"], new["name"], tuple(fields), "replace" if forced else "update",
                          tuple(forced), tuple(notes))


def _min_size_notes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """A raised minimum on an autoscaled group: the engine keeps desiredSize from state (ignoreChanges),
    so UpdateNodegroupConfig may get min above desired, which EKS refuses."""
    before = (old.get("inputs", {}).get("scalingConfig") or {}).get("minSize")
    after = (new.get("inputs", {}).get("scalingConfig") or {}).get("minSize")
    ignored = "scalingConfig.desiredSize" in (_options(new).get("ignoreChanges") or [])
    if not ignored or not isinstance(before, int) or not isinstance(after, int) or after <= before:
        return []
    return [f"minSize {before} -> {after} while desiredSize is left to the autoscaler: `pulumi up` sends the "
            f"desired size from state, and EKS refuses the update if that is below {after}. First raise the live "
            f"group: `aws eks update-nodegroup-config --scaling-config minSize={after},desiredSize={after}` (plus "
            "the current maxSize), then `pulumi up --refresh` (docs/operations.md, \"Raising minNodes\")"]
# Maps of a replaced resource that flow into other resources' inputs as outputs (a node group's labels
# become the vLLM pods' nodeSelector); tags are only echoed back, never read downstream here.
_ECHOED_MAPS_SKIPPED = ("tags", "tagsAll")


def _outputs_of(resource: dict[str, Any]) -> tuple[set[str], set[tuple[str, str]]]:
    """(computed strings, (key, value) entries of its input maps) that dependents may have received.

    The computed strings are what the render's mock answered for it (its id and provider-computed
    outputs such as a node group's Auto Scaling group name): stacks.offline.render.RenderMocks."""
    asked = SimpleNamespace(typ=resource["type"], name=resource["name"], inputs=resource.get("inputs") or {})
    # The version only answers getCluster. (`asked` stands in for MockResourceArgs: new_resource reads its typ,
    # name and inputs only.)
    resource_id, state = render.RenderMocks("").new_resource(asked)  # type: ignore[arg-type]
    computed = {resource_id}
    inputs = resource.get("inputs") or {}

    def strings(value: Any) -> None:
        if isinstance(value, str):
            computed.add(value)
        elif isinstance(value, dict):
            for item in value.values():
                strings(item)
        elif isinstance(value, list):
            for item in value:
                strings(item)

    for key, value in state.items():
        if key not in inputs:
            strings(value)
    # Only string maps (labels), never an object's metadata or spec, whose entries every object shares.
    entries = {(k, v) for key, value in inputs.items()
               if isinstance(value, dict) and value and key not in _ECHOED_MAPS_SKIPPED
               and all(isinstance(v, str) for v in value.values())
               for k, v in value.items()}
    return computed, entries


def _unknown_paths(value: Any, computed: set[str], entries: set[tuple[str, str]], path: str = "inputs") -> list[str]:
    """Input paths of a dependent whose value came from the replaced resource's outputs."""
    if isinstance(value, dict):
        if any(isinstance(v, str) and (k, v) in entries for k, v in value.items()):
            return [path]  # a map built from the replaced resource's map output is unknown as a whole
        return [p for key, item in sorted(value.items()) for p in _unknown_paths(item, computed, entries,
                                                                                 _key_path(path, key))]
    if isinstance(value, list):
        names = _names(value)
        return [p for index, item in enumerate(value)
                for p in _unknown_paths(item, computed, entries,
                                        _name_path(path, names[index]) if names else f"{path}[{index}]")]
    return [path] if isinstance(value, str) and value in computed else []


def _at(value: Any, path: str) -> Any:
    """The value at a diff path (as diff_values writes them) inside `{"inputs": ...}`, or ABSENT."""
    current: Any = value
    for part in re.findall(r'\.?([A-Za-z_][A-Za-z0-9_-]*)|\[("(?:[^"\\]|\\.)*"|[^\]]*)\]', path):
        key = part[0] or part[1]
        if key.startswith('"'):
            key = json.loads(key)
        if isinstance(current, dict):
            current = current.get(key, ABSENT)
        elif isinstance(current, list):
            if key.isdigit():
                current = current[int(key)] if int(key) < len(current) else ABSENT
            else:
                current = next((i for i in current if isinstance(i, dict) and i.get("name") == key), ABSENT)
        else:
            return ABSENT
    return current


def _dependents_of_replacements(changes: list[ResourceChange], base: dict[tuple[str, ...], Any],
                                head: list[dict[str, Any]]) -> list[ResourceChange]:
    """Resources whose inputs are outputs of a replaced resource: at preview those outputs are unknown,
    so the engine shows the inputs as unknown and replaces the dependent when one of them forces it
    (each Auto Scaling group tag when the node group is replaced: its group's name is new)."""
    by_key = {f"{r['type']}::{r['name']}": r for r in head}
    old_by_key = {f"{r['type']}::{r['name']}": r for r in base.values()}
    # Deletes and creates stay as they are (a URN change gives one of each under the same type and name).
    others = [c for c in changes if c.action in ("delete", "create")]
    result = {f"{c.type}::{c.name}": c for c in changes if c.action not in ("delete", "create")}
    created = {f"{c.type}::{c.name}" for c in others if c.action == "create"}
    queue = [key for key, c in result.items() if c.action == "replace"]
    done: set[str] = set()
    while queue:
        key = queue.pop(0)
        if key in done or key not in by_key:
            continue
        done.add(key)
        computed, entries = _outputs_of(by_key[key])
        for dependent in head:
            dkey = f"{dependent['type']}::{dependent['name']}"
            if key not in _options(dependent).get("dependsOn", []) or dkey not in old_by_key or dkey in created:
                continue
            unknown = _unknown_paths(dependent.get("inputs") or {}, computed, entries)
            if not unknown:
                continue
            previous = result.get(dkey) or ResourceChange(dependent["type"], dependent["name"])
            kept = [f for f in previous.fields if not any(f.path == u or f.path.startswith((u + ".", u + "["))
                                                          for u in unknown)]
            old_inputs = {"inputs": old_by_key[dkey].get("inputs") or {}}
            fields = [*kept, *(FieldChange(u, _at(old_inputs, u), UNKNOWN) for u in unknown)]
            plain = [replacements.plain_path(u) for u in unknown]
            forced = replacements.replacing_paths(dependent["type"], plain,
                                                  _options(dependent).get("replaceOnChanges") or [])
            name = key.split("::", 1)[1]
            notes = [*previous.notes, f"{', '.join(plain)} unknown at preview: output of {name}, which is replaced"]
            action = previous.action
            if forced and action != "replace":
                action = "replace"
                notes += [_replace_order(old_by_key[dkey], dependent),
                          *_removal_notes(old_by_key[dkey], "replacement", dependent)]
                queue.append(dkey)
            result[dkey] = dataclasses.replace(previous, fields=tuple(sorted(fields, key=lambda f: f.path)),
                                               action=action, forced_by=tuple(sorted({*previous.forced_by, *forced})),
                                               notes=tuple(notes))
    return [*others, *result.values()]


def _launch_template_notes(changes: list[ResourceChange], head: list[dict[str, Any]]) -> list[ResourceChange]:
    """A template updated in place is a new version: say which node groups roll because of it."""
    replaced = {(c.type, c.name) for c in changes if c.action == "replace"}
    result = []
    for change in changes:
        if change.type == replacements.LAUNCH_TEMPLATE and change.action == "update" and any(
            f.path.startswith("inputs") for f in change.fields
        ):
            # The offline render's placeholder id of a resource is "<name>-id" (render.RenderMocks).
            users = [r for r in head if r["type"] == replacements.NODE_GROUP
                     and (r["inputs"].get("launchTemplate") or {}).get("id") == f"{change.name}-id"]
            notes = list(change.notes)
            for group in users:
                if (group["type"], group["name"]) in replaced:
                    notes.append(f"node group {group['name']} is replaced with it (a new generation)")
                else:
                    notes.append(f"a new template version: node group {group['name']} replaces every node in "
                                 "place, draining each under the PodDisruptionBudgets")
            change = dataclasses.replace(change, notes=tuple(notes))
        result.append(change)
    return result


def _old_revision_notes(changes: list[ResourceChange], base: dict[tuple[str, ...], Any]) -> list[ResourceChange]:
    """A staging Job that goes away means its revision is no longer the one being staged: its files
    stay on the weights volume, so say where and how much, and when they can be removed."""
    by_name = {(r["type"], r["name"]): r for r in base.values()}
    result = []
    for change in changes:
        resource = by_name.get((change.type, change.name))
        labels = ((resource or {}).get("inputs", {}).get("metadata") or {}).get("labels") or {}
        if resource is not None and change.action == "delete" and change.type == "kubernetes:batch/v1:Job" and \
                labels.get("app.kubernetes.io/component") == "stage-weights":
            containers = resource["inputs"]["spec"]["template"]["spec"]["containers"]
            env = {e["name"]: e.get("value") for e in containers[0].get("env", [])}
            model = lookup_model(env.get("MODEL_ID", ""))
            size = f" ({model.weight_bytes / 1e9:.0f} GB)" if model else ""
            note = (f"revision {env.get('REVISION')} stays in {env.get('TARGET')}{size} on the weights volume: delete "
                    "that directory once the new revision serves and no rollback to it is planned")
            change = dataclasses.replace(change, notes=(*change.notes, note))
        result.append(change)
    return result


def diff_resources(
    base: list[dict[str, Any]], head: list[dict[str, Any]], stack: str, base_label: str, commit: str = "",
    note: str = "",
) -> StackDiff:
    """Compare two renders' `resources` by URN and classify each change as the engine would."""
    by_urn = all("urn" in r for r in base + head)
    ambiguous = set() if by_urn else _ambiguous(base) | _ambiguous(head)
    old, new = _keyed(base, by_urn, ambiguous), _keyed(head, by_urn, ambiguous)
    # A new URN whose aliases name an old one is that resource, moved: the engine carries its state over.
    aliased = _aliased(old, new) if by_urn else {}
    for new_key, old_key in aliased.items():
        old[new_key] = old.pop(old_key)
    moved = {(r["type"], r["name"]) for k, r in old.items() if k not in new} & {
        (r["type"], r["name"]) for k, r in new.items() if k not in old}
    changes: list[ResourceChange] = []
    for key in sorted(old.keys() - new.keys()):
        r = old[key]
        notes = _removal_notes(r, "delete")
        if (r["type"], r["name"]) in moved:
            notes.insert(0, "its URN changed (a renamed or re-nested parent): deleted here and created under the new "
                            "URN; an `aliases` option would keep it")
        if replacements.applies_crds(r):
            notes.insert(0, _crd_warning(r, moved=(r["type"], r["name"]) in moved))
        changes.append(ResourceChange(r["type"], r["name"], action="delete", notes=tuple(notes)))
    for key in sorted(new.keys() - old.keys()):
        r = new[key]
        changes.append(ResourceChange(r["type"], r["name"], action="create"))
    for key in sorted(old.keys() & new.keys()):
        change = _update(old[key], new[key], by_urn)
        if key in aliased:
            kept = f"kept under a new URN: its aliases name {aliased[key][0]}, so the engine moves its state"
            change = dataclasses.replace(change, notes=(kept, *change.notes)) if change is not None else \
                ResourceChange(new[key]["type"], new[key]["name"], action="update", notes=(kept,))
        if change is not None:
            changes.append(change)
    changes = _dependents_of_replacements(changes, old, head)
    changes = _launch_template_notes(changes, head)
    changes = _old_revision_notes(changes, old)
    changes.sort(key=lambda c: (ORDER.index(c.action), c.type, c.name))
    return StackDiff(stack, base_label, commit, tuple(changes), note)


# --- showing values ------------------------------------------------------------------------------


def show_value(value: Any) -> str:
    if value is ABSENT:
        return "(absent)"
    if value is UNKNOWN:
        return "(known after the replacement)"
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def _first_difference(a: str, b: str) -> int:
    for index, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return index
    return min(len(a), len(b))


def _clip(text: str, at: int, width: int) -> str:
    if len(text) <= width:
        return text
    start = max(0, min(at - width // 3, len(text) - width))
    clipped = text[start : start + width]
    return ("…" if start else "") + clipped + ("…" if start + width < len(text) else "")


def shown_pair(change: FieldChange, width: int = VALUE_CHARS) -> tuple[str, str]:
    """Both values as JSON, long ones clipped around where they first differ so the change stays visible."""
    old, new = show_value(change.old), show_value(change.new)
    at = _first_difference(old, new) if change.old is not ABSENT and change.new is not ABSENT else 0
    return _clip(old, at, width), _clip(new, at, width)


def _shown_lines(change: FieldChange) -> list[str]:
    lines = [_clip(line, 0, VALUE_CHARS) for line in change.lines[:LINE_DIFF_LINES]]
    if len(change.lines) > LINE_DIFF_LINES:
        lines.append(f"… {len(change.lines) - LINE_DIFF_LINES} more lines")
    return lines


def _headline(change: ResourceChange) -> str:
    forced = f" (forced by {', '.join(change.forced_by)})" if change.forced_by else ""
    return f"{SYMBOLS[change.action]} {change.type} {change.name}{forced}"


def format_text(diff: StackDiff) -> str:
    if diff.empty:
        lines = [f"{diff.stack}: no changes against {diff.against}"]
    else:
        lines = [f"{diff.stack}: {diff.counts()} against {diff.against}"]
    if diff.note:
        lines.append(f"  ({diff.note})")
    if diff.preview_errors:
        lines.append(f"  pulumi preview fails: {len(diff.preview_errors)} protected resource(s) would be deleted or "
                     f"replaced: {', '.join(diff.preview_errors)}")
    if diff.up_errors:
        lines.append(f"  pulumi up fails: {len(diff.up_errors)} retained resource(s) replaced delete-first: "
                     f"{', '.join(diff.up_errors)}")
    for change in diff.changes:
        lines.append(_headline(change))
        lines += [f"    ! {note}" for note in change.notes]
        lines += [f"    = {line}" for line in change.consequences]
        for field in change.fields:
            if field.lines:
                lines.append(f"    {field.path}: {sum(1 for x in field.lines if x[:1] in '+-')} lines changed")
                lines += [f"      {line}" for line in _shown_lines(field)]
            else:
                old, new = shown_pair(field)
                label = f"{field.path} ({field.note})" if field.note else field.path
                lines.append(f"    {label}: {old} -> {new}")
    return "\n".join(lines) + "\n"


def _code(text: str) -> str:
    """A markdown code span that survives backticks in the value."""
    ticks = max((len(run) for run in re.findall(r"`+", text)), default=0) + 1
    fence = "`" * ticks
    return f"{fence} {text} {fence}" if ticks > 1 or text.startswith(" ") else f"{fence}{text}{fence}"


def _escape(text: str) -> str:
    """Plain text (a branch name like fix_a_b) that markdown must not read as emphasis or HTML."""
    return re.sub(r"([\\`*_\[\]<>#|~])", r"\\\1", text)


def _cell(text: str) -> str:
    # GitHub tables split on "|" even inside code spans unless it is escaped.
    return _code(text).replace("|", "\\|")


def _fenced(lines: list[str], info: str) -> list[str]:
    longest = max((len(run) for line in lines for run in re.findall(r"`+", line)), default=0)
    fence = "`" * max(3, longest + 1)
    return [f"{fence}{info}", *lines, fence]


def _folded(summary: str, body: list[str], rows: int) -> list[str]:
    if rows <= LONG_SECTION_ROWS:
        return body
    return [f"<details><summary>{summary}</summary>", "", *body, "", "</details>"]


def _changed_block(resource: ResourceChange) -> list[str]:
    forced = f" — forced by {', '.join(_code(p) for p in resource.forced_by)}" if resource.forced_by else ""
    block = [f"**{_code(SYMBOLS[resource.action])} {_code(resource.type)} {_code(resource.name)}**{forced}", ""]
    block += [f"- {_escape(note)}" for note in resource.notes]
    block += [f"- **cost:** {_escape(line)}" for line in resource.consequences]
    if resource.notes or resource.consequences:
        block.append("")
    block += ["| path | base | working tree |", "|---|---|---|"]
    multi_line = []
    for change in resource.fields:
        if change.lines:
            count = sum(1 for x in change.lines if x[:1] in "+-")
            block.append(f"| {_cell(change.path)} | {count} lines changed, see below | |")
            multi_line.append(change)
            continue
        old, new = shown_pair(change)
        path = f"{change.path} ({change.note})" if change.note else change.path
        block.append(f"| {_cell(path)} | {_cell(old)} | {_cell(new)} |")
    for change in multi_line:
        block += ["", f"<details><summary>{_code(change.path)}</summary>", ""]
        block += _fenced(_shown_lines(change), "diff")
        block += ["", "</details>"]
    return [*block, ""]


def _listed(items: tuple[ResourceChange, ...]) -> list[str]:
    rows = ["| type | name | note |", "|---|---|---|"]
    rows += [f"| {_cell(c.type)} | {_cell(c.name)} | {_escape('; '.join(c.notes))} |" for c in items]
    return rows


def format_markdown(diff: StackDiff, budget: int = MARKDOWN_BUDGET) -> str:
    """A pull-request comment: counts, then Replaced, Deleted, Created and Updated sections."""
    # The marker lets a workflow find and update its own comment for this stack.
    lines = [f"<!-- llm-serving diff: {diff.stack} -->"]
    against = _escape(diff.base) + (f" ({_code(diff.commit)})" if diff.commit else "")
    if diff.empty:
        lines += [f"### Stack {_code(diff.stack)}: no changes", "", f"Rendered offline against {against}."]
        return "\n".join(lines) + "\n"
    lines += [f"### Stack {_code(diff.stack)}: {diff.counts()}", ""]
    lines.append(f"Rendered offline against {against}; secrets are masked. Symbols as in `pulumi preview "
                 "--diff`: `+-` replace, `-` delete, `+` create, `~` update; `=` options only (no step).")
    if diff.note:
        lines += ["", f"_{diff.note}_"]
    if diff.preview_errors:
        lines += ["", "> [!CAUTION]", "> The real `pulumi preview` fails: protected resources would be deleted or "
                  f"replaced: {', '.join(_code(e) for e in diff.preview_errors)}."]
    if diff.up_errors:
        lines += ["", "> [!CAUTION]", "> `pulumi up` fails where the preview passes: retained resources replaced "
                  f"delete-first keep their names: {', '.join(_code(e) for e in diff.up_errors)}."]
    used = sum(len(line) + 1 for line in lines)
    for action in ORDER:
        items = diff.of(action)
        if not items:
            continue
        lines += ["", f"#### {TITLES[action]} ({len(items)})", ""]
        if action in ("delete", "create"):
            lines += _folded(f"{len(items)} resources", _listed(items), len(items))
            used = sum(len(line) + 1 for line in lines)
            continue
        body: list[str] = []
        rows = 0
        for index, resource in enumerate(items):
            block = _changed_block(resource)
            size = sum(len(line) + 1 for line in block)
            if used + size > budget:
                # Cut at a whole resource so no table or <details> is left open.
                body.append(f"_… {len(items) - index} more resources not shown; run `python -m stacks diff "
                            f"{diff.stack}` for the full diff._")
                break
            body += block
            used += size
            rows += len(resource.fields) + 1
        fields = sum(len(r.fields) for r in items)
        lines += _folded(f"{len(items)} resources, {fields} fields", body, rows)
    return "\n".join(lines).rstrip("\n") + "\n"


# --- rendering both sides ------------------------------------------------------------------------


def _git(project_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=project_dir, capture_output=True, text=True, check=False)


def _commit(project_dir: Path, ref: str) -> str:
    # --end-of-options: a ref such as "-1" or "--output=x" is a name to look up, never an option of git's.
    found = _git(project_dir, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}")
    if found.returncode != 0:
        raise DiffError([f"python -m stacks diff: argument --base: {ref!r} is not a commit in this repository"])
    return found.stdout.strip()


def default_base(project_dir: Path) -> tuple[str, str]:
    """The merge base with main, as a pull request compares; HEAD when there is none. Returns (ref, label)."""
    # CI checkouts often have origin/main but no local main.
    for branch in (DEFAULT_BRANCH, f"origin/{DEFAULT_BRANCH}"):
        found = _git(project_dir, "merge-base", "HEAD", branch)
        if found.returncode == 0 and found.stdout.strip():
            return found.stdout.strip(), f"the merge base with {branch}"
    return "HEAD", "HEAD"


def _in_commit(project_dir: Path, commit: str, relative: str) -> bool:
    """Whether `relative` (a path in the project directory) exists at `commit`, without exporting it."""
    prefix = _git(project_dir, "rev-parse", "--show-prefix").stdout.strip()
    return _git(project_dir, "cat-file", "-e", f"{commit}:{prefix}{relative}").returncode == 0


class BaseTrees:
    """The project directory exported at each base commit, once per `diff` run: `make diff` compares
    every stack against the same base, and each export of the project costs about a tenth of a
    second. The trees live in one temporary directory, removed by `close()`."""

    def __init__(self) -> None:
        self._scratch: tempfile.TemporaryDirectory[str] | None = None  # made with the first tree
        self._trees: dict[str, Path] = {}

    def tree(self, project_dir: Path, commit: str) -> Path:
        if commit not in self._trees:
            if self._scratch is None:
                self._scratch = tempfile.TemporaryDirectory(prefix="stacks-diff-base-")
            tree = Path(self._scratch.name) / str(len(self._trees))
            tree.mkdir()
            _export(project_dir, commit, tree)
            self._trees[commit] = tree
        return self._trees[commit]

    def close(self) -> None:
        if self._scratch is not None:
            self._scratch.cleanup()


def _export(project_dir: Path, commit: str, into: Path) -> None:
    """The project directory as committed, checked out under `into` by git itself: the commit's tree is
    read into an index of its own (GIT_INDEX_FILE, in a temporary directory) and checked out with `into`
    as the work tree, so neither the repository's index nor its working tree changes, and attributes come
    from the commit (and the repository's info/attributes), never from the working tree's .gitattributes.
    git writes the files (about 0.11 s of CPU for this project); the `git archive` this replaced, unpacked
    by Python's tarfile, took about 0.32 s. Unlike the archive it keeps files marked `export-ignore` and
    does not expand `export-subst`, which this project uses neither of."""
    prefix = _git(project_dir, "rev-parse", "--show-prefix").stdout.strip()
    git_dir = _git(project_dir, "rev-parse", "--absolute-git-dir").stdout.strip()
    into = into.resolve()
    into.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="stacks-diff-index-") as scratch:
        env = {**os.environ, "GIT_INDEX_FILE": str(Path(scratch) / "index")}
        env.pop("GIT_WORK_TREE", None)
        # `<commit>:<prefix>` names the project's directory from the repository's top.
        for step in (["read-tree", f"{commit}:{prefix}"], ["checkout-index", "--all"]):
            # No fsmonitor hook: it would run in the export and watch it (the user's watchman, say).
            done = subprocess.run(["git", "-c", "core.fsmonitor=false", f"--git-dir={git_dir}", f"--work-tree={into}",
                                   *step], cwd=into, env=env, capture_output=True, text=True, errors="replace",
                                  check=False)
            if done.returncode != 0:
                message = " ".join(done.stderr.split())
                raise DiffError([f"diff: git {step[0]} of {commit[:12]} failed: {message}"])


def _stack_file(target: str, project_dir: Path) -> str:
    """A stack name (`prod`) or a stack file path, as a path relative to the project directory."""
    path = Path(target)
    if path.suffix != ".yaml":
        path = stack_files.stack_file_path(target, project_dir)
    path = path.resolve()
    if not stack_files.STACK_FILE.match(path.name):
        raise DiffError([f"diff: {target!r} is not a stack name or a Pulumi.<stack>.yaml file"])
    try:
        return str(path.relative_to(project_dir.resolve()))
    except ValueError:
        raise DiffError([f"diff: {path} is outside the project {project_dir}, so it has no base in git"]) from None


def diff_stack(target: str, base: str | None = None, project_dir: Path = stack_files.PROJECT_DIR,
               trees: BaseTrees | None = None) -> StackDiff:
    """Render `target` at `base` (default: the merge base with main) and in the working tree, then compare.
    `trees`: base trees exported by earlier diffs of the same run (else this diff exports its own)."""
    stack_file = _stack_file(target, project_dir)
    named = stack_files.STACK_FILE.match(Path(stack_file).name)
    assert named is not None  # _stack_file refuses any other name
    stack = named["stack"]
    if _git(project_dir, "rev-parse", "--git-dir").returncode != 0:
        raise DiffError([f"diff: {project_dir} is not in a git repository"])
    ref, chosen = (base, base) if base else default_base(project_dir)
    commit = _commit(project_dir, ref)
    label = f"{chosen} ({commit[:7]})"  # only for messages; the diff keeps both parts

    # Whether the stack file exists on each side, before anything is exported: a name that is in neither
    # is refused at once, and a stack new since the base needs no base tree.
    in_base = _in_commit(project_dir, commit, stack_file)
    in_head = (project_dir / stack_file).is_file()
    if not in_base and not in_head:
        raise DiffError([f"python -m stacks diff: argument stack: {stack_file} exists neither at {label} "
                         "nor in the working tree"])
    own = trees is None
    trees = BaseTrees() if trees is None else trees
    try:
        tree = trees.tree(project_dir, commit) if in_base else None
        with tempfile.TemporaryDirectory(prefix="stacks-diff-") as scratch:
            head_side = sides.Side(project_dir, "the working tree", in_git=True) if in_head else None
            base_side = sides.Side(tree, f"the base, {label},", in_git=False) if tree is not None else None
            (head, head_errors), (old, base_errors) = sides.render_sides([head_side, base_side], stack_file,
                                                                         Path(scratch))
    finally:
        if own:
            trees.close()
    if base_errors or head_errors:
        raise DiffError(base_errors + head_errors)
    note = ""
    if not in_base:
        note = f"{stack_file} does not exist at the base: every resource is added"
    elif not in_head:
        note = f"{stack_file} was deleted: every resource is removed"
    diff = diff_resources(old, head, stack, chosen, commit[:7], note)
    return with_consequences(diff, project_dir / stack_file, head) if in_head else diff


def with_consequences(diff: StackDiff, stack_file: Path, head: list[dict[str, Any]]) -> StackDiff:
    """Each changed workload's cost from the planner's timing, for the head's config (the one `pulumi up`
    would run); a stack file the diff process cannot load as config adds no lines."""
    try:
        # Each second revision as the model it runs as, as ServingStack deploys it (llm_serving/stack/revisions.py).
        config = revisions.expanded(environment.load_stack_file(stack_file)[1])
    except Exception:  # noqa: BLE001 - the render of the same file already succeeded; the lines are extra
        return diff
    by_key = {(r["type"], r["name"]): r for r in head}
    changes = []
    for change in diff.changes:
        paths = [f.path for f in change.fields]
        lines = consequences.for_change(config, change.type, change.name, change.action, paths,
                                        by_key.get((change.type, change.name)))
        changes.append(dataclasses.replace(change, consequences=tuple(lines)))
    return dataclasses.replace(diff, changes=tuple(changes))


# --- command line --------------------------------------------------------------------------------


def _nonempty_ref(value: str) -> str:
    if not value.strip():
        raise argparse.ArgumentTypeError("expected a git ref such as main or HEAD~1, got ''")
    return value


def _parser() -> CommandLineParser:
    parser = CommandLineParser(
        prog="python -m stacks diff",
        description="Compare a stack's offline render at a git ref with the working tree. "
        "Exit 0: no changes; 1: changes; 2: error; 3: with --check, a change the preview or the up refuses.",
    )
    parser.add_argument("stacks", nargs="*", metavar="stack",
                        help="stack names or paths to Pulumi.<stack>.yaml files (default: every stack file)")
    parser.add_argument(
        "--base", metavar="REF", type=_nonempty_ref,
        help=f"git ref to compare against (default: the merge base of HEAD with {DEFAULT_BRANCH}, else HEAD)",
    )
    parser.add_argument(
        "--format", choices=("text", "markdown"), default="text", help="markdown for a pull-request comment"
    )
    parser.add_argument(
        "--check", action="store_true",
        help="exit 3, with one line per change on stderr, when a change would make `pulumi preview` fail (a "
        "protected resource deleted or replaced) or `pulumi up` fail (a retained object replaced under its name)",
    )
    return parser


def main(argv: list[str], stdout: TextIO | None = None, stderr: TextIO | None = None,
         project_dir: Path = stack_files.PROJECT_DIR) -> int:
    """Run `diff` with the arguments after the subcommand; returns the exit code. `project_dir` is
    the project whose working tree and history are compared (the tests' scratch repositories)."""
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    try:
        args = _parser().use_streams(out, err).parse_args(argv)
    except SystemExit as exit_:  # argparse printed usage and the problem (or --help)
        return exit_.code if isinstance(exit_.code, int) else EXIT_ERROR
    status = EXIT_UNCHANGED
    refused: list[str] = []
    trees = BaseTrees()  # every stack is compared with the same base: one export for all of them
    # Secrets compared by a keyed digest (render.SECRET_DIGEST_KEY_ENV), one random key per process: both sides of
    # every diff this process runs (and the renders it starts in subprocesses) mask with it; the renders it keeps
    # for later diffs stay comparable.
    previous_key = os.environ.get(render.SECRET_DIGEST_KEY_ENV)
    os.environ[render.SECRET_DIGEST_KEY_ENV] = _SECRET_DIGEST_KEY
    try:
        for stack in args.stacks or list(stack_files.stack_names(project_dir)):
            try:
                diff = diff_stack(stack, args.base, project_dir, trees)
            except DiffError as error:
                err.write("\n".join(error.lines) + "\n")
                return EXIT_ERROR
            out.write(format_markdown(diff) if args.format == "markdown" else format_text(diff))
            status = max(status, EXIT_UNCHANGED if diff.empty else EXIT_CHANGED)
            refused += diff.refusals() if args.check else ()
    finally:
        trees.close()
        if previous_key is None:
            os.environ.pop(render.SECRET_DIGEST_KEY_ENV, None)
        else:
            os.environ[render.SECRET_DIGEST_KEY_ENV] = previous_key
    if refused:
        err.write("".join(f"refused: {line}\n" for line in refused))
        return EXIT_REFUSED
    return status


_SECRET_DIGEST_KEY = secrets.token_hex(32)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
