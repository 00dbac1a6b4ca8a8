"""Retry delays for the work queue: per-key exponential backoff and an overall token bucket.

Defaults are controller-runtime's: the larger of a per-key delay of 5 ms doubling on every
failure up to 1000 s, and the delay until a token is free in a bucket refilled at 10 per
second holding at most 100 (the shared :class:`koordinator.kube.ratelimit.TokenBucket`).
A success forgets the key, so its next failure starts at 5 ms again. Time is read from an
injectable clock.
"""

from __future__ import annotations

from typing import Protocol

from koordinator.kube.clock import SYSTEM_CLOCK, Clock
from koordinator.kube.ratelimit import TokenBucket

__all__ = [
    "BucketRateLimiter",
    "ItemExponentialRateLimiter",
    "MaxOfRateLimiter",
    "RateLimiter",
    "default_rate_limiter",
]


class RateLimiter(Protocol):
    def when(self, key: str) -> float:
        """Seconds to wait before ``key`` is retried; counts one more failure."""
        ...

    def forget(self, key: str) -> None:
        """``key`` succeeded: its failures no longer count."""
        ...

    def retries(self, key: str) -> int:
        """Failures of ``key`` since it was last forgotten."""
        ...


class ItemExponentialRateLimiter:
    """``base_delay * 2**failures``, at most ``max_delay``."""

    def __init__(self, base_delay: float = 0.005, max_delay: float = 1000.0) -> None:
        if base_delay <= 0 or max_delay < base_delay:
            raise ValueError("need 0 < base_delay <= max_delay")
        self.base_delay = base_delay
        self.max_delay = max_delay
        self._failures: dict[str, int] = {}

    def when(self, key: str) -> float:
        failures = self._failures.get(key, 0)
        self._failures[key] = failures + 1
        if failures >= 64:  # 2**64 * anything positive is past any sane maximum
            return self.max_delay
        delay: float = self.base_delay * float(2**failures)
        return min(delay, self.max_delay)

    def forget(self, key: str) -> None:
        self._failures.pop(key, None)

    def retries(self, key: str) -> int:
        return self._failures.get(key, 0)


class BucketRateLimiter:
    """One token per retry from a bucket refilled at ``qps`` and holding ``burst``; no per-key state."""

    def __init__(self, qps: float = 10.0, burst: int = 100, clock: Clock = SYSTEM_CLOCK) -> None:
        self.clock = clock
        self._bucket = TokenBucket(qps, burst, clock.monotonic)
        self.qps = self._bucket.qps
        self.burst = self._bucket.burst

    def when(self, key: str) -> float:
        return self._bucket.reserve()

    def forget(self, key: str) -> None:
        return None

    def retries(self, key: str) -> int:
        return 0


class MaxOfRateLimiter:
    """The longest delay any of ``limiters`` asks for."""

    def __init__(self, *limiters: RateLimiter) -> None:
        if not limiters:
            raise ValueError("need at least one rate limiter")
        self.limiters = limiters

    def when(self, key: str) -> float:
        return max(limiter.when(key) for limiter in self.limiters)

    def forget(self, key: str) -> None:
        for limiter in self.limiters:
            limiter.forget(key)

    def retries(self, key: str) -> int:
        return max(limiter.retries(key) for limiter in self.limiters)


def default_rate_limiter(clock: Clock = SYSTEM_CLOCK) -> RateLimiter:
    """controller-runtime's default: per-key 5 ms .. 1000 s, overall 10 retries/s, burst 100."""
    return MaxOfRateLimiter(ItemExponentialRateLimiter(0.005, 1000.0), BucketRateLimiter(10.0, 100, clock))
