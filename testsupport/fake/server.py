"""The fake apiserver's HTTP face: the Kubernetes REST API over aiohttp on loopback.

:class:`FakeApiServer` serves :class:`~testsupport.fake.state.ClusterState` with the
real URL layout, verbs, media types, status codes and watch streams, so the production
client runs unchanged against it. It also offers an in-process handle (``server.state``
and the helpers below) to seed and read objects, register CRDs, inject faults (error
replies, dropped connections), end watches, compact history and stop/start listening on
the same port to simulate an apiserver restart.
"""

from __future__ import annotations

import asyncio
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import yaml
from aiohttp import web
from aiohttp.abc import AbstractStreamWriter
from aiohttp.http_parser import RawRequestMessage
from aiohttp.streams import StreamReader
from aiohttp.web_protocol import RequestHandler

from koordinator.kube import resources as res
from koordinator.kube.client import ApiClient
from koordinator.kube.clock import SYSTEM_CLOCK, Clock
from koordinator.kube.config import ClusterConfig, StaticToken
from koordinator.kube.resources import Resource
from testsupport.fake import status as st
from testsupport.fake.registry import ResourceType, SchemaValidatorFactory
from testsupport.fake.state import APPLY_PATCH, ClusterState

Obj = dict[str, Any]
_JSON = "application/json"
_DISCOVERY_VERBS = {
    "status": ["get", "patch", "update"],
    "scale": ["get", "patch", "update"],
    "binding": ["create"],
    "eviction": ["create"],
}


class _DropConnectionError(Exception):
    """Close the client's connection without an answer."""


@dataclass
class Fault:
    """Answer matching requests with ``status`` (0: drop the connection) ``times`` times."""

    status: int = 500
    times: int = 1
    method: str | None = None
    path: str | None = None  # regular expression searched in the URL path
    query: str | None = None  # regular expression searched in the query string
    watch: bool | None = None
    retry_after: int | None = None
    reason: str = ""
    message: str = "injected fault"
    #: seconds to wait before answering (or before dropping the connection)
    delay: float = 0.0
    hits: int = 0

    def matches(self, request: web.BaseRequest) -> bool:
        if self.hits >= self.times:
            return False
        if self.method and request.method != self.method.upper():
            return False
        if self.path and not re.search(self.path, request.path):
            return False
        if self.query and not re.search(self.query, request.query_string):
            return False
        is_watch = request.query.get("watch") in ("1", "true")
        return self.watch is None or self.watch == is_watch


_REASONS = {
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
    409: "Conflict",
    403: "Forbidden",
}


@dataclass
class RequestRecord:
    method: str
    path: str
    query: dict[str, str]
    status: int


@dataclass
class _Route:
    rtype: ResourceType
    namespace: str | None
    name: str | None
    subresource: str


#: the largest request body read
_MAX_BODY = 64 * 1024 * 1024


def _manager(request: web.BaseRequest) -> str:
    given = request.query.get("fieldManager")
    if given:
        return given
    agent = request.headers.get("User-Agent", "")
    return (agent.split("/", 1)[0] or "unknown")[:128]


def _json_response(body: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, content_type=_JSON, headers=headers)


def _error_response(error: st.StatusError) -> web.Response:
    headers = {"Retry-After": str(error.retry_after)} if error.retry_after is not None else None
    return _json_response(error.status(), error.code, headers)


