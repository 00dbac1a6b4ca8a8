"""The async API client: every verb over aiohttp, objects as plain dicts (orjson).

One :class:`ApiClient` per process shares one connection pool and one client-side rate
limit (token bucket, ``qps``/``burst``). Failures become typed errors
(:mod:`koordinator.kube.errors`). Retries, with exponential backoff and jitter:

* 429 is retried for every verb, honouring ``Retry-After``, except an eviction refused by
  a PodDisruptionBudget, which is the caller's decision;
* 5xx replies and connections lost mid-request are retried only for idempotent calls
  (GET, LIST, WATCH, PUT, DELETE, server-side apply);
* a connection that could not be opened is retried for every verb (nothing was sent).

A 401 makes the token source fetch a fresh token once before the error is raised.

Writes can be fenced: :meth:`ApiClient.with_write_guard` gives a view of the client (same
connection pool, rate limit and credentials) that calls a guard right before sending each
mutating request (POST, PUT, PATCH, DELETE), retries included; a guard that raises
(:class:`~koordinator.kube.errors.NotLeaderError`) keeps the request from being sent. The
manager's controllers write through such a view, fenced by the leader lease.
"""

from __future__ import annotations

import asyncio
import copy
import enum
import ssl as ssl_module
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import aiohttp
import orjson

from koordinator.kube import http1, paging
from koordinator.kube.config import ClusterConfig
from koordinator.kube.errors import (
    AlreadyExistsError,
    ApiConnectionError,
    ApiError,
    TooManyRequestsError,
    UnauthorizedError,
    error_from_response,
)
from koordinator.kube.ratelimit import TokenBucket
from koordinator.kube.resources import NAMESPACES, PODS, Resource
from koordinator.kube.retry import RetryPolicy
from koordinator.kube.watch import WatchStream

Obj = dict[str, Any]
JSON = "application/json"
DISRUPTION_BUDGET_CAUSE = "DisruptionBudget"
_RETRY_CODES = frozenset({500, 502, 503, 504})
_READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})

#: called right before each mutating request is sent; raises to keep it from being sent
WriteGuard = Callable[[], None]


class PatchType(enum.StrEnum):
    """The four patch media types the apiserver accepts."""

    JSON = "application/json-patch+json"
    MERGE = "application/merge-patch+json"
    STRATEGIC = "application/strategic-merge-patch+json"
    APPLY = "application/apply-patch+yaml"


class PropagationPolicy(enum.StrEnum):
    ORPHAN = "Orphan"
    BACKGROUND = "Background"
    FOREGROUND = "Foreground"


@dataclass(frozen=True, slots=True)
class Preconditions:
    """Delete only if the object still has this uid and/or resourceVersion (409 otherwise)."""

    uid: str | None = None
    resource_version: str | None = None

    def as_dict(self) -> dict[str, str]:
        out = {}
        if self.uid:
            out["uid"] = self.uid
        if self.resource_version:
            out["resourceVersion"] = self.resource_version
        return out


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        raise ValueError("object has no metadata")
    return meta


def _query(**params: object) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in params.items():
        if value is None or value == "":
            continue
        if isinstance(value, bool):
            out[key] = "true" if value else "false"
        else:
            out[key] = str(value)
    return out


def is_pdb_refusal(error: ApiError) -> bool:
    """True for the 429 an eviction gets when a PodDisruptionBudget forbids it."""
    return isinstance(error, TooManyRequestsError) and any(
        c.reason == DISRUPTION_BUDGET_CAUSE for c in error.causes
    )


@dataclass(frozen=True, slots=True)
class _Reply:
    status: int
    data: bytes
    retry_after: str | None
    #: the open response of a streamed 2xx reply (its body not read)
    stream: aiohttp.ClientResponse | None = None


class _ConnectError(Exception):
    """The connection could not be opened: nothing was sent."""


class _LostError(Exception):
    """The exchange broke after the request went out."""


