"""A fake NRI runtime: the containerd side of the NRI socket, for the koordlet's plug-in tests.

It listens on a Unix socket as containerd's NRI adaptation does and, for each plug-in that
connects, serves ``RegisterPlugin`` on the runtime connection, then calls ``Configure`` and
``Synchronize`` (with the pods and containers it holds) on the plug-in connection, in
containerd's order. Pod and container events are delivered only when the plug-in subscribed
to them, and each answer is decoded as containerd decodes it, so a wrong field number or
mask fails the test. :meth:`stop` drops every connection and the socket, like a containerd
restart.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from pathlib import Path

from koordlet.runtimehooks.nri import messages as m
from koordlet.runtimehooks.nri.ttrpc import PLUGIN_CONN, RUNTIME_CONN, Session

TIMEOUT_S = 2.0


@dataclass
class Plugin:
    name: str
    index: str
    session: Session
    events: int = 0
    synchronized: asyncio.Event = field(default_factory=asyncio.Event)


class FakeNriRuntime:
    def __init__(
        self,
        socket_path: Path,
        *,
        config: str = "",
        runtime: tuple[str, str] = ("containerd", "v2.2.9"),
        pods: list[m.PodSandbox] | None = None,
        containers: list[m.Container] | None = None,
    ) -> None:
        self.socket_path = socket_path
        self.config = config
        self.runtime = runtime
        self.pods = list(pods or [])
        self.containers = list(containers or [])
        self.plugins: list[Plugin] = []
        #: what Synchronize answered, per registration
        self.sync_answers: list[m.SynchronizeResponse] = []
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._joined = asyncio.Event()

    async def start(self) -> None:
        self._server = await asyncio.start_unix_server(self._accept, path=str(self.socket_path))

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        for plugin in self.plugins:
            await plugin.session.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self.plugins.clear()
        self._joined.clear()
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        registered: asyncio.Future[m.RegisterPluginRequest] = asyncio.get_running_loop().create_future()

        async def register(payload: bytes) -> bytes:
            if not registered.done():
                registered.set_result(m.RegisterPluginRequest.decode(payload))
            return b""

        session = Session(
            reader,
            writer,
            {(m.RUNTIME_SERVICE, "RegisterPlugin"): register},
            serve_conn=RUNTIME_CONN,
            call_conn=PLUGIN_CONN,
        )
        reading = asyncio.create_task(session.run())
        self._tasks.add(reading)
        try:
            async with asyncio.timeout(TIMEOUT_S * 3):
                request = await registered
        except TimeoutError:
            await session.close()
            return
        plugin = Plugin(request.plugin_name, request.plugin_idx, session)
        configure = m.ConfigureRequest(self.config, *self.runtime, int(5e9), int(2e9))
        answer = await session.call(m.PLUGIN_SERVICE, "Configure", configure.encode(), TIMEOUT_S)
        plugin.events = m.configure_response_events(answer)
        sync = m.SynchronizeRequest(list(self.pods), list(self.containers))
        answer = await session.call(m.PLUGIN_SERVICE, "Synchronize", sync.encode(), TIMEOUT_S)
        self.sync_answers.append(m.SynchronizeResponse.decode(answer))
        plugin.synchronized.set()
        self.plugins.append(plugin)
        self._joined.set()

    async def wait_plugin(self, within: float = 10.0) -> Plugin:
        """The first plug-in, once it is registered, configured and synchronized."""
        async with asyncio.timeout(within):
            await self._joined.wait()
            await self.plugins[0].synchronized.wait()
        return self.plugins[0]

    # --- the events, as containerd delivers them -------------------------------------------

    def _subscribed(self, event: m.Event) -> list[Plugin]:
        return [p for p in self.plugins if p.events & event.bit]

    async def run_pod_sandbox(self, pod: m.PodSandbox) -> None:
        self.pods.append(pod)
        for plugin in self._subscribed(m.Event.RUN_POD_SANDBOX):
            event = m.StateChangeEvent(m.Event.RUN_POD_SANDBOX, pod)
            await plugin.session.call(m.PLUGIN_SERVICE, "StateChange", event.encode(), TIMEOUT_S)

    async def remove_pod_sandbox(self, pod: m.PodSandbox) -> None:
        self.pods = [p for p in self.pods if p.id != pod.id]
        for plugin in self._subscribed(m.Event.REMOVE_POD_SANDBOX):
            event = m.StateChangeEvent(m.Event.REMOVE_POD_SANDBOX, pod)
            await plugin.session.call(m.PLUGIN_SERVICE, "StateChange", event.encode(), TIMEOUT_S)

    async def create_container(self, pod: m.PodSandbox, container: m.Container) -> m.CreateContainerResponse:
        """Each subscribed plug-in's adjustment, merged in plug-in order (a later one wins)."""
        merged = m.CreateContainerResponse()
        for plugin in self._subscribed(m.Event.CREATE_CONTAINER):
            request = m.ContainerRequest(pod, container)
            answer = await plugin.session.call(
                m.PLUGIN_SERVICE, "CreateContainer", request.encode(), TIMEOUT_S
            )
            response = m.CreateContainerResponse.decode(answer)
            merged.adjust.env.update(response.adjust.env)
            merged.adjust.mounts += response.adjust.mounts
            merged.adjust.resources = response.adjust.resources or merged.adjust.resources
            merged.updates += response.updates
        self.containers.append(container)
        return merged

    async def update_container(
        self, pod: m.PodSandbox, container: m.Container, resources: m.LinuxResources
    ) -> list[m.ContainerUpdate]:
        updates: list[m.ContainerUpdate] = []
        for plugin in self._subscribed(m.Event.UPDATE_CONTAINER):
            request = m.ContainerRequest(pod, container, resources)
            answer = await plugin.session.call(
                m.PLUGIN_SERVICE, "UpdateContainer", request.encode(), TIMEOUT_S
            )
            updates += m.UpdatesResponse.decode(answer).updates
        return updates

    async def stop_container(self, pod: m.PodSandbox, container: m.Container) -> list[m.ContainerUpdate]:
        updates: list[m.ContainerUpdate] = []
        for plugin in self._subscribed(m.Event.STOP_CONTAINER):
            request = m.ContainerRequest(pod, container)
            answer = await plugin.session.call(m.PLUGIN_SERVICE, "StopContainer", request.encode(), TIMEOUT_S)
            updates += m.UpdatesResponse.decode(answer).updates
        return updates
