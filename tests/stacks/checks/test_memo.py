"""The planners' memo (stacks/checks/memo.py): one result per identity of a frozen config and model,
never another object's, and errors always computed again."""

from __future__ import annotations

import concurrent.futures

import pytest

from llm_serving.stack import memo, planning
from stacks.config.files import PROJECT_DIR
from stacks.environment import load_stack_file


def _counting():
    calls: list[tuple[object, ...]] = []

    @memo.per_config
    def plan(config: object, model: object) -> tuple[object, object]:
        calls.append((config, model))
        return (config, model)

    return plan, calls


def test_the_same_config_and_model_are_planned_once():
    plan, calls = _counting()
    config, model = object(), object()
    assert plan(config, model) is plan(config, model)
    assert calls == [(config, model)]


def test_another_config_or_model_is_planned_again_even_when_it_is_equal():
    plan, calls = _counting()
    config, model, other = ["c"], ["m"], ["m"]
    plan(config, model)
    assert plan(config, other) == (config, other)
    assert calls == [(config, model), (config, other)]


def test_an_entry_holds_its_arguments_so_a_new_object_never_gets_an_old_result():
    plan, calls = _counting()
    for _ in range(3):
        plan([1], [2])  # each pair dies after the call unless the entry keeps it, freeing its id for the next
    assert len(calls) == 3


def test_errors_are_raised_again_not_kept():
    calls: list[int] = []

    @memo.per_config
    def failing(config: object) -> None:
        calls.append(1)
        raise ValueError("no plan")

    config = object()
    for _ in range(2):
        with pytest.raises(ValueError, match="no plan"):
            failing(config)
    assert calls == [1, 1]


def test_at_most_entries_results_are_kept_and_the_oldest_goes_first():
    plan, calls = _counting()
    kept = [object() for _ in range(memo.ENTRIES + 1)]
    for config in kept:
        plan(config, None)
    plan(kept[-1], None)
    assert len(calls) == memo.ENTRIES + 1  # the newest is still kept
    plan(kept[0], None)
    assert len(calls) == memo.ENTRIES + 2  # the oldest was dropped


def test_a_stacks_plans_are_the_planners_results_for_that_stack():
    _, prod = load_stack_file(PROJECT_DIR / "Pulumi.prod.yaml")
    _, dev = load_stack_file(PROJECT_DIR / "Pulumi.dev.yaml")
    model = prod.models[0]
    assert planning.model_plan(prod, model) is planning.model_plan(prod, model)
    assert planning.model_plan(prod, model) == planning.model_plan.__wrapped__(prod, model)
    assert planning.model_plan(dev, dev.models[0]).tensor_parallel_size == dev.models[0].tensor_parallel_size
    assert planning.compile_cache_state(prod, model) == planning.compile_cache_state.__wrapped__(prod, model)


def test_plans_asked_from_many_threads_while_entries_are_evicted_are_each_their_arguments_plan():
    plan, _ = _counting()
    configs = [object() for _ in range(memo.ENTRIES * 3)]

    def ask(offset: int) -> bool:
        return all(plan(configs[(i + offset) % len(configs)], None)[0] is configs[(i + offset) % len(configs)]
                   for i in range(len(configs)))

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        assert all(pool.map(ask, range(0, 8 * 37, 37)))
