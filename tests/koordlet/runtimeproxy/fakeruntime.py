"""A fake CRI runtime behind the proxy: records each call's bytes, answers like containerd
(new IDs for RunPodSandbox and CreateContainer, NOT_FOUND for unknown IDs, a version, a
stream of container events)."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc

from koordinator import protowire as pw
from koordinator.protowire import Writer
from koordlet.runtimeproxy import cri
from tests.koordlet.runtimeproxy import crimsg


class FakeCriRuntime(grpc.GenericRpcHandler):
    def __init__(self, socket: Path) -> None:
        self.socket = socket
        self.calls: list[tuple[str, bytes]] = []
        self.containers: set[str] = set()
        #: sandbox id -> its ListPodSandbox item; container id -> its ListContainers item
        self.sandbox_items: dict[str, bytes] = {}
        self.container_items: dict[str, bytes] = {}
        self._ids = itertools.count(1)
        self._server: Any = None

    def requests(self, method: str) -> list[bytes]:
        return [data for name, data in self.calls if name == method]

    async def start(self) -> None:
        # containerd's CRI server takes requests of up to 16 MiB
        self._server = grpc.aio.server(options=[("grpc.max_receive_message_length", 16 << 20)])
        self._server.add_generic_rpc_handlers([self])
        self._server.add_insecure_port(f"unix://{self.socket}")
        await self._server.start()

    async def stop(self) -> None:
        await self._server.stop(grace=0)

    def service(self, details: Any) -> Any:
        method: str = details.method
        if method in cri.STREAMING:

            async def events(request: bytes, context: Any) -> AsyncIterator[bytes]:
                self.calls.append((method, request))
                for container in ("c-a", "c-b"):
                    yield bytes(Writer().string(1, container))

            return grpc.unary_stream_rpc_method_handler(events)

        async def unary(request: bytes, context: Any) -> bytes:
            self.calls.append((method, request))
            if method == f"/{cri.RUNTIME_SERVICE}/Version":
                return bytes(Writer().string(1, "0.1.0").string(2, "containerd").string(3, "v2.2.9"))
            if method == cri.RUN_POD_SANDBOX:
                sandbox = f"sb-{next(self._ids)}"
                config = pw.message(pw.fields(request), 1) or {}
                item = Writer().string(1, sandbox).message(2, pw.first(config, 1))  # type: ignore[arg-type]
                item.string_map(5, pw.string_map(config, 6)).string_map(6, pw.string_map(config, 7))
                self.sandbox_items[sandbox] = bytes(item)
                return crimsg.id_answer(sandbox)
            if method == cri.CREATE_CONTAINER:
                container = f"c-{next(self._ids)}"
                self.containers.add(container)
                fields = pw.fields(request)
                config = pw.message(fields, 2) or {}
                item = Writer().string(1, container).string(2, pw.string(fields, 1))
                item.message(3, pw.first(config, 1))  # type: ignore[arg-type]
                self.container_items[container] = bytes(item)
                return crimsg.id_answer(container)
            if method == cri.LIST_POD_SANDBOX:
                return b"".join(
                    bytes(Writer().message(1, i, always=True)) for i in self.sandbox_items.values()
                )
            if method == cri.LIST_CONTAINERS:
                return b"".join(
                    bytes(Writer().message(1, i, always=True)) for i in self.container_items.values()
                )
            if method in (cri.START_CONTAINER, cri.UPDATE_CONTAINER_RESOURCES, cri.STOP_CONTAINER):
                container = pw.string(pw.fields(request), 1)
                if container not in self.containers:
                    await context.abort(grpc.StatusCode.NOT_FOUND, f"container {container!r} not found")
            return b""

        return grpc.unary_unary_rpc_method_handler(unary)
