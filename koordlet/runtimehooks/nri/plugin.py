"""The koordlet's NRI plug-in: the runtime hooks applied while containerd creates a container.

The plug-in registers with the runtime on its NRI socket (``koordlet_nri``, index ``00``),
subscribes to RunPodSandbox, RemovePodSandbox, CreateContainer and UpdateContainer (or the
events a ``Configure`` config names), and runs the same hooks as the reconciler:

* **RunPodSandbox**: pod-level hooks; what they ask is written to the pod cgroup (which the
  kubelet created before the sandbox) before the runtime goes on;
* **CreateContainer**: container-level hooks; CPU shares, CFS quota, cpuset and memory limit
  go back as the container's adjustment, with environment variables and mounts, so the
  container starts with them; the other resources (``cpu.idle``, group identity, net_cls)
  and host updates go through the executor;
* **UpdateContainer**: the same, answered as a container update;
* **RemovePodSandbox**: the hooks' cleanup (a resctrl group ...);
* **Synchronize**: nothing. The reconciler owns running containers, so a reconnect after a
  containerd restart applies nothing twice (upstream issue 2334: pinning repeated on
  reconnect).

Pods and containers reach the hooks through :mod:`koordlet.runtimehooks.transport`, as
with the runtime proxy.

The connection is retried with exponential backoff while the socket is missing or the
runtime is down. Upstream gives up for good when the socket is missing at a retry (so a
containerd restart that is slow to recreate it ends NRI until the koordlet restarts); here
the retries go on, with the delay capped, and the reconciler covers pods meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from pathlib import Path

import yaml

from koordlet.runtimehooks.nri import messages as m
from koordlet.runtimehooks.nri.ttrpc import Handler, Session, TtrpcError
from koordlet.runtimehooks.protocol import Resources, Stage
from koordlet.runtimehooks.transport import HookRunner, Sandbox, origin_resources

log = logging.getLogger(__name__)

DEFAULT_EVENTS = ("RunPodSandbox", "RemovePodSandbox", "CreateContainer", "UpdateContainer")
#: ``Configure.runtime_name`` → the scheme of the container IDs the kubelet reports
_ID_SCHEME = {"containerd": "containerd", "cri-o": "cri-o"}


@dataclass(frozen=True)
class NriOptions:
    """``--runtime-hooks-nri-*``: where and how the plug-in connects."""

    socket_path: Path
    plugin_name: str = "koordlet_nri"
    plugin_index: str = "00"
    #: the RegisterPlugin call's limit (a little more than containerd's registration timeout)
    connect_timeout: float = 6.0
    backoff_duration: float = 1.0
    backoff_factor: float = 2.0
    #: the longest wait between two connection attempts (upstream's is unbounded: after a
    #: long runtime outage its next attempt could be days away)
    backoff_cap: float = 30.0
    #: failed attempts in a row before the plug-in gives up (the reconciler goes on)
    backoff_steps: int = 2**31 - 1


def nri_resources(resources: Resources) -> m.LinuxResources:
    """What the runtime applies itself, as NRI carries it."""
    origin = origin_resources(resources)
    return m.LinuxResources(
        memory_limit=origin.memory_limit,
        cpu_shares=origin.cpu_shares,
        cpu_quota=origin.cfs_quota,
        cpuset_cpus=origin.cpuset or "",
    )


def sandbox_of(pod: m.PodSandbox) -> Sandbox:
    return Sandbox(pod.name, pod.namespace, pod.uid, pod.labels, pod.annotations, pod.cgroup_parent)


class NriPlugin:
    """The NRI plug-in; :meth:`run` connects, serves and reconnects until cancelled."""

    def __init__(self, options: NriOptions, runner: HookRunner) -> None:
        self.options = options
        self.runner = runner
        self.events = m.event_mask(list(DEFAULT_EVENTS))
        self.runtime = ("", "")
        #: set while registered with a runtime
        self.connected = asyncio.Event()
        #: connections made so far (the first one, then each reconnect)
        self.registrations = 0
        self._session: Session | None = None
        self._missing_logged = False
        self.handlers: dict[tuple[str, str], Handler] = {
            (m.PLUGIN_SERVICE, "Configure"): self._configure,
            (m.PLUGIN_SERVICE, "Synchronize"): self._synchronize,
            (m.PLUGIN_SERVICE, "Shutdown"): self._shutdown,
            (m.PLUGIN_SERVICE, "CreateContainer"): self._create_container,
            (m.PLUGIN_SERVICE, "UpdateContainer"): self._update_container,
            (m.PLUGIN_SERVICE, "StopContainer"): self._stop_container,
            (m.PLUGIN_SERVICE, "StateChange"): self._state_change,
        }

    # --- connection ------------------------------------------------------------------------

    async def run(self) -> None:
        """Connect, serve, reconnect; returns only after ``backoff_steps`` failures in a row."""
        delay, failures = self.options.backoff_duration, 0
        while True:
            if await self._connect_once():
                delay, failures = self.options.backoff_duration, 0  # it was up: start over
            else:
                failures += 1
                if failures >= self.options.backoff_steps:
                    log.error(
                        "NRI: giving up after %d failed connection attempts; the reconciler applies hooks",
                        failures,
                    )
                    return
            await asyncio.sleep(delay)
            delay = min(delay * self.options.backoff_factor, self.options.backoff_cap)

    async def _connect_once(self) -> bool:
        """One connection, served until it closes; True when the plug-in got registered."""
        path = self.options.socket_path
        if not path.exists():
            if not self._missing_logged:
                log.info(
                    "no NRI socket at %s: runtime hooks apply through the reconciler until it appears", path
                )
                self._missing_logged = True
            return False
        self._missing_logged = False
        try:
            async with asyncio.timeout(self.options.connect_timeout):
                reader, writer = await asyncio.open_unix_connection(str(path))
        except (OSError, TimeoutError) as exc:
            log.warning("NRI: cannot connect to %s: %s", path, exc)
            return False
        session = Session(reader, writer, self.handlers)
        self._session = session
        reading = asyncio.create_task(session.run(), name="nri-session")
        registered = False
        try:
            request = m.RegisterPluginRequest(self.options.plugin_name, self.options.plugin_index)
            await session.call(
                m.RUNTIME_SERVICE, "RegisterPlugin", request.encode(), self.options.connect_timeout
            )
            registered = True
            self.registrations += 1
            self.connected.set()
            log.info(
                "NRI plug-in %s-%s registered on %s",
                self.options.plugin_index,
                self.options.plugin_name,
                path,
            )
            await session.closed.wait()
            log.warning("NRI connection to %s closed; reconnecting", path)
        except TtrpcError as exc:
            log.warning("NRI: registration on %s failed: %s", path, exc)
        finally:
            self.connected.clear()
            self._session = None
            await session.close()
            reading.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reading
        return registered

    # --- plug-in service ------------------------------------------------------------------

    async def _configure(self, payload: bytes) -> bytes:
        request = m.ConfigureRequest.decode(payload)
        self.runtime = (request.runtime_name, request.runtime_version)
        self.runner.id_scheme = _ID_SCHEME.get(request.runtime_name, "containerd")
        log.info("NRI: configured by %s %s", request.runtime_name, request.runtime_version)
        if request.config:
            try:
                config = yaml.safe_load(request.config) or {}
                events = config.get("events") if isinstance(config, dict) else None
                if events is not None:
                    self.events = m.event_mask([str(e) for e in events])
            except (yaml.YAMLError, ValueError) as exc:
                raise ValueError(f"invalid plug-in configuration: {exc}") from exc
        return m.configure_response(self.events)

    async def _synchronize(self, payload: bytes) -> bytes:
        request = m.SynchronizeRequest.decode(payload)
        log.info(
            "NRI: synchronized with %d pods and %d containers (running containers are the reconciler's)",
            len(request.pods),
            len(request.containers),
        )
        return m.SynchronizeResponse(more=request.more).encode()

    async def _shutdown(self, _payload: bytes) -> bytes:
        log.warning("NRI: the runtime asked the plug-in to shut down; it will reconnect")
        if self._session is not None:
            asyncio.get_running_loop().call_soon(self._session.abort)
        return b""

    async def _create_container(self, payload: bytes) -> bytes:
        request = m.ContainerRequest.decode(payload)
        return await asyncio.to_thread(self.create_container, request.pod, request.container)

    async def _update_container(self, payload: bytes) -> bytes:
        request = m.ContainerRequest.decode(payload)
        return await asyncio.to_thread(self.update_container, request.pod, request.container)

    async def _stop_container(self, _payload: bytes) -> bytes:
        return m.UpdatesResponse().encode()  # no hook acts when a container stops

    async def _state_change(self, payload: bytes) -> bytes:
        event = m.StateChangeEvent.decode(payload)
        if event.event == m.Event.RUN_POD_SANDBOX:
            await asyncio.to_thread(self.run_pod_sandbox, event.pod)
        elif event.event == m.Event.REMOVE_POD_SANDBOX:
            await asyncio.to_thread(self.remove_pod_sandbox, event.pod)
        return b""

    # --- the hooks (worker threads) --------------------------------------------------------

    def run_pod_sandbox(self, pod: m.PodSandbox) -> None:
        self.runner.run_pod(sandbox_of(pod), Stage.PRE_RUN_POD_SANDBOX)

    def remove_pod_sandbox(self, pod: m.PodSandbox) -> None:
        self.runner.run_pod(sandbox_of(pod), Stage.POST_STOP_POD_SANDBOX)

    def create_container(self, pod: m.PodSandbox, container: m.Container) -> bytes:
        ctx = self.runner.run_container(
            sandbox_of(pod), container.name, container.id, Stage.PRE_CREATE_CONTAINER
        )
        response = ctx.response
        adjust = m.ContainerAdjustment(
            env=dict(response.env),
            mounts=[m.Mount(x.destination, x.source, x.type, x.options) for x in response.mounts],
            resources=nri_resources(response.resources),
        )
        return m.CreateContainerResponse(adjust).encode()

    def update_container(self, pod: m.PodSandbox, container: m.Container) -> bytes:
        stage = Stage.PRE_UPDATE_CONTAINER_RESOURCES
        ctx = self.runner.run_container(sandbox_of(pod), container.name, container.id, stage)
        resources = nri_resources(ctx.response.resources)
        updates = [m.ContainerUpdate(container.id, resources)] if resources else []
        return m.UpdatesResponse(updates).encode()
