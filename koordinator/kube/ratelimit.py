"""The one token bucket: refilled at ``qps``, holding up to ``burst`` tokens.

The same model as client-go's ``flowcontrol.NewTokenBucketRateLimiter`` (golang.org/x/time/rate
underneath): a request takes one token, waiting for the refill when the bucket is empty, and
waiters are served in order. Users: the API client's request limit, the koordlet's eviction
and pod-refresh limits, and the work queue's overall retry limit
(:class:`controlplane.reactor.ratelimit.BucketRateLimiter`, through :meth:`TokenBucket.reserve`).
"""

from __future__ import annotations

import asyncio

from koordinator.kube.clock import SYSTEM_CLOCK, Now


class TokenBucket:
    def __init__(self, qps: float, burst: int, clock: Now = SYSTEM_CLOCK.monotonic) -> None:
        if qps <= 0:
            raise ValueError(f"qps must be positive, got {qps}")
        if burst < 1:
            raise ValueError(f"burst must be at least 1, got {burst}")
        self.qps = float(qps)
        self.burst = int(burst)
        self.clock = clock
        self._tokens = float(burst)
        self._stamp = clock()
        self._lock = asyncio.Lock()

    def _refill(self, now: float) -> None:
        self._tokens = min(self.burst, self._tokens + (now - self._stamp) * self.qps)
        self._stamp = now

    def try_acquire(self) -> bool:
        """Take a token if one is available now."""
        self._refill(self.clock())
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False

    def reserve(self) -> float:
        """Take a token now, going into debt when none is free; returns the seconds until it is due.

        ``rate.Limiter.Reserve().Delay()``: the caller acts after the returned delay instead of waiting here.
        """
        self._refill(self.clock())
        self._tokens -= 1.0
        return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    async def acquire(self) -> float:
        """Take a token, waiting for it; returns the seconds waited."""
        waited = 0.0
        async with self._lock:
            while True:
                self._refill(self.clock())
                if self._tokens >= 1.0:
                    self._tokens -= 1.0
                    return waited
                delay = (1.0 - self._tokens) / self.qps
                waited += delay
                await asyncio.sleep(delay)
