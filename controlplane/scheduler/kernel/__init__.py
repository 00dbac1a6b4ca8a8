"""The scheduler's filter/score hot path: a compiled kernel over a columnar node table,
with a pure-Python twin (``KOORDLET_NO_EXTENSIONS=1``, the project's one switch for all
compiled accelerators, forces it; a missing build falls back with one warning).

Callers use :func:`find` and :func:`score`; both backends give identical results, which
one test body checks for each.
"""

from __future__ import annotations

import importlib
import logging
import os
from array import array
from collections.abc import Sequence
from functools import cache
from types import ModuleType

from controlplane.scheduler.kernel import twin
from controlplane.scheduler.kernel.table import NodeTable, PodVector, ScoreConfig
from controlplane.scheduler.kernel.twin import (
    DEFAULT_NORMALIZE,
    MIN_MAX,
    NO_NORMALIZE,
    SPREAD,
    Domains,
    Extra,
)

log = logging.getLogger(__name__)

NO_EXTENSIONS_ENV = "KOORDLET_NO_EXTENSIONS"


@cache
def native() -> ModuleType | None:
    """The compiled kernel, or None when the twin serves."""
    if os.environ.get(NO_EXTENSIONS_ENV, "").strip().lower() in ("1", "true", "yes", "on"):
        return None
    try:
        return importlib.import_module("controlplane.scheduler._native._kernel")
    except ImportError as err:
        log.warning("scheduler kernel extension unavailable (%s); using its Python twin", err)
        return None


def backend() -> str:
    return "python" if native() is None else "native"


class _Binding:
    """The compiled kernel bound to a table's buffers and one score configuration."""

    __slots__ = ("cfg", "kernel")

    def __init__(self, kernel: object, cfg: ScoreConfig) -> None:
        self.kernel = kernel
        self.cfg = cfg


def _bound(table: NodeTable, cfg: ScoreConfig, module: ModuleType) -> _Binding:
    binding = table.bound
    if not isinstance(binding, _Binding) or binding.cfg is not cfg:
        binding = _Binding(module.Kernel(table, cfg), cfg)
        table.bound = binding
    return binding


def find(
    table: NodeTable,
    pod: PodVector,
    cfg: ScoreConfig,
    mask: bytes | bytearray,
    start: int,
    want: int,
    state: array[int],
    extras: Sequence[Extra] = (),
) -> tuple[int, int, int, int]:
    """(chosen row or -1, feasible rows found, rows processed, best total score): the rows
    of ``mask`` (one byte per table row, 0 = rejected by another filter) from ``start`` round
    the table until ``want`` feasible ones, with the normalized score plug-ins ``extras``
    (see :func:`twin.find`)."""
    module = native()
    if module is None:
        return twin.find(table, pod, cfg, mask, start, want, state, extras)
    binding = _bound(table, cfg, module)
    result: tuple[int, int, int, int] = binding.kernel.find(pod, mask, start, want, state, extras or None)  # type: ignore[attr-defined]
    return result


def score(table: NodeTable, row: int, pod: PodVector, cfg: ScoreConfig) -> tuple[int, int]:
    """(NodeResourcesFit, NodeResourcesBalancedAllocation) of one row; balanced -1 = skipped."""
    module = native()
    if module is None:
        return twin.score(table, row, pod, cfg)
    binding = _bound(table, cfg, module)
    result: tuple[int, int] = binding.kernel.score(row, pod)  # type: ignore[attr-defined]
    return result


def fit_mask(table: NodeTable, pod: PodVector, cfg: ScoreConfig, mask: bytes | bytearray) -> bytes:
    """The rows of ``mask`` that NodeResourcesFit's filter passes (1 bytes): the rows a
    filter after it in the profile may still reject, for the reasons' first-rejecter count."""
    module = native()
    if module is None:
        return twin.fit_mask(table, pod, mask)
    out = bytearray(len(mask))
    _bound(table, cfg, module).kernel.fit_mask(pod, mask, out)  # type: ignore[attr-defined]
    return bytes(out)


def diagnose(table: NodeTable, pod: PodVector, cfg: ScoreConfig, mask: bytes | bytearray) -> array[int]:
    """Per reason code (:data:`twin.TOO_MANY_PODS`, :data:`twin.FIRST_RESOURCE` + column), how
    many rows of ``mask`` reject the pod for it: the counts of "0/N nodes are available"."""
    module = native()
    if module is None:
        return twin.diagnose(table, pod, mask)
    counts = array("q", bytes(8 * (twin.FIRST_RESOURCE + table.width)))
    _bound(table, cfg, module).kernel.diagnose(pod, mask, counts)  # type: ignore[attr-defined]
    return counts


__all__ = [
    "DEFAULT_NORMALIZE",
    "MIN_MAX",
    "NO_NORMALIZE",
    "SPREAD",
    "Domains",
    "Extra",
    "NodeTable",
    "PodVector",
    "ScoreConfig",
    "backend",
    "diagnose",
    "find",
    "fit_mask",
    "score",
]
