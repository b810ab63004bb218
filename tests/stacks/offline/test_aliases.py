"""Aliases as the engine reads them: a moved resource and every child of a moved component answer to their
former URNs, so the offline diff keeps them instead of deleting and creating them."""

from __future__ import annotations

from stacks.offline.aliases import answers_to
from stacks.offline.diff import diff_resources

PREFIX = "urn:pulumi:prod::llm-serving::"


def resource(type_: str, name: str, qualified: str, parent: str | None = None, **options) -> dict:
    return {"type": type_, "name": name, "urn": f"{PREFIX}{qualified}::{name}", "parent": parent,
            "inputs": {"spec": {"a": 1}}, "options": options}


STACK = "llmserving:stack:ServingStack"
BEFORE = [
    resource(STACK, "llm", STACK),
    resource("llmserving:edge:Edge", "edge", f"{STACK}$llmserving:edge:Edge", f"{STACK}::llm"),
    resource("kubernetes:v1:HTTPRoute", "route", f"{STACK}$llmserving:edge:Edge$kubernetes:v1:HTTPRoute",
             "llmserving:edge:Edge::edge"),
]


def test_a_resource_moved_to_another_parent_answers_to_its_former_urn():
    after = [*BEFORE[:2], resource("llmserving:routing:Routing", "routing", f"{STACK}$llmserving:routing:Routing",
                                   f"{STACK}::llm"),
             resource("kubernetes:v1:HTTPRoute", "route", f"{STACK}$llmserving:routing:Routing$kubernetes:v1:HTTPRoute",
                      "llmserving:routing:Routing::routing", aliases=[{"parentUrn": "llmserving:edge:Edge::edge"}])]
    moved = after[3]["urn"]
    assert answers_to(after)[moved] == {BEFORE[2]["urn"]}
    diff = diff_resources(BEFORE, after, "prod", "main")
    assert diff.counts() == "0 to replace, 0 to delete, 1 to create, 1 to update"
    (update,) = diff.of("update")
    assert update.name == "route" and update.notes[0].startswith("kept under a new URN")


def test_the_children_of_a_renamed_component_inherit_its_alias():
    renamed = f"{STACK}$llmserving:edge:Gateway"
    after = [BEFORE[0],
             resource("llmserving:edge:Gateway", "edge", renamed, f"{STACK}::llm",
                      aliases=[{"type": "llmserving:edge:Edge"}]),
             resource("kubernetes:v1:HTTPRoute", "route", f"{renamed}$kubernetes:v1:HTTPRoute",
                      "llmserving:edge:Gateway::edge")]
    assert BEFORE[2]["urn"] in answers_to(after)[after[2]["urn"]]
    assert diff_resources(BEFORE, after, "prod", "main").counts() == (
        "0 to replace, 0 to delete, 0 to create, 2 to update")


def test_without_an_alias_a_move_is_a_delete_and_a_create():
    after = [*BEFORE[:2], resource("kubernetes:v1:HTTPRoute", "route", f"{STACK}$kubernetes:v1:HTTPRoute",
                                   f"{STACK}::llm")]
    assert diff_resources(BEFORE, after, "prod", "main").counts() == (
        "0 to replace, 1 to delete, 1 to create, 0 to update")


def test_a_child_named_after_its_renamed_parent_answers_to_the_former_name():
    # The `<name>-<part>` convention: a component renamed from "edge" to "gateway" (alias name "edge") makes its child
    # "gateway-route"; the engine's inheritedChildAlias gives the child the former "edge-route" under the old parent.
    parent_chain = f"{STACK}$llmserving:edge:Edge"
    before = [BEFORE[0], BEFORE[1],
              resource("kubernetes:v1:HTTPRoute", "edge-route", f"{parent_chain}$kubernetes:v1:HTTPRoute",
                       "llmserving:edge:Edge::edge")]
    after = [BEFORE[0],
             resource("llmserving:edge:Edge", "gateway", parent_chain, f"{STACK}::llm", aliases=[{"name": "edge"}]),
             resource("kubernetes:v1:HTTPRoute", "gateway-route", f"{parent_chain}$kubernetes:v1:HTTPRoute",
                      "llmserving:edge:Edge::gateway")]
    assert before[2]["urn"] in answers_to(after)[after[2]["urn"]]
    assert diff_resources(before, after, "prod", "main").counts() == (
        "0 to replace, 0 to delete, 0 to create, 2 to update")
