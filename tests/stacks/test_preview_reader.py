"""The preview and drift roles can read every object a refresh reads, and nothing else (stacks/reader.py).

Every kind in every stack's render (committed stacks and examples), and the kinds inside the remote components
the offline render does not expand, must be readable through the rendered ClusterRole; Secrets only through
RoleBindings of the drift role's group, in the namespaces that hold the stack's Secrets or Helm release records.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from stacks import reader
from stacks.offline.render import RenderResult
from tests.conftest import PROJECT_DIR, STACK_FILES, render_file

EXAMPLES = sorted((PROJECT_DIR / "examples").glob("Pulumi.*.yaml"))
ALL_STACKS = STACK_FILES + EXAMPLES
CRD_FILES = sorted((PROJECT_DIR / "llm_serving" / "platform" / "crds").glob("*.yaml"))
CRD_FIXTURES = sorted((PROJECT_DIR / "tests" / "fixtures" / "reference" / "crds").glob("*.json"))


def _group(api_version: str) -> str:
    return api_version.rpartition("/")[0]


def _rendered_kinds(result: RenderResult) -> set[tuple[str, str]]:
    kinds = {(_group(doc["apiVersion"]), doc["kind"]) for doc in result.manifests}
    for resource in result.resources:
        kinds.update(reader.REMOTE_COMPONENT_KINDS.get(resource["type"], []))
    return kinds


def _remote_types(result: RenderResult) -> set[str]:
    return {r["type"] for r in result.resources if r["type"].startswith(("kubernetes:helm.sh/v4", "kubernetes:yaml/"))}


def _readable(role: dict[str, Any]) -> set[tuple[str, str]]:
    """(group, resource) pairs the role lets one get, list and watch."""
    pairs: set[tuple[str, str]] = set()
    for rule in role["rules"]:
        if set(reader.READ_VERBS) <= set(rule["verbs"]):
            pairs.update((g, r) for g in rule["apiGroups"] for r in rule["resources"])
    return pairs


def _reader_objects(result: RenderResult) -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {}
    for doc in result.manifests:
        if doc.get("metadata", {}).get("labels", {}).get("app.kubernetes.io/component") == "preview-reader":
            found.setdefault(doc["kind"], []).append(doc)
    return found


@pytest.mark.parametrize("stack_file", ALL_STACKS, ids=lambda p: p.name)
def test_every_rendered_kind_is_readable_by_the_preview_group(stack_file: Path) -> None:
    result = render_file(stack_file)
    objects = _reader_objects(result)
    role = next(r for r in objects.get("ClusterRole", []) if r["metadata"]["name"] == reader.CLUSTER_ROLE)
    readable = _readable(role)
    missing = {kind for kind in _rendered_kinds(result) - {("", "Secret")}
               if (kind[0], reader.KIND_RESOURCES.get(kind, "?")) not in readable}
    assert not missing, f"{result.stack}: kinds a refresh reads but the preview group cannot: {sorted(missing)}"
    binding = next(b for b in objects["ClusterRoleBinding"] if b["roleRef"]["name"] == reader.CLUSTER_ROLE)
    assert binding["subjects"] == [{"kind": "Group", "name": reader.GROUP, "apiGroup": "rbac.authorization.k8s.io"}]


def test_the_cluster_role_lists_exactly_the_kinds_the_stacks_manage() -> None:
    """No kind nothing renders: the table follows the stacks both ways."""
    rendered: set[tuple[str, str]] = set()
    for path in ALL_STACKS:
        rendered |= _rendered_kinds(render_file(path))
    rendered.discard(("", "Secret"))
    assert set(reader.KIND_RESOURCES) == rendered


@pytest.mark.parametrize("stack_file", ALL_STACKS, ids=lambda p: p.name)
def test_secrets_are_readable_only_where_the_stack_keeps_secrets_or_helm_records(stack_file: Path) -> None:
    result = render_file(stack_file)
    holders = {doc["metadata"]["namespace"] for doc in result.manifests if doc["kind"] == "Secret"}
    holders |= {r["inputs"]["namespace"] for r in result.resources if r["type"] == "kubernetes:helm.sh/v3:Release"}
    objects = _reader_objects(result)
    bound = {b["metadata"]["namespace"] for b in objects["RoleBinding"] if b["roleRef"]["name"] == reader.SECRET_ROLE}
    assert bound == holders
    # ... and only to the drift role's group: the pull-request preview never reads a Secret.
    assert {s["name"] for b in objects["RoleBinding"] for s in b["subjects"]} == {reader.SECRET_GROUP}
    # Secrets come through RoleBindings alone; the cluster-wide role never names them, nor any verb but reads.
    assert not any(b["roleRef"]["name"] == reader.SECRET_ROLE for b in objects["ClusterRoleBinding"])
    for role in objects["ClusterRole"]:
        for rule in role["rules"]:
            assert rule["verbs"] == reader.READ_VERBS
            if role["metadata"]["name"] == reader.CLUSTER_ROLE:
                assert "secrets" not in rule["resources"] and "*" not in rule["resources"] + rule["apiGroups"]


def test_custom_resource_plurals_are_the_crds_own() -> None:
    names: dict[tuple[str, str], str] = {}
    for path in CRD_FIXTURES:
        crd = json.loads(path.read_text())
        names[(crd["group"], crd["kind"])] = crd["plural"]
    for path in CRD_FILES:
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                names[(doc["spec"]["group"], doc["spec"]["names"]["kind"])] = doc["spec"]["names"]["plural"]
    # CRDs not vendored here, their plural from the CRD file's name in the chart that installs them:
    # envoyproxy/gateway charts/gateway-crds-helm/templates/generated/gateway.envoyproxy.io_httproutefilters.yaml.
    names[("gateway.envoyproxy.io", "HTTPRouteFilter")] = "httproutefilters"
    custom = {key: plural for key, plural in reader.KIND_RESOURCES.items() if key in names}
    assert custom == {key: names[key] for key in custom}
    # Every kind of a group no built-in API serves has its CRD here.
    builtin = {"", "admissionregistration.k8s.io", "apiextensions.k8s.io", "apps", "batch", "networking.k8s.io",
               "policy", "rbac.authorization.k8s.io", "storage.k8s.io"}
    assert {key for key in reader.KIND_RESOURCES if key[0] not in builtin} <= set(names)


def test_remote_components_hold_only_the_kinds_listed() -> None:
    """The ConfigGroups apply the vendored CRD files: their kinds are exactly what the table says."""
    kinds = {(_group(doc["apiVersion"]), doc["kind"])
             for path in CRD_FILES for doc in yaml.safe_load_all(path.read_text()) if doc}
    assert kinds == set(reader.REMOTE_COMPONENT_KINDS["kubernetes:yaml/v2:ConfigGroup"])
    remote: set[str] = set()
    for path in ALL_STACKS:
        remote |= _remote_types(render_file(path))
    assert remote == set(reader.REMOTE_COMPONENT_KINDS)
