"""DefaultPreBind (PreBind): sends the in-memory changes every PreBind plug-in made to the pod
(the ``resource-status``, ``device-allocated`` and ``reservation-allocated`` annotations,
gang labels ...) as one merge patch, as Koordinator's ``defaultprebind`` does.

A patch the apiserver answers with a conflict, or loses on the way, is sent again (a merge
patch of metadata is safe to repeat), a few times; a pod the answer shows being deleted
is not bound. Without this plug-in in the profile the framework still sends the one patch,
without these retries: a profile that drops it must not silently lose the allocations
(upstream would).
"""

from __future__ import annotations

import asyncio
from typing import Any

from controlplane.scheduler.podinfo import PodInfo
from koordinator.kube import resources as res
from koordinator.kube.client import ApiClient
from koordinator.kube.errors import ApiConnectionError, ConflictError

NAME = "DefaultPreBind"
#: tries of one patch (the client itself already waits out 429s)
ATTEMPTS = 3
RETRY_DELAY_S = 0.05


class PodDeletingError(Exception):
    """The patched pod is being deleted: binding it would be wasted."""


class DefaultPreBind:
    NAME = NAME

    async def apply_patch(self, client: ApiClient, pod: PodInfo, body: dict[str, Any]) -> None:
        """Patch ``pod`` with ``body``; raises KubeError, or :class:`PodDeletingError`."""
        for attempt in range(1, ATTEMPTS + 1):
            try:
                patched = await client.patch(res.PODS, pod.name, body, pod.namespace)
            except (ConflictError, ApiConnectionError):
                if attempt == ATTEMPTS:
                    raise
                await asyncio.sleep(RETRY_DELAY_S * attempt)
                continue
            if (patched.get("metadata") or {}).get("deletionTimestamp"):
                raise PodDeletingError(f"pod {pod.key} is being deleted")
            return
