"""A digest of a pod's spec, so a changed pod's record can keep what its spec gave it.

A pod's spec barely changes after creation, and a binding, the change every scheduled pod
sees, only sets ``nodeName``. The pod informer's consumers (the scheduler's
:class:`~controlplane.scheduler.podinfo.PodInfo`, ElasticQuota's ``QuotaPod``) compare the
digest of a changed pod's spec with the one stored on its record and, when equal, take the
spec-derived fields from the record instead of parsing the spec again.

The consumers of one informer are handed the same decoded object one after the other, so
the last digest is kept with its spec: the second consumer does not serialise it again.
Decoded objects are read-only (see :mod:`koordinator.kube.informer.informer`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

__all__ = ["spec_digest"]

#: the last spec digested (held, so its id cannot be reused) and its digest
_last: tuple[Mapping[str, Any] | None, int | None] = (None, None)


def spec_digest(spec: Mapping[str, Any]) -> int | None:
    """The digest of ``spec`` without ``nodeName``; None when it does not serialise (a
    None digest never matches, so the record is built again)."""
    global _last
    if spec is _last[0]:
        return _last[1]
    rest = dict(spec)
    rest.pop("nodeName", None)
    try:
        digest: int | None = hash(orjson.dumps(rest))
    except TypeError:
        digest = None
    _last = (spec, digest)
    return digest
