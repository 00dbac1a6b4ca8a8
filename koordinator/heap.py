"""Process heap tuning shared by the long-running components: the start-up heap frozen.

A full garbage collection walks every tracked object with the GIL held, and nothing else
runs meanwhile: the imports of a koordlet or koord-manager process alone are tens of
thousands of objects, 12-16 ms a collection on the project's machine, and informer caches
add to that. :func:`freeze_startup_heap`, called once the start-up heap is built
(imports, wiring, synced caches), collects the garbage made so far and moves what is left
to the permanent generation with :func:`gc.freeze`, which collections never walk again;
objects frozen and later dropped are still freed by reference counting.
"""

from __future__ import annotations

import gc

__all__ = ["FULL_COLLECTION_THRESHOLD", "freeze_startup_heap"]

#: Collections of the middle generation between two full collections (CPython's default is 10).
FULL_COLLECTION_THRESHOLD = 100


def freeze_startup_heap(*, rarer_full_collections: bool = False) -> None:
    """Collect, then freeze what survives.

    ``rarer_full_collections``: a full collection runs after :data:`FULL_COLLECTION_THRESHOLD`
    middle ones instead of 10, so what a process takes in after start-up (the webhook
    server's caches) is walked ten times less often; the young generations keep CPython's
    thresholds (their collections take tens of microseconds).
    """
    gc.collect()
    gc.freeze()
    if rarer_full_collections:
        young, middle, _ = gc.get_threshold()
        gc.set_threshold(young, middle, FULL_COLLECTION_THRESHOLD)
