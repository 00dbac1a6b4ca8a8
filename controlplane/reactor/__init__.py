"""The reactor: informer events in, reconciles out -- the loop every controller runs on.

A controller is a reconcile function over string keys (``name`` or ``namespace/name``).
Informer handlers call :meth:`Controller.enqueue`; the :class:`WorkQueue` keeps each key at
most once, hands it to one worker at a time (a key added while it is being reconciled is
queued again when that reconcile ends, never run twice at once), and delays retries with a
per-key exponential backoff bounded by an overall token bucket. A reconcile ends in one of
four ways:

* success: the key's backoff is forgotten;
* :class:`Result` with ``requeue_after``: the key comes back after that delay;
* a *temporary* failure (conflicts, throttling, apiserver unavailable, a
  :class:`TemporaryError`): the key is retried with backoff;
* a *permanent* failure (the apiserver refused what was sent, a :class:`PermanentError`, a
  bug): logged, counted, a Warning Event recorded on the object when the error names one;
  the key is not retried until a watched object changes again.

:mod:`.metrics` exposes the workqueue and controller-runtime metric families under their
upstream names. Layering: controllers (``controlplane.manager`` and the other processes)
import the reactor; the reactor imports only :mod:`koordinator.kube`.
"""

from controlplane.reactor.controller import Controller, Reconciler, Result
from controlplane.reactor.errors import PermanentError, ReconcileError, TemporaryError, is_temporary
from controlplane.reactor.metrics import ReactorMetrics
from controlplane.reactor.queue import WorkQueue
from controlplane.reactor.ratelimit import (
    BucketRateLimiter,
    ItemExponentialRateLimiter,
    MaxOfRateLimiter,
    RateLimiter,
    default_rate_limiter,
)
from controlplane.reactor.tasks import cancel_and_wait

__all__ = [
    "BucketRateLimiter",
    "Controller",
    "ItemExponentialRateLimiter",
    "MaxOfRateLimiter",
    "PermanentError",
    "RateLimiter",
    "ReactorMetrics",
    "ReconcileError",
    "Reconciler",
    "Result",
    "TemporaryError",
    "WorkQueue",
    "cancel_and_wait",
    "default_rate_limiter",
    "is_temporary",
]
