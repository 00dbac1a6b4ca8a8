"""What a filter plug-in gives the framework: a byte mask over the node table for a pod,
the histogram of its reasons over the rows it rejected, and a per-node explanation for
``koord-scheduler simulate``.

A mask plug-in builds its mask from byte columns the cluster keeps (no loop over nodes
in Python); ``None`` means it rejects no node for this pod.
"""

from __future__ import annotations

from typing import Protocol

from controlplane.scheduler.cluster import Cluster, NodeInfo
from controlplane.scheduler.podinfo import PodInfo


class MaskFilter(Protocol):
    NAME: str

    def mask(self, pod: PodInfo, cluster: Cluster) -> bytes | None:
        """One byte per table row: 1 where the node passes."""
        ...

    def reasons(self, pod: PodInfo, cluster: Cluster, rejected: bytes) -> dict[str, int]:
        """How many of the ``rejected`` rows (1 = rejected by this plug-in) fail for each reason."""
        ...

    def explain(self, pod: PodInfo, node: NodeInfo) -> str | None:
        """Why this plug-in rejects ``node`` (None when it passes)."""
        ...


def and_masks(a: bytes, b: bytes) -> bytes:
    """Byte-wise AND of two 0/1 masks of the same length, at C speed."""
    n = len(a)
    return (int.from_bytes(a, "little") & int.from_bytes(b, "little")).to_bytes(n, "little")


def and_not(a: bytes, b: bytes) -> bytes:
    """Rows set in ``a`` and not in ``b`` (0/1 masks)."""
    return (int.from_bytes(a, "little") & ~int.from_bytes(b, "little")).to_bytes(len(a), "little")
