"""Value conversions between cgroup v1 semantics and the cgroup v2 files.

The koordlet reasons in v1 terms everywhere (cpu shares, a CFS quota where -1 means
unlimited, memory limits where -1 means unlimited); these functions are the only place
where v2's weights, ``max`` keywords and combined files appear. Every function is pure.
"""

from __future__ import annotations

MIN_SHARES = 2
MAX_SHARES = 262144
MIN_WEIGHT = 1
MAX_WEIGHT = 10000
#: v1 memory limits at or above this are the kernel's "unlimited" (PAGE_COUNTER_MAX rounded to pages)
V1_MEMORY_UNLIMITED = 0x7FFFFFFFFFFFF000
MAX_INT64 = (1 << 63) - 1
#: blkio.weight / blkio.cost.weight range (v1) and io.weight range (v2)
MIN_BLKIO_WEIGHT, MAX_BLKIO_WEIGHT = 10, 1000
MIN_IO_WEIGHT, MAX_IO_WEIGHT = 1, 10000


def _clamp(value: int, low: int, high: int) -> int:
    return max(low, min(high, value))


def shares_to_weight(shares: int) -> int:
    """cpu.shares -> cpu.weight, the mapping runc and the kubelet use."""
    return _clamp(1 + (shares - MIN_SHARES) * 9999 // 262142, MIN_WEIGHT, MAX_WEIGHT)


def weight_to_shares(weight: int) -> int:
    """cpu.weight -> cpu.shares (the inverse of :func:`shares_to_weight`, up to rounding)."""
    return _clamp((weight - 1) * 262142 // 9999 + MIN_SHARES, MIN_SHARES, MAX_SHARES)


def blkio_weight_to_io_weight(weight: int) -> int:
    """blkio weight [10, 1000] -> io.weight [1, 10000] (linear, as runc converts it)."""
    return _clamp(1 + (weight - MIN_BLKIO_WEIGHT) * 9999 // 990, MIN_IO_WEIGHT, MAX_IO_WEIGHT)


def io_weight_to_blkio_weight(weight: int) -> int:
    return _clamp((weight - 1) * 990 // 9999 + MIN_BLKIO_WEIGHT, MIN_BLKIO_WEIGHT, MAX_BLKIO_WEIGHT)


def unlimited_to_max(value: int) -> str:
    """-1 (v1's "no limit") -> ``max``; other values unchanged."""
    return "max" if value == -1 else str(value)


def max_to_unlimited(token: str) -> int:
    """``max`` -> -1; a number otherwise (raises ValueError on anything else)."""
    return -1 if token == "max" else int(token)


def parse_cpu_max(text: str) -> tuple[int, int]:
    """``"max 100000"`` -> ``(-1, 100000)``; the period defaults to 100000 when absent."""
    fields = text.split()
    if not fields or len(fields) > 2:
        raise ValueError(f"cpu.max must be '<quota> [<period>]', got {text!r}")
    quota = max_to_unlimited(fields[0])
    period = int(fields[1]) if len(fields) == 2 else 100000
    return quota, period


def v1_memory_limit(value: int) -> int:
    """A v1 ``memory.limit_in_bytes`` reading with the kernel's unlimited value as -1."""
    return -1 if value >= V1_MEMORY_UNLIMITED else value


def usage_usec_to_ns(usec: int) -> int:
    return usec * 1000
