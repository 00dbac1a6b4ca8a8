"""The process-wide informer registry: one :class:`Informer` per watched collection.

Every controller and plug-in asks the factory for the informer of a resource (with the
same namespace and selectors) and gets the shared one, then adds its own consumer.
:meth:`InformerFactory.wait_for_sync` is the initial-sync barrier; once every informer has
synced, the factory freezes the garbage collector's view of the caches (see
:mod:`koordinator.kube.informer.gcpause`).
"""

from __future__ import annotations

import asyncio
from typing import Any

from koordinator.kube.client import ApiClient
from koordinator.kube.clock import SYSTEM_CLOCK, Clock
from koordinator.kube.informer import gcpause
from koordinator.kube.informer.informer import DEFAULT_PAGE_SIZE, Informer
from koordinator.kube.resources import Resource

InformerKey = tuple[Resource, str | None, str | None, str | None]


class InformerFactory:
    def __init__(
        self,
        client: ApiClient,
        *,
        page_size: int = DEFAULT_PAGE_SIZE,
        freeze_after_sync: bool = True,
        clock: Clock = SYSTEM_CLOCK,
        **informer_options: Any,
    ) -> None:
        self.client = client
        self.page_size = page_size
        self.freeze_after_sync = freeze_after_sync
        self.clock = clock
        self.informer_options = informer_options
        self._informers: dict[InformerKey, Informer] = {}
        self._started = False
        self._frozen = False

    def informer(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> Informer:
        """The shared informer for this collection (created on first request)."""
        key = (resource, namespace or None, label_selector or None, field_selector or None)
        found = self._informers.get(key)
        if found is None:
            found = Informer(
                self.client,
                resource,
                namespace=namespace,
                label_selector=label_selector,
                field_selector=field_selector,
                page_size=self.page_size,
                clock=self.clock,
                **self.informer_options,
            )
            self._informers[key] = found
            if self._started:
                found.start()
        return found

    @property
    def informers(self) -> list[Informer]:
        return list(self._informers.values())

    def start(self) -> None:
        """Start every informer created so far; later ones start as they are created."""
        self._started = True
        for informer in self._informers.values():
            informer.start()

    async def wait_for_sync(self) -> None:
        """The initial-sync barrier: every informer has delivered a complete LIST to every consumer.

        Bound it with ``asyncio.timeout``; an informer that died raises its failure here.
        """
        while True:
            informers = list(self._informers.values())
            await asyncio.gather(*(i.wait_synced() for i in informers))
            # informers (or consumers) created while waiting are part of the barrier too
            if len(self._informers) == len(informers) and all(i.has_synced for i in informers):
                break
        if self.freeze_after_sync and not self._frozen:
            gcpause.freeze()
            self._frozen = True

    async def stop(self) -> None:
        await asyncio.gather(*(i.stop() for i in self._informers.values()))
        self._started = False
