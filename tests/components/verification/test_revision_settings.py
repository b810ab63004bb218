"""What a second revision's deploy-gate Job is told (llm_serving/stack/verification.py `settings`), on prod's
two-revision variant: its target (the model's edge URL with the revision's header, and its own Service), its load
(at weight 0 its own planned concurrency, the planner's SLO-bound concurrency per replica times its replicas, held
to the model's objectives; with a weight, the in-place gate's cap), and that the first revision's Job and a model
without revisions are told what they were."""

from __future__ import annotations

import dataclasses

import pytest

from llm_serving.edge import REVISION_HEADER
from llm_serving.stack import planning, revisions, verification
from llm_serving.stack.args import ServingStackArgs
from llm_serving.verification import VerificationMode
from stacks.config.files import stack_file_path
from stacks.environment import load_stack_file
from tests.support import stack_variants

FIRST, SECOND = "llama-70b", "llama-70b-canary"


@pytest.fixture(scope="module")
def written(variants_dir) -> ServingStackArgs:
    return load_stack_file(stack_variants.prod_with_two_revisions(variants_dir))[1]


def _at(config: ServingStackArgs, stable: int, canary: int) -> ServingStackArgs:
    (model,) = config.models
    weighted = [dataclasses.replace(model.revisions[0], weight=stable),
                dataclasses.replace(model.revisions[1], weight=canary)]
    return revisions.expanded(dataclasses.replace(config, models=[dataclasses.replace(model, revisions=weighted)]))


def _model(config: ServingStackArgs, name: str):
    (found,) = [m for m in config.models if m.name == name]
    return found


def test_the_revision_is_reached_by_its_header_at_the_edge_and_by_its_own_service(written):
    config = _at(written, 90, 10)
    checked = verification.settings(config, _model(config, SECOND))
    edge, service = checked.targets
    first = verification.settings(config, _model(config, FIRST))
    # The model's own edge URL (and in-cluster address of its Gateway), with the header its header rule matches.
    assert (edge.base_url, edge.connect_to) == (first.targets[0].base_url, first.targets[0].connect_to)
    assert edge.headers == {REVISION_HEADER: "canary"}
    assert service.base_url == f"http://{SECOND}.{config.serving.namespace}.svc:8000/v1" and service.headers == {}
    assert checked.load_target == "service"
    # Its replicas answer to the model's name and put it in their responses (vLLM's first --served-model-name).
    assert (checked.model, checked.revision) == (FIRST, "canary")


def test_at_weight_zero_the_load_is_the_revisions_own_plan_held_to_the_objectives(written):
    config = _at(written, 100, 0)
    second = _model(config, SECOND)
    assert not verification.serves_users(config, second)
    checked = verification.settings(config, second)
    assert checked.load is not None
    per_replica, _ = verification._slo_concurrency(config, second, checked.load.prompt_tokens,
                                                   checked.load.output_tokens)
    assert per_replica
    assert checked.load.concurrency == per_replica * planning.replica_bounds(second)[0]
    # More than the in-place gate may ever send: the whole point of gating a revision before it serves.
    assert checked.load.concurrency > verification.spare_batch(config, second)
    assert checked.load.objectives == {"ttft_p95_ms": second.slo.ttft_p95_seconds * 1000,
                                       "itl_p95_ms": second.slo.itl_p95_seconds * 1000}
    assert checked.note is not None and "weight 0" in checked.note


@pytest.mark.parametrize("weight", [1, 10, 50])
def test_with_a_weight_the_load_is_capped_as_the_in_place_gates(written, weight):
    config = _at(written, 100 - weight, weight)
    second = _model(config, SECOND)
    assert verification.serves_users(config, second)
    checked = verification.settings(config, second)
    spare = verification.spare_batch(config, second)
    assert (checked.load.concurrency if checked.load else 0) <= spare
    assert checked.load is None or checked.load.objectives == {}
    assert checked.note is not None and "spare batch" in checked.note


def test_the_first_revisions_job_keeps_the_route_as_clients_see_it_and_the_in_place_cap(written):
    # With a weight (at 0 it is reached by its header and loaded in full: tests/components/test_revisions.py).
    config = _at(written, 10, 90)
    first = _model(config, FIRST)
    checked = verification.settings(config, first)
    assert checked.revision == "stable" and all(t.headers == {} for t in checked.targets)
    assert verification.serves_users(config, first)
    assert (checked.load.concurrency if checked.load else 0) <= verification.spare_batch(config, first)


def test_a_model_without_revisions_is_told_what_it_was():
    config = load_stack_file(stack_file_path("prod"))[1]
    checked = verification.settings(config, config.models[0])
    assert checked.revision is None and all(t.headers == {} for t in checked.targets)
    assert verification.revision_under_test(config, config.models[0]) is None
    assert verification.verification_mode(config) is VerificationMode.GATE
