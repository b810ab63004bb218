"""`adoptRetainedObjects`: the first `up` after a `pulumi destroy` adopts the claims and volumes the destroy left
(retainOnDelete) through Pulumi's `import` option, by their Kubernetes ids, instead of failing on each with
AlreadyExists (pulumi-kubernetes >= 4.29 creates client-side). ServingStack built once, on the component tier, from
dev's values with the key set, as a library user (or the program, from a stack file) builds it."""

from __future__ import annotations

import pytest

from llm_serving import ServingStack
from llm_serving.stack.adoption import ADOPTABLE_TYPES
from stacks.offline.render import RenderResult
from tests.support.components import committed_args, run


@pytest.fixture(scope="module")
def adopting() -> RenderResult:
    # The key is the component's (ServingStack reads it), without this repository's program.
    return run(lambda: ServingStack("llm", committed_args("dev", adoptRetainedObjects=True)))


def _kubernetes_id(resource: dict) -> str:
    metadata = resource["inputs"]["metadata"]
    return f"{metadata['namespace']}/{metadata['name']}" if metadata.get("namespace") else metadata["name"]


def test_each_retained_claim_and_volume_is_adopted_by_its_kubernetes_id(adopting):
    retained = [r for r in adopting.resources if r["type"] in ADOPTABLE_TYPES and r["options"]["retainOnDelete"]]
    # dev on EFS: the model's weights claim, and its read-only serving volume and claim.
    assert len(retained) == 3
    assert {r["name"]: r["options"].get("import") for r in retained} == {r["name"]: _kubernetes_id(r) for r in retained}
    # The volume is cluster-scoped: its id is its name alone.
    (volume,) = [r for r in retained if r["type"].endswith("PersistentVolume")]
    assert "/" not in volume["options"]["import"]
    # Nothing else is imported: every other object is created as before.
    assert [r["name"] for r in adopting.resources if r["options"].get("import") and r not in retained] == []


def test_the_component_adopts_on_its_own_as_a_library_user_builds_it(adopting):
    (claim,) = [r for r in adopting.resources if r["name"] == "llama-8b-weights-claim"]
    assert claim["options"]["import"] == "llm-serving/llama-8b-weights"


def test_without_the_key_nothing_is_imported(rendered):
    assert [r["name"] for r in rendered["dev"].resources if r["options"].get("import")] == []
