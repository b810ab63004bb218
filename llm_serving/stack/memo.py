"""A memo for the planners' pure functions of one validated stack config (pure).

A config is frozen once validated (stacks/config/base.py), and a preview, a render or a command asks
the planners the same questions about it many times: each rule, each component and each model's
compile-cache state asks for every model's capacity plan again, dozens of plans per check pass (the
test suite asked for 29,000 plans and 8,300 compile-cache states; its check passes took 4.7 s of CPU,
0.8 s with this memo). So a result is kept per config and model, by identity: the entry holds its
arguments, so their ids cannot be reused while it is kept, and a new config (another stack, a copy
with an update) is another entry. Errors are not kept; they are raised again on the next call. Only
functions whose results are immutable are memoised (a frozen dataclass, a tuple of a bool and a str).
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, TypeVar

Result = TypeVar("Result")

# Entries per function: a run holds a handful of configs (a diff's two sides, a clone and its base)
# with a few models each; the suite's many configs come and go one test at a time.
ENTRIES = 128


def per_config(function: Callable[..., Result]) -> Callable[..., Result]:
    """`function(config, *objects)`, computed once per identity of its arguments (at most ENTRIES kept)."""
    kept: OrderedDict[tuple[int, ...], tuple[tuple[Any, ...], Result]] = OrderedDict()
    # The program's callbacks run on one thread, but commands (and the suite) may plan from several.
    lock = threading.Lock()

    @functools.wraps(function)
    def memoised(*arguments: Any) -> Result:
        key = tuple(id(argument) for argument in arguments)
        with lock:
            entry = kept.get(key)
            if entry is not None and all(a is b for a, b in zip(entry[0], arguments, strict=True)):
                kept.move_to_end(key)
                return entry[1]
        result = function(*arguments)  # outside the lock: a planner may ask another memoised planner
        with lock:
            kept[key] = (arguments, result)
            if len(kept) > ENTRIES:
                kept.popitem(last=False)
        return result

    memoised.cache_clear = kept.clear  # type: ignore[attr-defined]
    return memoised
