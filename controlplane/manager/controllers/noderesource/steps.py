"""The record of a calculation: one :class:`Step` per quantity that went into the result.

``koord-manager explain-node`` prints these; the controller passes no :class:`Trace` (the
steps cost string formatting it does not need), so every producer checks ``trace`` first.
CPU amounts are milli-cores and memory amounts bytes, as upstream reports them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from controlplane.manager.controllers.noderesource.views import CPUMemory

__all__ = ["Step", "Trace", "format_cpu", "format_memory"]


@dataclass(frozen=True, slots=True)
class Step:
    #: dotted name: ``batch.capacity``, ``mid.unallocated``, ``nodemetric`` ...
    name: str
    #: milli-cores, or None when the step has no CPU amount
    cpu: int | None
    #: bytes, or None when the step has no memory amount
    memory: int | None
    detail: str

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name}
        if self.cpu is not None:
            out["cpu"] = self.cpu
        if self.memory is not None:
            out["memory"] = self.memory
        out["detail"] = self.detail
        return out


@dataclass
class Trace:
    steps: list[Step] = field(default_factory=list)

    def note(self, name: str, detail: str) -> None:
        self.steps.append(Step(name, None, None, detail))

    def amounts(self, name: str, amounts: CPUMemory, detail: str) -> None:
        """A step with both amounts (exact nano-units, reported as milli-cores and bytes)."""
        self.steps.append(Step(name, amounts.milli_cpu, amounts.memory_bytes, detail))

    def values(self, name: str, cpu: int | None, memory: int | None, detail: str) -> None:
        """A step with amounts already in milli-cores and bytes."""
        self.steps.append(Step(name, cpu, memory, detail))


def format_cpu(milli: int | None) -> str:
    if milli is None:
        return "-"
    return f"{milli}m"


def format_memory(value: int | None) -> str:
    if value is None:
        return "-"
    if value != 0 and value % (1 << 30) == 0:
        return f"{value >> 30}Gi"
    if value != 0 and value % (1 << 20) == 0:
        return f"{value >> 20}Mi"
    if abs(value) >= 1 << 30:
        return f"{value / (1 << 30):.2f}Gi ({value})"
    if abs(value) >= 1 << 20:
        return f"{value / (1 << 20):.2f}Mi ({value})"
    return str(value)
