"""Retry policy for API calls: exponential backoff with full jitter.

What is retried is decided by the client (429 always, 5xx and lost connections only for
idempotent calls); this module decides how long to wait. A server's ``Retry-After`` wins
over the computed delay, capped by ``max_delay``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass(frozen=True)
class RetryPolicy:
    """``attempts`` counts the first try; ``attempts=1`` disables retries."""

    attempts: int = 5
    base_delay: float = 0.2
    max_delay: float = 10.0
    factor: float = 2.0
    jitter: float = 0.5
    rng: random.Random = field(default_factory=random.Random, compare=False, repr=False)

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        if retry_after is not None and retry_after >= 0:
            return min(float(retry_after), self.max_delay)
        base = min(self.max_delay, self.base_delay * self.factor ** (attempt - 1))
        spread = base * self.jitter
        return max(0.0, min(self.max_delay, base - spread + self.rng.random() * 2 * spread))


NO_RETRY = RetryPolicy(attempts=1)
