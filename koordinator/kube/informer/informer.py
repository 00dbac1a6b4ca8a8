"""One shared informer per watched collection: list, then watch, forever.

The informer keeps only ``key -> resourceVersion`` for what it has seen; each consumer
keeps its own :class:`~koordinator.kube.informer.store.Store` of records produced by its
transform (decoded dicts by default, or compact records), with its own indexers and
handlers. The cycle:

1. LIST in chunks (``limit``/``continue``), yielding to the loop between chunks, with the
   garbage collector paused. New keys are *added*, changed resourceVersions *updated*,
   keys no longer listed *deleted* with a :class:`Tombstone` (the final state was missed).
   Unchanged objects raise no event, so a relist never duplicates one.
2. WATCH from the list's resourceVersion with bookmarks; bookmarks and events advance it.
   A watch that ends is re-opened from there; a lost connection is retried with backoff;
   410 Gone goes back to step 1.

Objects of built-in kinds reach consumers without ``metadata.managedFields``, which no
consumer reads and which would be half of what a sync decodes (they are left out of the
JSON before decoding, see :mod:`koordinator.kube.managedfields`).

Consumers added while the informer runs trigger a relist that fills only their store.
Handlers are plain callables run on the loop; they must not block (enqueue work instead).
An exception in a handler is logged and does not stop the informer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from koordinator.kube.client import ApiClient
from koordinator.kube.clock import SYSTEM_CLOCK, Clock
from koordinator.kube.errors import ApiConnectionError, ApiError, GoneError, KubeError
from koordinator.kube.informer import gcpause
from koordinator.kube.informer.store import IndexFunc, Store
from koordinator.kube.resources import BUILTIN, Resource, object_key
from koordinator.kube.retry import RetryPolicy
from koordinator.kube.watch import ADDED, BOOKMARK, DELETED, MODIFIED

log = logging.getLogger(__name__)

Obj = dict[str, Any]
T = TypeVar("T")
_YIELD_EVERY = 200
#: Objects per LIST page: twice client-go's 500. For 50000 pods the apiserver allocates a
#: sixth less (0.67 GB instead of 0.81 GB; with that many objects cached each of its
#: garbage collections costs it about 3 CPU seconds, and one comes every 1.6 GB or so)
#: and spends a tenth less CPU; the client holds one decoded page at a time, about 40 MiB
#: more at the peak.
DEFAULT_PAGE_SIZE = 1000
#: a watch that ends sooner than this without a single event counts as a failure (backoff)
_QUICK_WATCH_S = 1.0


@dataclass(frozen=True, slots=True)
class Tombstone(Generic[T]):
    """An object deleted while the informer was not watching: ``last`` is its last known record."""

    key: str
    last: T | None


def _identity(obj: Obj) -> Any:
    return obj


class Consumer(Generic[T]):
    """One consumer's view of an informer: its store, indexers and handlers."""

    def __init__(
        self,
        name: str,
        transform: Callable[[Obj], T],
        indexers: Mapping[str, IndexFunc[T]] | None,
        on_add: Callable[[T], None] | None,
        on_update: Callable[[T, T], None] | None,
        on_delete: Callable[[T | Tombstone[T]], None] | None,
        resync_period: float | None,
        refresh: Callable[[Obj, T], T] | None = None,
    ) -> None:
        self.name = name
        self.transform = transform
        self.refresh = refresh
        self.store: Store[T] = Store(indexers)
        self.on_add = on_add
        self.on_update = on_update
        self.on_delete = on_delete
        self.resync_period = resync_period
        self.synced = asyncio.Event()

    def _call(self, handler: Callable[..., None] | None, *args: Any) -> None:
        if handler is None:
            return
        try:
            handler(*args)
        except Exception:
            log.exception("informer consumer %s: handler failed", self.name)

    def upsert(self, key: str, obj: Obj) -> None:
        try:
            refresh = self.refresh
            previous = self.store.get(key) if refresh is not None else None
            record = self.transform(obj) if refresh is None or previous is None else refresh(obj, previous)
        except Exception:
            log.exception("informer consumer %s: transform failed for %s", self.name, key)
            return
        old = self.store.put(key, record)
        if old is None:
            self._call(self.on_add, record)
        else:
            self._call(self.on_update, old, record)

    def delete(self, key: str, final: Obj | None) -> None:
        old = self.store.remove(key)
        if final is None:
            self._call(self.on_delete, Tombstone(key, old))
            return
        try:
            record = self.transform(final)
        except Exception:
            log.exception("informer consumer %s: transform failed for %s", self.name, key)
            record = old  # type: ignore[assignment]
        if record is None:
            self._call(self.on_delete, Tombstone(key, old))
        else:
            self._call(self.on_delete, record)

    def resync(self) -> None:
        for _, record in self.store.items():
            self._call(self.on_update, record, record)


