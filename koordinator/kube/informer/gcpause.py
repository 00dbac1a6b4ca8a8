"""Garbage-collector settings around bulk decoding.

Decoding a large LIST creates millions of container objects; each allocation burst can
trigger a full collection that walks every object already kept (the informer caches),
so the initial sync would stall the event loop for a time that grows with the cache.
:func:`paused` switches automatic collection off while any informer is listing
(reference-counted across concurrent listers); :func:`freeze` moves everything alive
after the initial sync into the permanent generation, so later collections skip the
long-lived caches. Objects frozen and later dropped are still freed by reference
counting; only reference cycles among them would wait for ``gc.unfreeze``.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

_depth = 0
_was_enabled = True


@contextlib.contextmanager
def paused() -> Iterator[None]:
    global _depth, _was_enabled
    if _depth == 0:
        _was_enabled = gc.isenabled()
        gc.disable()
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        if _depth == 0 and _was_enabled:
            gc.enable()


def freeze() -> None:
    """Collect the young generations once, then freeze what survives."""
    gc.collect(1)
    gc.freeze()


def frozen_count() -> int:
    return gc.get_freeze_count()
