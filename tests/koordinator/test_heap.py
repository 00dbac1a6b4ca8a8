"""The start-up heap freeze: what survives is frozen; full collections are made rarer only on request."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from koordinator.heap import FULL_COLLECTION_THRESHOLD, freeze_startup_heap


@pytest.fixture
def restored_gc() -> Iterator[None]:
    thresholds = gc.get_threshold()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)


@pytest.mark.usefixtures("restored_gc")
@pytest.mark.parametrize("rarer", [False, True], ids=["thresholds-kept", "rarer-full-collections"])
def test_freeze_startup_heap(rarer):
    young, middle, full = gc.get_threshold()
    kept = [object()]
    freeze_startup_heap(rarer_full_collections=rarer)
    assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == (young, middle, FULL_COLLECTION_THRESHOLD if rarer else full)
    assert kept