class Informer:
    """List-and-watch of one collection, shared by every consumer in the process."""

    def __init__(
        self,
        client: ApiClient,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        page_size: int = DEFAULT_PAGE_SIZE,
        watch_timeout: tuple[int, int] = (300, 600),
        backoff: RetryPolicy | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.client = client
        self.resource = resource
        self.strip_managed_fields = resource in BUILTIN
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.page_size = page_size
        self.watch_timeout = watch_timeout
        self.backoff = backoff or RetryPolicy(attempts=1_000_000, base_delay=0.5, max_delay=30.0)
        self.clock = clock
        self.resource_version = ""
        self.relists = 0
        self._known: dict[str, str] = {}
        self._consumers: list[Consumer[Any]] = []
        self._fresh: list[Consumer[Any]] = []
        self._synced = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._watch_task: asyncio.Task[int] | None = None
        self._resync_tasks: list[asyncio.Task[None]] = []
        self._relist_requested = False
        self._rng = random.Random()

    def __repr__(self) -> str:
        return (
            f"Informer({self.resource}, namespace={self.namespace!r}, "
            f"labels={self.label_selector!r}, fields={self.field_selector!r})"
        )

    # --- consumers --------------------------------------------------------------------

    def add_consumer(
        self,
        transform: Callable[[Obj], T] = _identity,
        *,
        name: str = "",
        indexers: Mapping[str, IndexFunc[T]] | None = None,
        on_add: Callable[[T], None] | None = None,
        on_update: Callable[[T, T], None] | None = None,
        on_delete: Callable[[T | Tombstone[T]], None] | None = None,
        resync_period: float | None = None,
        refresh: Callable[[Obj, T], T] | None = None,
    ) -> Consumer[T]:
        """Register a consumer. Its transform turns each decoded object into the record it stores.

        ``refresh(obj, previous)``, when given, builds the record of a changed object from its
        stored one instead (it may reuse what the change cannot have touched); it must return
        what ``transform(obj)`` would.

        Objects passed to the default (identity) transform are shared between consumers: treat
        them as read-only. A consumer added to a running informer is filled by a relist.
        The transform must not return ``None``: a stored ``None`` reads as "not known", so such
        a consumer gets ``on_add`` for every change and never ``on_update`` (store a small
        record, e.g. the resourceVersion, when only the events matter).
        """
        consumer: Consumer[T] = Consumer(
            name or f"consumer-{len(self._consumers)}",
            transform,
            indexers,
            on_add,
            on_update,
            on_delete,
            resync_period,
            refresh,
        )
        self._consumers.append(consumer)
        if self._task is not None:
            self._fresh.append(consumer)
            self._request_relist()
        if resync_period and self._task is not None:
            self._resync_tasks.append(asyncio.create_task(self._resync_loop(consumer)))
        return consumer

    @property
    def consumers(self) -> list[Consumer[Any]]:
        return list(self._consumers)

    # --- lifecycle ----------------------------------------------------------------------

    @property
    def has_synced(self) -> bool:
        """Every consumer holds a complete LIST (a consumer added late waits for its relist)."""
        return self._synced.is_set() and all(c.synced.is_set() for c in self._consumers)

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=repr(self))
            self._resync_tasks = [
                asyncio.create_task(self._resync_loop(c)) for c in self._consumers if c.resync_period
            ]

    async def stop(self) -> None:
        tasks = [t for t in (self._task, *self._resync_tasks) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._task = None
        self._resync_tasks = []

    async def wait_synced(self) -> None:
        """Wait until every consumer holds a complete LIST (bound it with ``asyncio.timeout``).

        Consumers added while waiting are waited for too. Raises the informer loop's own
        failure if it died before syncing.
        """
        while not self.has_synced:
            if self._task is None:
                raise RuntimeError(f"{self!r} was never started")
            pending = next((c for c in self._consumers if not c.synced.is_set()), None)
            event = pending.synced if pending is not None else self._synced
            waiter = asyncio.ensure_future(event.wait())
            try:
                await asyncio.wait({waiter, self._task}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                waiter.cancel()
            if not event.is_set():
                self._task.result()
                raise RuntimeError(f"{self!r} stopped before syncing")

    def _request_relist(self) -> None:
        self._relist_requested = True
        if self._watch_task is not None:
            self._watch_task.cancel()

    # --- the loop -------------------------------------------------------------------------

    async def _run(self) -> None:
        failures = 0
        need_list = True
        while True:
            try:
                if need_list or self._relist_requested:
                    self._relist_requested = False
                    await self._list()
                    need_list = False
                opened = self.clock.monotonic()
                self._watch_task = asyncio.create_task(self._watch())
                try:
                    events = await self._watch_task
                except asyncio.CancelledError:
                    if not self._relist_requested:
                        raise
                    events = 0
                finally:
                    self._watch_task = None
                if (
                    events == 0
                    and self.clock.monotonic() - opened < _QUICK_WATCH_S
                    and not self._relist_requested
                ):
                    # an apiserver that ends every watch at once must not be hammered
                    failures += 1
                    await self.clock.sleep(self.backoff.delay(failures))
                else:
                    failures = 0
            except GoneError:
                log.info("%r: resourceVersion %s is gone; relisting", self, self.resource_version)
                need_list = True
            except (ApiConnectionError, ApiError) as exc:
                failures += 1
                delay = self.backoff.delay(failures)
                log.warning("%r: %s; retrying in %.1fs", self, exc, delay)
                await self.clock.sleep(delay)
            except KubeError as exc:
                failures += 1
                delay = self.backoff.delay(failures)
                log.warning("%r: %s; relisting in %.1fs", self, exc, delay)
                need_list = True
                await self.clock.sleep(delay)

    def _typed(self, obj: Obj) -> Obj:
        if "kind" not in obj:
            obj["kind"] = self.resource.kind
            obj["apiVersion"] = self.resource.api_version
        return obj

    def _dispatch_upsert(self, key: str, obj: Obj, consumers: Iterable[Consumer[Any]]) -> None:
        for consumer in consumers:
            consumer.upsert(key, obj)

    async def _list(self) -> None:
        fresh = list(self._fresh)
        self._fresh.clear()
        # Consumers that already hold the informer's view get the difference only (also after a
        # first LIST that failed half-way); consumers added while running get everything.
        established = [c for c in self._consumers if c not in fresh]
        seen: set[str] = set()
        resource_version = ""
        with gcpause.paused():
            async for page in self.client.list_pages(
                self.resource,
                self.namespace,
                label_selector=self.label_selector,
                field_selector=self.field_selector,
                page_size=self.page_size,
                strip_managed_fields=self.strip_managed_fields,
            ):
                # the hot loop of a sync: 50000 objects go through here, so it stays flat
                known, kind, api_version = self._known, self.resource.kind, self.resource.api_version
                for n, obj in enumerate(page.get("items") or ()):
                    if "kind" not in obj:  # list items of built-in kinds come without it
                        obj["kind"] = kind
                        obj["apiVersion"] = api_version
                    meta = obj["metadata"]
                    namespace = meta.get("namespace")
                    key = f"{namespace}/{meta['name']}" if namespace else meta["name"]
                    seen.add(key)
                    rv = meta.get("resourceVersion", "")
                    if known.get(key) != rv:
                        known[key] = rv
                        for consumer in established:
                            consumer.upsert(key, obj)
                    for consumer in fresh:
                        consumer.upsert(key, obj)
                    if n % _YIELD_EVERY == _YIELD_EVERY - 1:
                        await asyncio.sleep(0)
                resource_version = str((page.get("metadata") or {}).get("resourceVersion") or "")
                # let go of the page before the next one is decoded: what the consumers did
                # not keep is freed now, so only one decoded page is ever alive
                del page
                await asyncio.sleep(0)
        for key in [k for k in self._known if k not in seen]:
            del self._known[key]
            for consumer in established:
                consumer.delete(key, None)
        self.resource_version = resource_version
        self.relists += 1
        # consumers added during this LIST saw only part of it: they wait for the relist they asked for
        for consumer in (*established, *fresh):
            consumer.synced.set()
        self._synced.set()

    async def _watch(self) -> int:
        """Watch until the stream ends; returns how many events (bookmarks included) arrived."""
        low, high = self.watch_timeout
        timeout = self._rng.randint(low, high)
        stream = await self.client.watch(
            self.resource,
            self.namespace,
            resource_version=self.resource_version,
            allow_bookmarks=True,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            timeout_seconds=timeout,
            strip_managed_fields=self.strip_managed_fields,
        )
        received = 0
        async with stream:
            async for event in stream:
                received += 1
                obj = event.object
                rv = event.resource_version
                if event.type == BOOKMARK:
                    if rv:
                        self.resource_version = rv
                    continue
                obj = self._typed(obj)
                key = object_key(obj)
                if event.type in (ADDED, MODIFIED):
                    if self._known.get(key) != rv:
                        self._known[key] = rv
                        self._dispatch_upsert(key, obj, self._consumers)
                elif event.type == DELETED:
                    if self._known.pop(key, None) is not None:
                        for consumer in self._consumers:
                            consumer.delete(key, obj)
                else:
                    log.warning("%r: ignoring watch event of type %s", self, event.type)
                    continue
                if rv:
                    self.resource_version = rv
        return received

    async def _resync_loop(self, consumer: Consumer[Any]) -> None:
        period = consumer.resync_period
        if not period:
            return
        await self._synced.wait()
        while True:
            await self.clock.sleep(period)
            consumer.resync()