class FakeApiServer:
    """A strict in-memory Kubernetes API server on ``127.0.0.1``.

    ``bookmark_interval`` is how often an idle watch that asked for bookmarks gets one
    (the real apiserver: about a minute; it also sends one two seconds before the watch's
    ``timeoutSeconds`` run out, and so does this fake). ``tokens`` maps accepted bearer
    tokens to user names; when empty, every request is accepted.
    """

    def __init__(
        self,
        *,
        clock: Clock = SYSTEM_CLOCK,
        history_limit: int = 10000,
        bookmark_interval: float = 60.0,
        schema_validator: SchemaValidatorFactory | None = None,
        tokens: Mapping[str, str] | None = None,
        track_managed_fields: bool = True,
    ) -> None:
        self.state = ClusterState(
            clock=clock,
            history_limit=history_limit,
            schema_validator=schema_validator,
            track_managed_fields=track_managed_fields,
        )
        self.bookmark_interval = bookmark_interval
        self.tokens: dict[str, str] = dict(tokens or {})
        self.faults: list[Fault] = []
        self.requests: list[RequestRecord] = []
        self.record_requests = False
        self.port = 0
        self._runner: web.ServerRunner | None = None
        self._site: web.TCPSite | None = None
        self._streams: set[web.StreamResponse] = set()

    # --- lifecycle ----------------------------------------------------------------------

    async def start(self) -> FakeApiServer:
        loop = asyncio.get_running_loop()

        def request(
            message: RawRequestMessage,
            payload: StreamReader,
            protocol: RequestHandler,
            writer: AbstractStreamWriter,
            task: asyncio.Task[None],
        ) -> web.BaseRequest:
            return web.BaseRequest(message, payload, protocol, writer, task, loop, client_max_size=_MAX_BODY)

        # aiohttp's low-level server: every path goes to one handler, with no router or
        # middleware in between (the fake routes by itself)
        server = web.Server(self._handle, request_factory=request, handler_cancellation=True, access_log=None)
        self._runner = web.ServerRunner(server)
        await self._runner.setup()
        await self._listen()
        return self

    async def _listen(self) -> None:
        if self._runner is None:
            raise RuntimeError("server not started")
        if not self.port:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.bind(("127.0.0.1", 0))
                self.port = sock.getsockname()[1]
        self._site = web.TCPSite(self._runner, "127.0.0.1", self.port, reuse_address=True)
        await self._site.start()

    async def stop_listening(self) -> None:
        """Close the port and every open watch, keeping all objects (an apiserver going down)."""
        self.state.close_watches()
        if self._site is not None:
            await self._site.stop()
            self._site = None
        await asyncio.sleep(0)

    async def start_listening(self) -> None:
        """Listen again on the same port (the apiserver coming back)."""
        if self._site is None:
            await self._listen()

    async def restart(self, compact: bool = True) -> None:
        """End every watch and, by default, forget the event history as a restarted apiserver does."""
        self.state.close_watches()
        if compact:
            self.state.compact()

    async def stop(self) -> None:
        self.state.close_watches()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
            self._site = None

    async def __aenter__(self) -> FakeApiServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # --- in-process handle --------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def config(self, token: str | None = None) -> ClusterConfig:
        return ClusterConfig(server=self.url, token=StaticToken(token) if token else None)

    def client(self, **kwargs: Any) -> ApiClient:
        """A production :class:`ApiClient` pointed at this server (default: no rate limit to speak of)."""
        kwargs.setdefault("qps", 10000.0)
        kwargs.setdefault("burst", 10000)
        token = kwargs.pop("token", None)
        return ApiClient(self.config(token), **kwargs)

    def rtype(self, resource: Resource) -> ResourceType:
        return self.state.registry.for_resource(resource)

    def create(self, resource: Resource, obj: Obj, namespace: str | None = None) -> Obj:
        """Store an object as a client's create would (defaulting, validation, events)."""
        if resource.namespaced:
            namespace = namespace or (obj.get("metadata") or {}).get("namespace")
            if namespace and ("", namespace) not in self.state.objects(self.rtype(res.NAMESPACES)):
                self.state.create(
                    self.rtype(res.NAMESPACES),
                    None,
                    {"metadata": {"name": namespace}},
                    manager="koordinator-fake",
                )
        return self._copy(self.state.create(self.rtype(resource), namespace, obj, manager="koordinator-fake"))

    def get(self, resource: Resource, name: str, namespace: str | None = None) -> Obj:
        return self._copy(self.state.get(self.rtype(resource), namespace, name))

    def list_objects(self, resource: Resource, namespace: str | None = None) -> list[Obj]:
        listing = self.state.list_objects(self.rtype(resource), namespace)
        return [self._copy(o) for o in listing["items"]]

    def update(self, resource: Resource, obj: Obj, subresource: str = "") -> Obj:
        meta = obj["metadata"]
        return self._copy(
            self.state.update(
                self.rtype(resource),
                meta.get("namespace"),
                meta["name"],
                obj,
                manager="koordinator-fake",
                subresource=subresource,
            )
        )

    def delete(self, resource: Resource, name: str, namespace: str | None = None, **options: Any) -> None:
        self.state.delete(self.rtype(resource), namespace, name, options)

    def register_crd(self, crd: Obj | str | Path) -> Obj:
        """Serve a CRD given as a dict, a YAML string or a YAML file (first CRD document)."""
        if isinstance(crd, Path) or (
            isinstance(crd, str) and "\n" not in crd and crd.endswith((".yaml", ".yml"))
        ):
            crd = Path(crd).read_text()
        if isinstance(crd, str):
            docs = [d for d in yaml.safe_load_all(crd) if isinstance(d, dict)]
            found = [d for d in docs if d.get("kind") == "CustomResourceDefinition"]
            if not found:
                raise ValueError("no CustomResourceDefinition in the given YAML")
            crd = found[0]
        return self._copy(self.state.register_crd(crd))

    def inject(self, fault: Fault) -> Fault:
        self.faults.append(fault)
        return fault

    @staticmethod
    def _copy(obj: Obj) -> Obj:
        copied: Obj = orjson.loads(orjson.dumps(obj))
        return copied

    # --- HTTP ------------------------------------------------------------------------------

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        try:
            response = await self._dispatch(request)
        except st.StatusError as error:
            response = _error_response(error)
        except _DropConnectionError:
            if request.transport is not None:
                request.transport.abort()
            response = web.Response(status=599)
        if self.record_requests:
            self.requests.append(
                RequestRecord(request.method, request.path, dict(request.query), response.status)
            )
        return response

    async def _dispatch(self, request: web.BaseRequest) -> web.StreamResponse:
        for fault in self.faults:
            if fault.matches(request):
                fault.hits += 1
                if fault.delay:
                    await asyncio.sleep(fault.delay)
                if fault.status == 0:
                    raise _DropConnectionError
                reason = fault.reason or _REASONS.get(fault.status, "InternalError")
                details = {"retryAfterSeconds": fault.retry_after} if fault.retry_after is not None else None
                raise st.StatusError(fault.status, reason, fault.message, details)
        user = self._authenticate(request)
        path = request.path.rstrip("/") or "/"
        if path in ("/healthz", "/readyz", "/livez"):
            return web.Response(text="ok")
        if path == "/version":
            return _json_response(
                {
                    "major": "1",
                    "minor": "34",
                    "gitVersion": "v1.34.0-koordinator-fake",
                    "platform": "linux/amd64",
                }
            )
        if path == "/apis/authentication.k8s.io/v1/selfsubjectreviews" and request.method == "POST":
            return _json_response(
                {
                    "kind": "SelfSubjectReview",
                    "apiVersion": "authentication.k8s.io/v1",
                    "metadata": {"creationTimestamp": None},
                    "status": {"userInfo": {"username": user}},
                },
                201,
            )
        discovery = self._discovery(path)
        if discovery is not None:
            if request.method != "GET":
                raise st.method_not_allowed()
            return _json_response(discovery)
        route = self._route(path)
        return await self._serve(request, route)

    def _authenticate(self, request: web.BaseRequest) -> str:
        if not self.tokens:
            return "system:admin"
        header = request.headers.get("Authorization", "")
        token = header[7:] if header.startswith("Bearer ") else ""
        user = self.tokens.get(token)
        if user is None:
            raise st.StatusError(401, "Unauthorized", "Unauthorized")
        return user

    # --- discovery ---------------------------------------------------------------------------------

    def _discovery(self, path: str) -> Obj | None:
        parts = path.strip("/").split("/")
        if len(parts) > 3 or parts[0] not in ("api", "apis"):
            return None  # an object path: most requests, answered without building discovery
        if path == "/api":
            return {
                "kind": "APIVersions",
                "versions": ["v1"],
                "serverAddressByClientCIDRs": [
                    {"clientCIDR": "0.0.0.0/0", "serverAddress": f"127.0.0.1:{self.port}"}
                ],
            }
        if path == "/apis":
            groups = self.state.registry.group_versions()
            return {
                "kind": "APIGroupList",
                "apiVersion": "v1",
                "groups": [self._group(g, v) for g, v in sorted(groups.items()) if g],
            }
        if parts[0] == "api" and len(parts) == 2:
            return self._resource_list("", parts[1])
        if parts[0] == "apis" and len(parts) == 2:
            versions = self.state.registry.group_versions().get(parts[1])
            if versions is None:
                raise st.StatusError(404, "NotFound", "the server could not find the requested resource")
            return {"kind": "APIGroup", "apiVersion": "v1", **self._group(parts[1], versions)}
        if parts[0] == "apis" and len(parts) == 3:
            return self._resource_list(parts[1], parts[2])
        return None

    @staticmethod
    def _group(name: str, versions: list[str]) -> Obj:
        listed = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
        return {"name": name, "versions": listed, "preferredVersion": listed[0]}

    def _resource_list(self, group: str, version: str) -> Obj:
        types = [t for t in self.state.registry.types() if t.group == group and t.resource.version == version]
        if not types:
            raise st.StatusError(404, "NotFound", "the server could not find the requested resource")
        resources: list[Obj] = []
        for rtype in sorted(types, key=lambda t: t.plural):
            entry: Obj = {
                "name": rtype.plural,
                "singularName": rtype.singular,
                "namespaced": rtype.namespaced,
                "kind": rtype.kind,
                "verbs": list(_ALL_VERBS),
            }
            if rtype.short_names:
                entry["shortNames"] = list(rtype.short_names)
            resources.append(entry)
            for sub in rtype.subresources:
                kind = {"binding": "Binding", "eviction": "Eviction", "scale": "Scale"}.get(sub, rtype.kind)
                resources.append(
                    {
                        "name": f"{rtype.plural}/{sub}",
                        "singularName": "",
                        "namespaced": rtype.namespaced,
                        "kind": kind,
                        "verbs": _DISCOVERY_VERBS.get(sub, ["get"]),
                    }
                )
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": f"{group}/{version}" if group else version,
            "resources": resources,
        }

    # --- resources -------------------------------------------------------------------------------

    def _route(self, path: str) -> _Route:
        parts = [p for p in path.strip("/").split("/") if p]
        if parts[:1] == ["api"] and len(parts) >= 3:
            group, version, rest = "", parts[1], parts[2:]
        elif parts[:1] == ["apis"] and len(parts) >= 4:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise st.StatusError(404, "NotFound", "the server could not find the requested resource")
        namespace: str | None = None
        if rest[0] == "namespaces" and len(rest) >= 3:
            candidate = self.state.registry.lookup(group, version, rest[2])
            if candidate is not None and candidate.namespaced:
                namespace, rest = rest[1], rest[2:]
        rtype = self.state.registry.lookup(group, version, rest[0])
        if rtype is None or len(rest) > 3:
            raise st.StatusError(404, "NotFound", "the server could not find the requested resource")
        name = rest[1] if len(rest) >= 2 else None
        subresource = rest[2] if len(rest) == 3 else ""
        if subresource and subresource not in rtype.subresources:
            raise st.StatusError(404, "NotFound", "the server could not find the requested resource")
        return _Route(rtype, namespace, name, subresource)

    async def _body(self, request: web.BaseRequest) -> Any:
        raw = await request.read()
        if not raw:
            return None
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            if request.content_type == APPLY_PATCH:
                try:
                    return yaml.safe_load(raw)
                except yaml.YAMLError as exc:
                    raise st.bad_request(f"error decoding YAML: {exc}") from None
            raise st.bad_request("the body of the request could not be decoded as JSON") from None

    async def _serve(self, request: web.BaseRequest, route: _Route) -> web.StreamResponse:
        state, rtype, q = self.state, route.rtype, request.query
        method = request.method
        dry_run = q.get("dryRun") == "All"
        if route.name is None:
            if method == "GET":
                if q.get("watch") in ("1", "true"):
                    return await self._watch(request, route)
                limit = int(q.get("limit") or 0)
                listing = state.list_objects(
                    rtype,
                    route.namespace,
                    label_selector=q.get("labelSelector"),
                    field_selector=q.get("fieldSelector"),
                    limit=limit,
                    continue_token=q.get("continue"),
                    resource_version=q.get("resourceVersion"),
                    resource_version_match=q.get("resourceVersionMatch"),
                )
                return _json_response(listing)
            if method == "POST":
                created = state.create(
                    rtype,
                    route.namespace,
                    await self._body(request),
                    manager=_manager(request),
                    dry_run=dry_run,
                )
                return _json_response(state.served(rtype, created), 201)
            if method == "DELETE":
                options = await self._body(request) or {}
                listing = state.delete_collection(
                    rtype, route.namespace, q.get("labelSelector"), q.get("fieldSelector"), options
                )
                return _json_response(listing)
            raise st.method_not_allowed()
        name = route.name
        if route.subresource in ("binding", "eviction"):
            if method != "POST":
                raise st.method_not_allowed()
            body = await self._body(request) or {}
            if route.subresource == "binding":
                state.bind(route.namespace or "", name, body)
            else:
                state.evict(route.namespace or "", name, body)
            return _json_response(
                {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}, 201
            )
        if method == "GET":
            return _json_response(state.get(rtype, route.namespace, name))
        if method == "PUT":
            body = await self._body(request)
            return _json_response(
                state.update(
                    rtype,
                    route.namespace,
                    name,
                    body,
                    manager=_manager(request),
                    subresource=route.subresource,
                    dry_run=dry_run,
                )
            )
        if method == "PATCH":
            body = await self._body(request)
            existed = (route.namespace or "" if rtype.namespaced else "", name) in state.objects(rtype)
            patched = state.patch(
                rtype,
                route.namespace,
                name,
                request.content_type,
                body,
                manager=_manager(request),
                subresource=route.subresource,
                force=q.get("force") == "true",
                dry_run=dry_run,
                field_manager_given=bool(q.get("fieldManager")),
            )
            return _json_response(state.served(rtype, patched), 200 if existed else 201)
        if method == "DELETE":
            options = dict(await self._body(request) or {})
            if "gracePeriodSeconds" in q:
                options["gracePeriodSeconds"] = int(q["gracePeriodSeconds"])
            if "propagationPolicy" in q:
                options["propagationPolicy"] = q["propagationPolicy"]
            if dry_run:
                options["dryRun"] = ["All"]
            result, _ = state.delete(rtype, route.namespace, name, options)
            return _json_response(result)
        raise st.method_not_allowed()

    async def _watch(self, request: web.BaseRequest, route: _Route) -> web.StreamResponse:
        q = request.query
        timeout = float(q["timeoutSeconds"]) if q.get("timeoutSeconds") else None
        allow_bookmarks = q.get("allowWatchBookmarks") == "true"
        if q.get("sendInitialEvents") == "true" and not allow_bookmarks:
            raise st.invalid(
                "ListOptions",
                "meta.k8s.io",
                "",
                [
                    st.Cause(
                        "FieldValueForbidden",
                        "Forbidden: sendInitialEvents requires setting allowWatchBookmarks to true",
                        "allowWatchBookmarks",
                    )
                ],
            )
        queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        response = web.StreamResponse(
            status=200, headers={"Content-Type": _JSON, "Transfer-Encoding": "chunked"}
        )
        try:
            watcher = self.state.watch(
                route.rtype,
                route.namespace,
                queue=queue,
                resource_version=None if q.get("sendInitialEvents") == "true" else q.get("resourceVersion"),
                label_selector=q.get("labelSelector"),
                field_selector=q.get("fieldSelector"),
                allow_bookmarks=allow_bookmarks,
            )
        except st.StatusError as error:
            if error.code != 410:
                raise
            await response.prepare(request)
            await response.write(orjson.dumps({"type": "ERROR", "object": error.status()}) + b"\n")
            await response.write_eof()
            return response
        loop = asyncio.get_running_loop()
        started = loop.time()
        deadline = started + timeout if timeout is not None else None
        next_bookmark = started + self.bookmark_interval
        pre_timeout_sent = False
        await response.prepare(request)
        self._streams.add(response)
        try:
            while True:
                now = loop.time()
                wake = next_bookmark
                if deadline is not None:
                    if now >= deadline:
                        break
                    wake = min(wake, deadline if pre_timeout_sent else deadline - 2.0)
                try:
                    async with asyncio.timeout(max(0.0, wake - now)):
                        line = await queue.get()
                except TimeoutError:
                    now = loop.time()
                    if allow_bookmarks and queue.empty() and self.state.rv > watcher.sent_rv:
                        watcher.bookmark(self.state.rv)
                    if deadline is not None and now >= deadline - 2.0:
                        pre_timeout_sent = True
                    if now >= next_bookmark:
                        next_bookmark = now + self.bookmark_interval
                    continue
                if line is None:
                    break
                # what queued up meanwhile goes out in the same chunk: one write for a burst
                batch, closing = [line], False
                while not queue.empty():
                    more = queue.get_nowait()
                    if more is None:
                        closing = True
                        break
                    batch.append(more)
                await response.write(b"".join(batch))
                if closing:
                    break
            await response.write_eof()
        except ConnectionResetError:
            pass  # the client went away; nothing left to tell it
        finally:
            self.state.unwatch(watcher)
            self._streams.discard(response)
        return response


_ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