class _SessionPool:
    """The one aiohttp session (connection pool) a client and its guarded views share."""

    def __init__(self, ssl: ssl_module.SSLContext | None, max_connections: int) -> None:
        self._ssl = ssl
        self._max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None

    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(
                ssl=self._ssl if self._ssl is not None else False, limit=self._max_connections
            )
            self._session = aiohttp.ClientSession(
                connector=connector, json_serialize=lambda o: orjson.dumps(o).decode()
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


class ApiClient:
    """Async Kubernetes API client over plain dicts.

    ``timeout`` bounds each non-watch request (seconds). ``fast_unary`` sends the requests
    that are not watches or streams over :mod:`koordinator.kube.http1` (a third of aiohttp's
    CPU per request) instead of aiohttp. Use as ``async with`` or call :meth:`close`.
    ``write_guard`` is None except on views made by :meth:`with_write_guard`.
    """

    def __init__(
        self,
        config: ClusterConfig,
        *,
        qps: float = 50.0,
        burst: int = 100,
        timeout: float = 60.0,
        retry: RetryPolicy | None = None,
        max_connections: int = 200,
        fast_unary: bool = False,
    ) -> None:
        self.config = config
        self.limiter = TokenBucket(qps, burst)
        self.timeout = timeout
        self.retry = retry or RetryPolicy()
        self.write_guard: WriteGuard | None = None
        self._pool = _SessionPool(config.ssl_context(), max_connections)
        #: unary requests over the small HTTP/1.1 client (watches stay on aiohttp)
        self._http1 = (
            http1.Http1Pool(
                config.server,
                config.ssl_context(),
                server_hostname=config.tls_server_name,
                max_connections=max_connections,
            )
            if fast_unary
            else None
        )
        #: False on a view: the client it was made from owns (and closes) the pool
        self._owns_pool = True

    # --- plumbing ----------------------------------------------------------------

    def with_write_guard(self, guard: WriteGuard) -> ApiClient:
        """A view of this client whose mutating requests call ``guard`` right before each is sent.

        The view shares this client's connection pool, rate limit, retry policy and
        credentials; reads are not guarded. Closing the view closes nothing: close this client.
        """
        view = copy.copy(self)
        view.write_guard = guard
        view._owns_pool = False
        return view

    def _get_session(self) -> aiohttp.ClientSession:
        return self._pool.session()

    async def close(self) -> None:
        if self._owns_pool:
            await self._pool.close()
            if self._http1 is not None:
                await self._http1.close()

    async def __aenter__(self) -> ApiClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _headers(self, content_type: str | None) -> dict[str, str]:
        headers = {"Accept": JSON, "User-Agent": self.config.user_agent, **self.config.extra_headers}
        if content_type:
            headers["Content-Type"] = content_type
        if self.config.token is not None:
            token = await self.config.token.token()
            if token:
                headers["Authorization"] = f"Bearer {token}"
        return headers

    async def _exchange(
        self,
        method: str,
        path: str,
        params: Mapping[str, str] | None,
        body: bytes | None,
        headers: dict[str, str],
        stream: bool,
        read_timeout: float | None,
    ) -> _Reply:
        """One request and its reply; _ConnectError when nothing was sent, _LostError when the
        exchange broke after it was."""
        if self._http1 is not None and not stream:
            target = f"{path}?{urlencode(params)}" if params else path
            try:
                reply = await self._http1.request(method, target, headers, body, self.timeout)
            except http1.ConnectError as exc:
                raise _ConnectError(str(exc)) from exc
            except http1.ExchangeError as exc:
                raise _LostError(str(exc)) from exc
            return _Reply(reply.status, reply.body, reply.headers.get("retry-after"))
        timeout = (
            aiohttp.ClientTimeout(total=None, sock_connect=min(self.timeout, 30.0), sock_read=read_timeout)
            if stream
            else aiohttp.ClientTimeout(total=self.timeout)
        )
        try:
            response = await self._get_session().request(
                method,
                self.config.server + path,
                params=params,
                data=body,
                headers=headers,
                timeout=timeout,
                server_hostname=self.config.tls_server_name,
            )
        except aiohttp.ClientConnectorError as exc:
            raise _ConnectError(str(exc)) from exc
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise _LostError(repr(exc)) from exc
        ok = 200 <= response.status < 300
        if stream and ok:
            return _Reply(response.status, b"", None, response)
        try:
            data = await response.read()
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            if ok:
                raise _LostError(f"reading reply: {exc!r}") from exc
            data = b""
        finally:
            response.release()
        return _Reply(response.status, data, response.headers.get("Retry-After"))

    async def _send(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: bytes | None = None,
        content_type: str | None = None,
        idempotent: bool,
        stream: bool = False,
        read_timeout: float | None = None,
        retry_pdb: bool = True,
    ) -> _Reply:
        """Send with retries; returns a 2xx reply (with its open response when ``stream``)."""
        refreshed_token = False
        attempt = 0
        while True:
            attempt += 1
            await self.limiter.acquire()
            headers = await self._headers(content_type)
            if self.write_guard is not None and method not in _READ_METHODS:
                # last, after every wait: the guard's answer must hold when the request leaves
                self.write_guard()
            error: ApiError | ApiConnectionError
            retryable = False
            retry_after: float | None = None
            try:
                reply = await self._exchange(method, path, params, body, headers, stream, read_timeout)
            except _ConnectError as exc:
                error = ApiConnectionError(f"{method} {path}: cannot connect: {exc}")
                retryable = True
            except _LostError as exc:
                error = ApiConnectionError(f"{method} {path}: {exc}")
                retryable = idempotent
            else:
                if 200 <= reply.status < 300:
                    return reply
                error = error_from_response(reply.status, reply.data, reply.retry_after)
                retry_after = error.retry_after
                if (
                    isinstance(error, UnauthorizedError)
                    and self.config.token is not None
                    and not refreshed_token
                ):
                    self.config.token.invalidate()
                    refreshed_token = True
                    attempt -= 1
                    continue
                if reply.status == 429:
                    retryable = retry_pdb or not is_pdb_refusal(error)
                elif reply.status in _RETRY_CODES:
                    retryable = idempotent
            if not retryable or attempt >= self.retry.attempts:
                raise error
            await asyncio.sleep(self.retry.delay(attempt, retry_after))

    async def _call(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = JSON,
        idempotent: bool,
        retry_pdb: bool = True,
    ) -> Obj:
        raw = body if body is None or isinstance(body, bytes) else orjson.dumps(body)
        reply = await self._send(
            method,
            path,
            params=params,
            body=raw,
            content_type=content_type if raw is not None else None,
            idempotent=idempotent,
            retry_pdb=retry_pdb,
        )
        data = reply.data
        if not data:
            return {}
        try:
            decoded = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise ApiConnectionError(f"{method} {path}: reply is not JSON: {data[:200]!r}") from exc
        if not isinstance(decoded, dict):
            raise ApiConnectionError(f"{method} {path}: reply is not a JSON object")
        return decoded

    async def request(
        self, method: str, path: str, *, params: Mapping[str, str] | None = None, body: Any = None
    ) -> Obj:
        """A raw call on any path (``/version``, ``/apis``, aggregated APIs); GET is retried as idempotent."""
        return await self._call(
            method, path, params=params, body=body, idempotent=method in ("GET", "PUT", "DELETE")
        )

    # --- read ----------------------------------------------------------------------

    async def get(
        self, resource: Resource, name: str, namespace: str | None = None, *, subresource: str | None = None
    ) -> Obj:
        return await self._call("GET", resource.path(namespace, name, subresource), idempotent=True)

    async def list(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
        resource_version: str | None = None,
        resource_version_match: str | None = None,
        timeout_seconds: int | None = None,
    ) -> Obj:
        """One LIST call (one page when ``limit`` is set; follow ``metadata.continue``)."""
        params = _query(
            labelSelector=label_selector,
            fieldSelector=field_selector,
            limit=limit,
            resourceVersion=resource_version,
            resourceVersionMatch=resource_version_match,
            timeoutSeconds=timeout_seconds,
            **{"continue": continue_token},
        )
        return await self._call("GET", resource.path(namespace), params=params, idempotent=True)

    async def list_pages(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        page_size: int = 500,
        resource_version: str | None = None,
        prefetch: bool = True,
        strip_managed_fields: bool = False,
    ) -> AsyncIterator[Obj]:
        """Yield each page of a paginated LIST; the last page's ``metadata.resourceVersion`` is the list's.

        ``strip_managed_fields`` leaves the managedFields of built-in objects undecoded
        (:mod:`koordinator.kube.managedfields`), for callers that never read them.

        With ``prefetch`` the next page is requested as soon as the current page's header
        (which carries the continue token) has arrived, so the apiserver encodes the next
        page while this one is still downloading and being decoded (see
        :mod:`koordinator.kube.paging`). A continue token that expired mid-way raises
        :class:`~koordinator.kube.errors.GoneError`; restart the listing.
        """
        params = _query(labelSelector=label_selector, fieldSelector=field_selector, limit=page_size)
        first = dict(params, **_query(resourceVersion=resource_version))
        async for page in paging.pages(
            self, resource.path(namespace), first, params, prefetch, strip_managed_fields
        ):
            yield page

    async def list_all(self, resource: Resource, namespace: str | None = None, **kwargs: Any) -> Obj:
        """Every page of a LIST merged into one list object."""
        items: list[Obj] = []
        last: Obj = {}
        async for page in self.list_pages(resource, namespace, **kwargs):
            items.extend(page.get("items") or [])
            last = page
        meta = dict(last.get("metadata") or {})
        meta.pop("continue", None)
        meta.pop("remainingItemCount", None)
        return {**last, "metadata": meta, "items": items}

    async def open_stream(
        self, path: str, params: Mapping[str, str], read_timeout: float | None = None
    ) -> aiohttp.ClientResponse:
        """GET ``path`` and return the open 2xx response for the caller to stream and release.

        Retried like any idempotent call until the response starts; ``read_timeout`` bounds
        each wait for more of the body.
        """
        reply = await self._send(
            "GET", path, params=params, idempotent=True, stream=True, read_timeout=read_timeout
        )
        assert reply.stream is not None
        return reply.stream

    async def watch(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        resource_version: str | None = None,
        allow_bookmarks: bool = True,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int | None = None,
        send_initial_events: bool | None = None,
        strip_managed_fields: bool = False,
    ) -> WatchStream:
        """Open a watch. A too-old ``resource_version`` raises GoneError from the stream (or here).

        ``strip_managed_fields`` as for :meth:`list_pages`.
        """
        params = _query(
            watch=True,
            resourceVersion=resource_version,
            allowWatchBookmarks=allow_bookmarks,
            labelSelector=label_selector,
            fieldSelector=field_selector,
            timeoutSeconds=timeout_seconds,
            sendInitialEvents=send_initial_events,
            resourceVersionMatch="NotOlderThan" if send_initial_events else None,
        )
        read_timeout = None if timeout_seconds is None else timeout_seconds + 30.0
        return WatchStream(
            await self.open_stream(resource.path(namespace), params, read_timeout), strip_managed_fields
        )

    # --- write ---------------------------------------------------------------------

    async def create(
        self,
        resource: Resource,
        obj: Obj,
        namespace: str | None = None,
        *,
        field_manager: str | None = None,
        dry_run: bool = False,
    ) -> Obj:
        """POST a new object; ``namespace`` defaults to ``metadata.namespace``."""
        ns = (namespace or _meta(obj).get("namespace")) if resource.namespaced else None
        params = _query(fieldManager=field_manager, dryRun="All" if dry_run else None)
        return await self._call("POST", resource.path(ns), params=params, body=obj, idempotent=False)

    async def create_subresource(
        self,
        resource: Resource,
        name: str,
        subresource: str,
        body: Obj,
        namespace: str | None = None,
        *,
        retry_pdb: bool = True,
    ) -> Obj:
        """POST to a subresource (``binding``, ``eviction``, ``token``...)."""
        return await self._call(
            "POST",
            resource.path(namespace, name, subresource),
            body=body,
            idempotent=False,
            retry_pdb=retry_pdb,
        )

    async def replace(
        self,
        resource: Resource,
        obj: Obj,
        *,
        subresource: str | None = None,
        field_manager: str | None = None,
        dry_run: bool = False,
    ) -> Obj:
        """PUT (update). With ``metadata.resourceVersion`` set, a stale object gets ConflictError."""
        meta = _meta(obj)
        ns = meta.get("namespace") if resource.namespaced else None
        params = _query(fieldManager=field_manager, dryRun="All" if dry_run else None)
        path = resource.path(ns, str(meta.get("name") or ""), subresource)
        return await self._call("PUT", path, params=params, body=obj, idempotent=True)

    async def replace_status(self, resource: Resource, obj: Obj, *, field_manager: str | None = None) -> Obj:
        return await self.replace(resource, obj, subresource="status", field_manager=field_manager)

    async def patch(
        self,
        resource: Resource,
        name: str,
        patch: Any,
        namespace: str | None = None,
        *,
        patch_type: PatchType = PatchType.MERGE,
        subresource: str | None = None,
        field_manager: str | None = None,
        force: bool | None = None,
        dry_run: bool = False,
    ) -> Obj:
        """PATCH with any of the four patch types (``patch`` is a dict, or a list for JSON patch)."""
        if patch_type is PatchType.APPLY and not field_manager:
            raise ValueError("server-side apply needs a field_manager")
        params = _query(
            fieldManager=field_manager,
            force=force if patch_type is PatchType.APPLY else None,
            dryRun="All" if dry_run else None,
        )
        return await self._call(
            "PATCH",
            resource.path(namespace, name, subresource),
            params=params,
            body=patch,
            content_type=str(patch_type),
            idempotent=patch_type is PatchType.APPLY,
        )

    async def apply(
        self,
        resource: Resource,
        obj: Obj,
        *,
        field_manager: str,
        force: bool = False,
        subresource: str | None = None,
    ) -> Obj:
        """Server-side apply ``obj`` (creates it if missing) as ``field_manager``."""
        meta = _meta(obj)
        ns = meta.get("namespace") if resource.namespaced else None
        return await self.patch(
            resource,
            str(meta.get("name") or ""),
            obj,
            ns,
            patch_type=PatchType.APPLY,
            subresource=subresource,
            field_manager=field_manager,
            force=force,
        )

    async def delete(
        self,
        resource: Resource,
        name: str,
        namespace: str | None = None,
        *,
        propagation_policy: PropagationPolicy | str | None = None,
        grace_period_seconds: int | None = None,
        preconditions: Preconditions | None = None,
        dry_run: bool = False,
    ) -> Obj:
        """DELETE; returns the deleted (or now-deleting) object, or a success Status."""
        options: Obj = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if propagation_policy is not None:
            options["propagationPolicy"] = str(propagation_policy)
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        if preconditions is not None:
            options["preconditions"] = preconditions.as_dict()
        if dry_run:
            options["dryRun"] = ["All"]
        return await self._call("DELETE", resource.path(namespace, name), body=options, idempotent=True)

    async def delete_collection(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> Obj:
        params = _query(labelSelector=label_selector, fieldSelector=field_selector)
        return await self._call("DELETE", resource.path(namespace), params=params, idempotent=True)

    # --- pods, leases, namespaces -----------------------------------------------------

    async def bind(
        self,
        namespace: str,
        pod: str,
        node: str,
        *,
        uid: str | None = None,
        annotations: Mapping[str, str] | None = None,
    ) -> None:
        """Bind a pod to a node (``pods/binding``); ConflictError if it is already bound."""
        meta: Obj = {"name": pod, "namespace": namespace}
        if uid:
            meta["uid"] = uid
        if annotations:
            meta["annotations"] = dict(annotations)
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": meta,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        await self.create_subresource(PODS, pod, "binding", body, namespace)

    async def evict(
        self,
        namespace: str,
        pod: str,
        *,
        grace_period_seconds: int | None = None,
        preconditions: Preconditions | None = None,
        dry_run: bool = False,
    ) -> None:
        """Evict a pod through ``policy/v1`` Eviction.

        A PodDisruptionBudget refusal raises :class:`TooManyRequestsError` at once (see
        :func:`is_pdb_refusal`); server throttling is retried like any 429.
        """
        options: Obj = {}
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        if preconditions is not None:
            options["preconditions"] = preconditions.as_dict()
        if dry_run:
            options["dryRun"] = ["All"]
        body: Obj = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": pod, "namespace": namespace},
        }
        if options:
            body["deleteOptions"] = options
        await self.create_subresource(PODS, pod, "eviction", body, namespace, retry_pdb=False)

    async def ensure_namespace(self, name: str, labels: Mapping[str, str] | None = None) -> Obj:
        """Create a namespace unless it exists; returns it."""
        body: Obj = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        if labels:
            body["metadata"]["labels"] = dict(labels)
        try:
            return await self.create(NAMESPACES, body)
        except AlreadyExistsError:
            return await self.get(NAMESPACES, name)

    async def server_version(self) -> Obj:
        return await self._call("GET", "/version", idempotent=True)
