"""Offline render: run the real program under Pulumi's mock runtime and write what it declares.

No cloud, no CLI: data-source look-ups get deterministic placeholder answers, every resource the
program registers is recorded, and the output is byte-identical for the same input.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import runpy
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
import yaml
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime import settings as pulumi_settings
from pulumi.runtime.stack import run_pulumi_func
from pulumi.runtime.sync_await import _sync_await

from llm_serving.stack.rules import cluster as cluster_checks
from llm_serving.stack.rules import platform as platform_checks
from stacks import environment, program
from stacks.config import ClusterMode
from stacks.config import files as stack_files
from stacks.config.problems import ConfigError
from stacks.offline import mocks
from stacks.offline.mocks import RenderMocks

SECRET = "[secret]"
PROGRAM = stack_files.PROJECT_DIR / "__main__.py"

# Pulumi marks secrets on the wire with this signature (pulumi/runtime/rpc.py _special_secret_sig).
_SIG_KEY = "4dabf18193072939515e22adb298388d"
_SECRET_SIG = "1b47061264138c4ac30d75fd1eb44270"


@dataclass(frozen=True)
class Recorded:
    """One resource as the program registered it."""

    type: str
    name: str
    urn: str
    parent_urn: str
    custom: bool
    inputs: dict[str, Any]
    dependencies: tuple[str, ...] = ()
    provider: str = ""
    ignore_changes: tuple[str, ...] = ()
    protect: bool = False
    retain_on_delete: bool = False
    custom_timeouts: tuple[str, str, str] = ("", "", "")  # create, update, delete
    replace_on_changes: tuple[str, ...] = ()
    delete_before_replace: bool = False
    # The aliases the program declared, as the engine receives them (alias specs): the former type, name
    # or parent a resource is found under in an existing stack's state.
    aliases: tuple[dict[str, Any], ...] = ()
    import_id: str = ""  # the `import` option: the id of an existing object the engine adopts instead of creating


class RecordingMonitor(pulumi_mocks.MockMonitor):
    """The mock monitor, also keeping each registration's type, parent and inputs."""

    def __init__(self, mocks: pulumi.runtime.Mocks) -> None:
        super().__init__(mocks)
        self.recorded: list[Recorded] = []

    def RegisterResource(self, request: Any) -> Any:  # noqa: N802 - gRPC method name
        response = super().RegisterResource(request)
        if request.type != "pulumi:pulumi:Stack":
            inputs = _struct_to_python(request.object)
            self.recorded.append(
                Recorded(
                    request.type, request.name, response.urn, request.parent, request.custom, inputs,
                    tuple(request.dependencies), request.provider, tuple(request.ignoreChanges),
                    bool(request.protect), bool(request.retainOnDelete),
                    (request.customTimeouts.create, request.customTimeouts.update, request.customTimeouts.delete),
                    tuple(request.replaceOnChanges),
                    bool(request.deleteBeforeReplace),
                    tuple(a for a in map(_alias, request.aliases) if not _sdk_version_alias(request.type, a)),
                    request.importId,
                )
            )
        return response


def _alias(alias: Any) -> dict[str, Any]:
    """An alias as the engine receives it: a full URN, or the parts of a spec the program set."""
    if alias.urn:
        return {"urn": alias.urn}
    spec = alias.spec
    found: dict[str, Any] = {k: v for k, v in (("type", spec.type), ("name", spec.name), ("parentUrn", spec.parentUrn),
                                               ("stack", spec.stack), ("project", spec.project)) if v}
    if spec.noParent:
        found["noParent"] = True
    return found


def _sdk_version_alias(type_: str, alias: dict[str, Any]) -> bool:
    """pulumi-kubernetes' own aliases of a kind to its other API versions (every Deployment carries
    apps/v1beta1 and the like): the SDK's, the same on every resource of the kind, not the program's."""
    if set(alias) != {"type"} or not type_.startswith("kubernetes:"):
        return False
    return alias["type"].startswith("kubernetes:") and alias["type"].rsplit(":", 1)[-1] == type_.rsplit(":", 1)[-1]


