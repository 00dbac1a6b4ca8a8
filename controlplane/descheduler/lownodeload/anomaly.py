"""Per-node anomaly detectors: a node over its high thresholds becomes a source only after
more than ``consecutiveAbnormalities`` consecutive rounds over them.

Upstream's ``utils/anomaly`` basic detector, a two-state machine:

* **OK**: an abnormal round counts (and clears the normal count); once the abnormal count is
  over ``consecutiveAbnormalities`` the detector turns **anomalous** for ``timeout``.
* **Anomalous**: abnormal rounds change nothing; normal rounds count, and once the normal
  count is over ``consecutiveNormalities`` the detector is OK again. When ``timeout`` has
  passed since it turned anomalous, it is OK again with clear counts.
* :meth:`Detector.reset` (a node found under its low thresholds) makes it OK with clear counts.

Detectors live in a :class:`DetectorCache` and are forgotten ``detectorCacheTimeout`` after
their last abnormal mark (a go-cache with that default expiration in upstream).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from koordinator.kube.clock import SYSTEM_CLOCK, Clock

__all__ = ["AnomalyCondition", "Detector", "DetectorCache", "State"]


class State(StrEnum):
    OK = "OK"
    ANOMALY = "Anomaly"


@dataclass(frozen=True)
class AnomalyCondition:
    """``anomalyCondition`` of LowNodeLoadArgs (upstream's defaults)."""

    timeout_s: float = 60.0
    consecutive_abnormalities: int = 5
    consecutive_normalities: int = 3


class Detector:
    def __init__(self, name: str, condition: AnomalyCondition, clock: Clock = SYSTEM_CLOCK) -> None:
        self.name = name
        self.condition = condition
        self.clock = clock
        # a timeout of 0 or less is upstream's 60 s default
        self.timeout_s = condition.timeout_s if condition.timeout_s > 0 else 60.0
        self.state = State.OK
        self.abnormalities = 0
        self.normalities = 0
        self._expires: float | None = None

    def _current(self) -> State:
        if (
            self.state is State.ANOMALY
            and self._expires is not None
            and self._expires < self.clock.monotonic()
        ):
            self._become(State.OK)
        return self.state

    def _become(self, state: State) -> None:
        self.state = state
        self.abnormalities = self.normalities = 0
        self._expires = self.clock.monotonic() + self.timeout_s if state is State.ANOMALY else None

    def mark(self, normal: bool) -> State:
        """Count one round; the state after it."""
        state = self._current()
        if normal:
            self.normalities += 1
            self.abnormalities = 0
            if state is State.ANOMALY and self.normalities > self.condition.consecutive_normalities:
                self._become(State.OK)
        elif state is State.OK:
            self.abnormalities += 1
            self.normalities = 0
            if self.abnormalities > self.condition.consecutive_abnormalities:
                self._become(State.ANOMALY)
        return self.state

    def reset(self) -> None:
        self._become(State.OK)


class DetectorCache:
    """Detectors by node name, each forgotten ``expiry_s`` after it was last stored."""

    def __init__(self, expiry_s: float, clock: Clock = SYSTEM_CLOCK) -> None:
        self.expiry_s = expiry_s
        self.clock = clock
        self._entries: dict[str, tuple[Detector, float]] = {}

    def get(self, name: str) -> Detector | None:
        entry = self._entries.get(name)
        if entry is None:
            return None
        if entry[1] <= self.clock.monotonic():
            del self._entries[name]
            return None
        return entry[0]

    def put(self, detector: Detector) -> None:
        self._entries[detector.name] = (detector, self.clock.monotonic() + self.expiry_s)

    def __len__(self) -> int:
        return len(self._entries)
