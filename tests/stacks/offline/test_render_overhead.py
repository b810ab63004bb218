"""What the offline render spares the SDK and the collector is given back after it, whether the
render succeeds or fails (stacks/offline/render_overhead.py)."""

from __future__ import annotations

import gc

import pytest
from pulumi.runtime import resource as pulumi_resource

from stacks.offline import render_overhead


def test_no_source_positions_swaps_the_sdks_hook_and_restores_it_after_a_failure():
    computed = pulumi_resource._get_stack_trace
    with pytest.raises(RuntimeError), render_overhead.no_source_positions():
        assert pulumi_resource._get_stack_trace is render_overhead._no_stack_trace
        assert list(pulumi_resource._get_stack_trace().frames) == []
        raise RuntimeError("the program failed")
    assert pulumi_resource._get_stack_trace is computed


def test_fewer_collections_keeps_a_callers_freeze_and_restores_the_threshold_after_a_failure():
    if not gc.get_freeze_count():
        gc.freeze()  # as the test session does (tests/conftest.py): the caller's freeze
    frozen, threshold = gc.get_freeze_count(), gc.get_threshold()
    with pytest.raises(RuntimeError), render_overhead.fewer_collections():
        assert gc.get_threshold() == (render_overhead.RENDER_GC_THRESHOLD, *threshold[1:])
        assert gc.get_freeze_count() == frozen  # nothing more frozen: the render's garbage stays collectable
        raise RuntimeError("the program failed")
    assert (gc.get_freeze_count(), gc.get_threshold()) == (frozen, threshold)


def test_fewer_collections_freezes_an_unfrozen_heap_only_while_it_runs():
    # The command line's case (no freeze of its own). The session's freeze is lifted for it and
    # taken again after, so the rest of the suite runs as before.
    gc.unfreeze()
    try:
        threshold = gc.get_threshold()
        with render_overhead.fewer_collections():
            assert gc.get_freeze_count() > 0
        assert (gc.get_freeze_count(), gc.get_threshold()) == (0, threshold)
        with pytest.raises(RuntimeError), render_overhead.fewer_collections():
            raise RuntimeError("the program failed")
        assert gc.get_freeze_count() == 0
    finally:
        gc.freeze()