def _struct_to_python(struct: Any) -> dict[str, Any]:
    """Inputs exactly as serialised for the provider, secrets still marked."""
    from google.protobuf import json_format

    return json_format.MessageToDict(struct)


# The diff sets this (hex) for its renders, in this process and the subprocesses it starts: a secret's leaves are
# then masked as an HMAC of their value under it, so a rotated secret shows as changed while neither side's value
# nor a digest usable outside this run (the key is random per process) reaches the output. Unset (every other
# render, the golden files): the bare placeholder.
SECRET_DIGEST_KEY_ENV = "LLM_SERVING_SECRET_DIGEST_KEY"


def _mask_leaves(value: Any) -> Any:
    """Keep a secret's shape (a Secret's `stringData` stays a map), hide every value in it."""
    if isinstance(value, dict):
        return {k: _mask_leaves(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_mask_leaves(v) for v in value]
    key = os.environ.get(SECRET_DIGEST_KEY_ENV)
    if not key:
        return SECRET
    digest = hmac.new(bytes.fromhex(key), json.dumps(value, sort_keys=True).encode(), hashlib.sha256).hexdigest()
    return f"[secret {digest[:12]}]"


def mask_secrets(value: Any) -> Any:
    """Replace every Pulumi-marked secret with a placeholder, at any depth."""
    if isinstance(value, dict):
        if value.get(_SIG_KEY) == _SECRET_SIG:
            return _mask_leaves(_unwrap_resource_refs(value.get("value")))
        return {k: mask_secrets(v) for k, v in value.items()}
    if isinstance(value, list):
        return [mask_secrets(v) for v in value]
    return value


def _unwrap_resource_refs(value: Any) -> Any:
    """Resource references and other special values become plain, stable text."""
    if isinstance(value, dict):
        sig = value.get(_SIG_KEY)
        if sig == "5cf8f73096256a8f31e491e813e4eb8e":  # resource reference
            return {"resourceRef": value.get("urn", "")}
        if sig is not None and "value" in value:
            return _unwrap_resource_refs(value["value"])
        return {k: _unwrap_resource_refs(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_unwrap_resource_refs(v) for v in value]
    return value


def _integral(value: Any) -> Any:
    """Protobuf carries every number as a double; whole numbers go back to integers."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _integral(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_integral(v) for v in value]
    return value


def _clean(value: Any) -> Any:
    return _integral(_unwrap_resource_refs(mask_secrets(value)))


@dataclass(frozen=True)
class RenderResult:
    stack: str
    resources: list[dict[str, Any]]
    manifests: list[dict[str, Any]]
    # "type::name" -> each resource's options (also in resources[].options): dependsOn and provider
    # as "type::name", ignoreChanges, replaceOnChanges, deleteBeforeReplace, protect,
    # retainOnDelete and customTimeouts: what the engine sees but the inputs do not show.
    wiring: dict[str, dict[str, Any]] = field(default_factory=dict)

    def by_type(self) -> dict[str, list[dict[str, Any]]]:
        grouped: dict[str, list[dict[str, Any]]] = {}
        for resource in self.resources:
            grouped.setdefault(resource["type"], []).append(resource)
        return grouped

    def manifest(self, kind: str, name: str) -> dict[str, Any]:
        for doc in self.manifests:
            if doc.get("kind") == kind and doc.get("metadata", {}).get("name") == name:
                return doc
        raise KeyError(f"no {kind} named {name} in the render of {self.stack}")

    def resource(self, type_: str, name: str) -> dict[str, Any]:
        for resource in self.resources:
            if resource["type"] == type_ and resource["name"] == name:
                return resource
        raise KeyError(f"no {type_} named {name} in the render of {self.stack}")


def _is_kubernetes_object(recorded: Recorded) -> bool:
    return (
        recorded.custom
        and recorded.type.startswith("kubernetes:")
        and not recorded.type.startswith("kubernetes:helm.sh/")
        and "apiVersion" in recorded.inputs
        and "kind" in recorded.inputs
    )


def _manifest_key(doc: dict[str, Any]) -> tuple[int, str, str, str]:
    metadata = doc.get("metadata", {})
    first = 0 if doc["kind"] == "Namespace" else 1
    return (first, doc["kind"], metadata.get("namespace", ""), metadata.get("name", ""))


def engine_values(own: stack_files.StackFile) -> tuple[dict[str, str], list[str]]:
    """A stack file's own keys as the Pulumi engine passes config: strings, objects as JSON."""
    config: dict[str, str] = {}
    for key, value in own.values.items():
        full = f"{stack_files.PROJECT}:{key}"
        config[full] = value if isinstance(value, str) else json.dumps(value)
    for key, value in own.other.items():
        config[key] = value if isinstance(value, str) else json.dumps(value)
    return config, [f"{stack_files.PROJECT}:{k}" for k in own.secret_keys]


def _region(own: stack_files.StackFile) -> str:
    """The stack's aws:region, where the render's ARNs, endpoints and zones are (the mocks' default without it)."""
    region = own.other.get("aws:region")
    return region if isinstance(region, str) and region else mocks.REGION


def render_stack(stack_file: Path, cluster_version: str | None = None) -> RenderResult:
    """Validate a stack file (ConfigError on problems), then run `__main__.py` under mocks.

    The placeholder cluster runs `cluster_version`, by default the stack's `cluster.kubernetesVersion`;
    another version is rejected the way a real preview rejects it (platform_checks.cluster_version_problem).
    For a stack that creates its cluster the account has none of that name, unless `cluster_version`
    is given: then the stack's own cluster exists at that version, as on an upgrade.
    """
    stack_file = stack_file.resolve()
    own = stack_files.read_stack_file(stack_file)
    _, validated = environment.load_stack_file(stack_file)  # raises ConfigError before anything is registered
    clusters: dict[str, tuple[str, str | None]] | None = None
    if validated.cluster.mode is ClusterMode.CREATE:
        owner = f"{stack_files.PROJECT}/{own.stack}"
        clusters = {validated.cluster.name: (cluster_version, owner)} if cluster_version else {}
    if clusters and cluster_version:
        # What the program refuses for the stack's own cluster (a skipped or backwards minor), as the
        # one-line problems a real preview logs, before anything runs.
        problems = cluster_checks.existing_cluster_problems(
            validated, cluster_checks.FoundCluster(cluster_version, owner), owner)
        if problems:
            raise ConfigError(problems)
    cluster_version = cluster_version or validated.cluster.kubernetes_version
    problem = platform_checks.cluster_version_problem(validated, cluster_version) if clusters is None else None
    if problem is not None:
        raise ConfigError([problem])
    config, secret_keys = engine_values(own)
    previous_dir = program.stack_dir
    program.stack_dir = stack_file.parent
    try:
        return record(lambda: runpy.run_path(str(PROGRAM), run_name="__main__"), stack=own.stack,
                      mocks=RenderMocks(cluster_version, clusters, _region(own)), config=config,
                      secret_keys=secret_keys)
    finally:
        program.stack_dir = previous_dir


def record(program_function: Callable[[], Any], *, stack: str, mocks: pulumi.runtime.Mocks,
           config: dict[str, str] | None = None, secret_keys: list[str] | None = None,
           project: str = stack_files.PROJECT) -> RenderResult:
    """Run `program_function` under Pulumi's mock runtime (the whole program, or one component a test builds)
    and return every resource it registered, with its inputs and options, as a render."""
    monitor = RecordingMonitor(mocks)
    pulumi_settings.reset_options()
    pulumi.runtime.set_mocks(mocks, project=project, stack=stack, preview=False, monitor=monitor)
    pulumi.runtime.set_all_config(config or {}, secret_keys or [])
    pulumi_settings.SETTINGS.rpc_manager.clear()
    pulumi_settings.SETTINGS.outputs.clear()
    _sync_await(run_pulumi_func(program_function))
    return _result(stack, project, monitor.recorded)


def _result(stack: str, project: str, recorded: list[Recorded]) -> RenderResult:
    names = {r.urn: r for r in recorded}

    def label(urn: str) -> str:
        found = names.get(urn)
        return f"{found.type}::{found.name}" if found else urn

    def qualified_type(r: Recorded) -> str:
        # The engine's URN carries every ancestor's type, joined by "$" (a component's children
        # change URN when it is renamed or re-nested); the mock monitor's URN only the parent's.
        parent = names.get(r.parent_urn)
        return f"{qualified_type(parent)}${r.type}" if parent else r.type

    def options(r: Recorded) -> dict[str, Any]:
        return {
            "dependsOn": sorted(label(u) for u in r.dependencies),
            # A provider reference is "<urn>::<id>".
            "provider": label(r.provider.rsplit("::", 1)[0]) if r.provider else "",
            "ignoreChanges": list(r.ignore_changes),
            "replaceOnChanges": list(r.replace_on_changes),
            "deleteBeforeReplace": r.delete_before_replace,
            "protect": r.protect,
            "retainOnDelete": r.retain_on_delete,
            "customTimeouts": {"create": r.custom_timeouts[0], "update": r.custom_timeouts[1],
                               "delete": r.custom_timeouts[2]},
            **({"aliases": [{**a, **({"parentUrn": label(a["parentUrn"])} if "parentUrn" in a else {})}
                            for a in r.aliases]} if r.aliases else {}),
            **({"import": r.import_id} if r.import_id else {}),
        }

    resources = []
    for r in recorded:
        parent = names.get(r.parent_urn)
        resources.append(
            {
                "type": r.type,
                "name": r.name,
                "urn": f"urn:pulumi:{stack}::{project}::{qualified_type(r)}::{r.name}",
                "parent": f"{parent.type}::{parent.name}" if parent else None,
                "inputs": _clean(r.inputs),
                "options": options(r),
            }
        )
    resources.sort(key=lambda r: (r["type"], r["name"]))
    manifests = sorted(
        (_clean(r.inputs) for r in recorded if _is_kubernetes_object(r)), key=_manifest_key
    )
    wiring = {f"{r['type']}::{r['name']}": r["options"] for r in resources}
    return RenderResult(stack, resources, manifests, wiring)


# libyaml's C emitter when PyYAML was built with it (the wheels are): the same bytes, several times
# faster on prod's large manifests (tests/stacks/test_cli.py compares both emitters' bytes).
_BaseDumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class _ManifestDumper(_BaseDumper):  # type: ignore[misc, valid-type]
    """Multi-line strings (counter files, dashboards) as readable literal blocks."""


class _PureManifestDumper(yaml.SafeDumper):
    """The pure-Python emitter with the same representers, to prove the output is identical."""


def _str_representer(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_ManifestDumper.add_representer(str, _str_representer)
_PureManifestDumper.add_representer(str, _str_representer)


def dump_manifests(manifests: list[dict[str, Any]], dumper: type = _ManifestDumper) -> str:
    return yaml.dump_all(manifests, Dumper=dumper, sort_keys=True, default_flow_style=False, width=120)


def write(result: RenderResult, out_dir: Path) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    manifests_path = out_dir / "manifests.yaml"
    resources_path = out_dir / "resources.json"
    manifests_path.write_text(dump_manifests(result.manifests))
    resources_path.write_text(json.dumps(result.resources, indent=2, sort_keys=True) + "\n")
    return manifests_path, resources_path


def summary(result: RenderResult) -> str:
    """Resources by type, then each component with its children."""
    lines = [f"stack {result.stack}: {len(result.resources)} resources, {len(result.manifests)} "
             "Kubernetes objects", "", "resources by type:"]
    counts = Counter(r["type"] for r in result.resources)
    width = max(len(t) for t in counts)
    lines += [f"  {t.ljust(width)}  {n}" for t, n in sorted(counts.items())]
    lines += ["", "components:"]
    children: dict[str, list[str]] = {}
    for r in result.resources:
        if r["parent"]:
            children.setdefault(r["parent"], []).append(f"{r['type']}::{r['name']}")
    component_types = {f"{r['type']}::{r['name']}" for r in result.resources if r["type"].startswith("llmserving:")}
    for component in sorted(component_types):
        lines.append(f"  {component}")
        lines += [f"    - {c}" for c in sorted(children.get(component, []))]
    return "\n".join(lines) + "\n"
