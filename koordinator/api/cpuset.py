"""Linux CPU list strings (``"0-3,8,10-11"``), as cgroup ``cpuset.cpus`` and the annotations use them."""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["CPUSetError", "cpus_or_empty", "format_cpuset", "parse_cpuset"]


class CPUSetError(ValueError):
    """Text that is not a CPU list."""


def parse_cpuset(text: str) -> list[int]:
    """Sorted, de-duplicated CPU ids of a list like ``"0-3,8"`` (empty text is no CPUs)."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        low, sep, high = part.partition("-")
        try:
            first = int(low)
            last = int(high) if sep else first
        except ValueError:
            raise CPUSetError(f"invalid CPU list {text!r}") from None
        if first < 0 or last < first or not low.isdigit() or (sep and not high.isdigit()):
            raise CPUSetError(f"invalid CPU range {part!r} in {text!r}")
        cpus.update(range(first, last + 1))
    return sorted(cpus)


def cpus_or_empty(text: object) -> set[int]:
    """The CPUs of a list that may be missing or malformed (an annotation, a cgroup file):
    no CPUs then."""
    try:
        return set(parse_cpuset(str(text or "")))
    except CPUSetError:
        return set()


def format_cpuset(cpus: Iterable[int]) -> str:
    """The canonical list form: ascending, consecutive ids folded into ranges."""
    ordered = sorted(set(cpus))
    parts: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)
