"""What a filter plug-in gives the framework: a byte mask over the node table for a pod,
the histogram of its reasons over the rows it rejected, and a per-node explanation for
``koord-scheduler simulate``.

A mask plug-in builds its mask from byte columns the cluster keeps (no loop over nodes
in Python); ``None`` means it rejects no node for this pod.
"""

from __future__ import annotations

from typing import Protocol

from controlplane.scheduler.cluster import Cluster, NodeInfo
from controlplane.scheduler.kernel.twin import Extra
from controlplane.scheduler.podinfo import PodInfo


class MaskFilter(Protocol):
    NAME: str
    #: whether evicting pods from a node can lift this plug-in's rejection (upstream's
    #: Unschedulable, as opposed to UnschedulableAndUnresolvable)
    PREEMPTION_HELPS: bool

    def mask(self, pod: PodInfo, cluster: Cluster) -> bytes | None:
        """One byte per table row: 1 where the node passes."""
        ...

    def reasons(self, pod: PodInfo, cluster: Cluster, rejected: bytes) -> dict[str, int]:
        """How many of the ``rejected`` rows (1 = rejected by this plug-in) fail for each reason."""
        ...

    def explain(self, pod: PodInfo, node: NodeInfo, cluster: Cluster) -> str | None:
        """Why this plug-in rejects ``node`` (None when it passes)."""
        ...


class NormalizedScore(Protocol):
    """A score plug-in scored outside the kernel: its raw score per row as weighted row
    masks (:class:`~controlplane.scheduler.kernel.twin.Extra`), normalized over the window."""

    NAME: str
    #: fewer is better (TaintToleration)
    reverse: bool

    def extra(self, pod: PodInfo, cluster: Cluster, weight: int) -> Extra | None:
        """The plug-in's parts for this pod (None when it skips the pod, as upstream's PreScore)."""
        ...

    def raw_score(self, pod: PodInfo, node: NodeInfo) -> int:
        """The raw score of one node (for ``simulate``)."""
        ...


def and_masks(a: bytes, b: bytes) -> bytes:
    """Byte-wise AND of two 0/1 masks of the same length, at C speed."""
    n = len(a)
    return (int.from_bytes(a, "little") & int.from_bytes(b, "little")).to_bytes(n, "little")


def and_not(a: bytes, b: bytes) -> bytes:
    """Rows set in ``a`` and not in ``b`` (0/1 masks)."""
    return (int.from_bytes(a, "little") & ~int.from_bytes(b, "little")).to_bytes(len(a), "little")


def rows_mask(bits: int, n: int) -> bytes:
    """A bit set of rows as a 0/1 byte mask of ``n`` rows, at C speed: its binary digits,
    row 0 first, as ASCII, translated to 0/1 bytes."""
    return format(bits, f"0{n}b")[::-1][:n].encode().translate(_ASCII_TO_MASK)


def bits_of(mask: bytes) -> int:
    """A 0/1 byte mask as a bit set of rows."""
    return int(mask.translate(_MASK_TO_ASCII)[::-1] or b"0", 2)


_ASCII_TO_MASK = bytes.maketrans(b"01", b"\x00\x01")
_MASK_TO_ASCII = bytes.maketrans(b"\x00\x01", b"01")
