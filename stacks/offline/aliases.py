"""The URNs a rendered resource answers to: its own, and those its aliases name, as the engine computes them
(pure).

A resource declares aliases as specs (the Python SDK sends them when the engine supports alias specs): its
former type, name or parent. The engine turns each into a URN, and a child answers to every URN its parent
answers to, under that parent's former type chain (pulumi/pulumi pkg/resource/deploy/step_generator.go,
generateAliases: "multiply out any aliases our parent had"). The offline diff pairs a deleted URN with the new
resource that answers to it, which is what `pulumi up` does: the state is moved, nothing is recreated.
"""

from __future__ import annotations

from typing import Any


def split_urn(urn: str) -> tuple[str, str, str]:
    """(prefix `urn:pulumi:<stack>::<project>`, qualified type, name)."""
    stack, project, qualified, name = urn.removeprefix("urn:pulumi:").split("::", 3)
    return f"urn:pulumi:{stack}::{project}", qualified, name


def answers_to(resources: list[dict[str, Any]]) -> dict[str, set[str]]:
    """Each resource's URN -> every URN it answers to besides its own (its aliases, its parent's inherited)."""
    by_label = {f"{r['type']}::{r['name']}": r for r in resources}
    found: dict[str, set[str]] = {}

    def identities(resource: dict[str, Any]) -> set[tuple[str, str]]:
        """(type chain, name) of every URN the resource is known by: its own, and each alias gives."""
        return {split_urn(urn)[1:] for urn in {resource["urn"], *aliases_of(resource)}}

    def aliases_of(resource: dict[str, Any]) -> set[str]:
        urn = resource["urn"]
        if urn in found:
            return found[urn]
        found[urn] = set()  # a cycle cannot occur (parents precede children), but never recurse twice
        prefix, qualified, name = split_urn(urn)
        parent = by_label.get(resource.get("parent") or "")
        own_type = qualified.rsplit("$", 1)[-1]
        parent_ids = identities(parent) if parent is not None else {("", "")}
        urns: set[str] = set()
        # Each URN the parent answers to, inherited: under its type chain, and with its name where the child's
        # name starts with the parent's (the `<name>-<part>` convention), as the engine's inheritedChildAlias
        # does (pulumi/pulumi pkg/resource/deploy/step_generator.go), so renaming a component keeps its children.
        for chain, parent_name in parent_ids:
            inherited = name
            if parent is not None and name.startswith(parent["name"]):
                inherited = parent_name + name.removeprefix(parent["name"])
            urns.add(f"{prefix}::{chain + '$' if chain else ''}{own_type}::{inherited}")
        for alias in (resource.get("options") or {}).get("aliases", []):
            if "urn" in alias:
                urns.add(alias["urn"])
                continue
            alias_type = alias.get("type", own_type)
            alias_name = alias.get("name", name)
            if alias.get("noParent"):
                chains = {""}
            elif "parentUrn" in alias:
                former = by_label.get(alias["parentUrn"])
                chains = {chain for chain, _ in identities(former)} if former is not None else \
                    {split_urn(alias["parentUrn"])[1]} if alias["parentUrn"].startswith("urn:") else set()
            else:
                chains = {chain for chain, _ in parent_ids}
            for chain in chains:
                urns.add(f"{prefix}::{chain + '$' if chain else ''}{alias_type}::{alias_name}")
        urns.discard(urn)
        found[urn] = urns
        return urns

    for resource in resources:
        aliases_of(resource)
    return {urn: urns for urn, urns in found.items() if urns}
