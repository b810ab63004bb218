"""What the offline render spares the Pulumi runtime and the garbage collector, and why its output
stays byte-identical (tests/golden; `make bench` shows the time).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator
from typing import Any

from pulumi.runtime import resource as pulumi_resource

# The switch: whether the SDK computes each registration's source position and stack trace during an
# offline render. It does so per resource with traceback.extract_stack(), which stats every source
# file on the stack (about a tenth of a render's CPU, pulumi 3.272.0 runtime/resource.py
# _get_stack_trace), only to send them to the engine for its diagnostics; the mock monitor never
# reads them (runtime/mocks.py MockMonitor.RegisterResource, render.RecordingMonitor), so the render
# is byte-identical without them (tests/golden). Off here only: `pulumi up` runs without this module.
OFFLINE_SOURCE_POSITIONS = False


@contextlib.contextmanager
def no_source_positions() -> Iterator[None]:
    """Registrations carry no stack trace while the mock program runs, unless OFFLINE_SOURCE_POSITIONS."""
    if OFFLINE_SOURCE_POSITIONS:
        yield
        return
    computed = pulumi_resource._get_stack_trace  # noqa: SLF001 - the SDK's one hook for it
    pulumi_resource._get_stack_trace = _no_stack_trace  # noqa: SLF001
    try:
        yield
    finally:
        pulumi_resource._get_stack_trace = computed  # noqa: SLF001


# A render allocates a few hundred thousand objects, many in reference cycles (Outputs, futures,
# tasks), into a heap that already holds the program's ~1,400 modules. With the collector's default
# first-generation threshold (700 allocations) it kept traversing that heap: about a quarter of a
# render's CPU (tools/bench.py, `make bench`). While a render runs, what existed before it is
# frozen (gc.freeze: left out of collections) and the first generation is collected every
# 10,000 allocations; both are restored after, so the garbage is reclaimed as before, only in fewer,
# larger passes. 10,000 rather than more: a larger one saved little more and held more memory.
RENDER_GC_THRESHOLD = 10_000


@contextlib.contextmanager
def fewer_collections() -> Iterator[None]:
    # A caller that froze its heap itself (the test session, tests/conftest.py) keeps its freeze, and
    # nothing more is frozen: what this render leaves behind stays collectable.
    ours = not gc.get_freeze_count()
    threshold = gc.get_threshold()
    if ours:
        gc.freeze()
    gc.set_threshold(RENDER_GC_THRESHOLD, *threshold[1:])
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        if ours:
            gc.unfreeze()


def _no_stack_trace() -> Any:
    # An empty trace: the SDK then sends no source position either (runtime/resource.py _get_source_position).
    from pulumi.runtime.proto import source_pb2

    return source_pb2.StackTrace()
