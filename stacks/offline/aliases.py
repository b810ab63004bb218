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

    def qualified_types(resource: dict[str, Any]) -> set[str]:
        """The type chains the resource is known by: its own, and each one an alias or a parent's alias gives."""
        return {split_urn(urn)[1] for urn in {resource["urn"], *aliases_of(resource)}}

    def aliases_of(resource: dict[str, Any]) -> set[str]:
        urn = resource["urn"]
        if urn in found:
            return found[urn]
        found[urn] = set()  # a cycle cannot occur (parents precede children), but never recurse twice
        prefix, qualified, name = split_urn(urn)
        parent = by_label.get(resource.get("parent") or "")
        parent_chains = qualified_types(parent) if parent is not None else {""}
        own_type = qualified.rsplit("$", 1)[-1]
        urns: set[str] = set()
        # The parent's former type chains, inherited.
        for chain in parent_chains:
            urns.add(f"{prefix}::{chain + '$' if chain else ''}{own_type}::{name}")
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
                chains = qualified_types(former) if former is not None else {split_urn(alias["parentUrn"])[1]} \
                    if alias["parentUrn"].startswith("urn:") else set()
            else:
                chains = parent_chains
            for chain in chains:
                urns.add(f"{prefix}::{chain + '$' if chain else ''}{alias_type}::{alias_name}")
        urns.discard(urn)
        found[urn] = urns
        return urns

    for resource in resources:
        aliases_of(resource)
    return {urn: urns for urn, urns in found.items() if urns}
