"""Renaming the stack component keeps what it made. Its children's URNs carry its type, not its name (every child
of ServingStack has its own fixed or model-derived name), so they keep their URNs and only change parent, which
the engine records in place; with an alias naming the former name, the component itself is kept too. Shown with
the offline diff, which pairs URNs as the engine does (stacks/offline/aliases.py), over two renders."""

from __future__ import annotations

import pulumi

from llm_serving.stack import ServingStack
from stacks.offline.diff import diff_resources
from tests.support.components import EXISTING_EVERYTHING, run, stack_args

STACK_TYPE = "llmserving:stack:ServingStack"


def test_a_renamed_stack_component_creates_and_deletes_no_named_object():
    args = stack_args(EXISTING_EVERYTHING)
    before = run(lambda: ServingStack("llm", args)).resources
    renamed = run(lambda: ServingStack("inference", args)).resources
    diff = diff_resources(before, renamed, "test", "main")
    # Only the component itself, which holds no cloud object, is created and deleted.
    assert [(c.type, c.name) for c in diff.of("create")] == [(STACK_TYPE, "inference")]
    assert [(c.type, c.name) for c in diff.of("delete")] == [(STACK_TYPE, "llm")]
    assert not diff.of("replace")
    aliased = run(lambda: ServingStack("inference", args, pulumi.ResourceOptions(
        aliases=[pulumi.Alias(name="llm")]))).resources
    diff = diff_resources(before, aliased, "test", "main")
    assert not (diff.of("create") or diff.of("delete") or diff.of("replace"))
