"""koord-runtime-proxy's gRPC server: CRI v1 in front of the runtime, hooks around some calls.

Every CRI method is served (``runtime.v1.RuntimeService`` and ``runtime.v1.ImageService``)
by passing the call's bytes to the runtime and its answer back, status and all; the
server-streaming ``GetContainerEvents`` is relayed message by message. Around these calls the
hook servers are asked (unless the pod carries ``runtimeproxy.koordinator.sh/skip-hookserver:
"true"``, or the key and value given by ``--runtime-hook-server-key``/``-val``):

* ``RunPodSandbox``: PreRunPodSandbox; labels, annotations, cgroup parent and resources
  merged into the sandbox config;
* ``CreateContainer``: PreCreateContainer; annotations, environment and resources merged
  into the container config;
* ``StartContainer``: PreStartContainer before (resources it asks for are applied with an
  ``UpdateContainerResources`` of their own), PostStartContainer after;
* ``UpdateContainerResources``: PreUpdateContainerResources, merged into the update;
* ``StopPodSandbox``/``StopContainer``: PostStopPodSandbox/PostStopContainer after.

The proxy remembers each sandbox's and container's description for the later calls that
only name an ID; started after the kubelet's pods exist, it lists them from the runtime.

Its server and its channels to the runtime take messages of up to 16 MiB each way
(:data:`~koordlet.runtimeproxy.hookservers.MAX_MESSAGE_BYTES`, the kubelet's CRI limit;
gRPC's default of 4 MiB would fail a large ``ListImages`` or ``ListContainers`` that the
runtime without the proxy would answer).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc

from koordinator.api import runtimehook as rh
from koordinator.protowire import ProtoError
from koordlet.runtimeproxy import cri
from koordlet.runtimeproxy.hookservers import CHANNEL_OPTIONS, HookServerError, HookServers, socket_target

log = logging.getLogger(__name__)

Forward = Callable[[str, bytes], Awaitable[bytes]]


class RuntimeProxy:
    def __init__(
        self,
        listen: Path,
        runtime_endpoint: str,
        image_endpoint: str,
        hooks: HookServers,
        *,
        skip: tuple[str, str] = (rh.SKIP_HOOK_SERVER_KEY, rh.SKIP_HOOK_SERVER_VALUE),
    ) -> None:
        self.listen = listen
        self.runtime_endpoint = runtime_endpoint
        self.image_endpoint = image_endpoint
        self.hooks = hooks
        self.skip = skip
        self.pods: dict[str, cri.PodInfo] = {}
        self.containers: dict[str, cri.ContainerInfo] = {}
        self._server: Any = None
        self._runtime: Any = None
        self._image: Any = None
        self._intercepts: dict[str, Callable[[bytes, Forward], Awaitable[bytes]]] = {
            cri.RUN_POD_SANDBOX: self._run_pod_sandbox,
            cri.STOP_POD_SANDBOX: self._stop_pod_sandbox,
            cri.REMOVE_POD_SANDBOX: self._remove_pod_sandbox,
            cri.CREATE_CONTAINER: self._create_container,
            cri.START_CONTAINER: self._start_container,
            cri.UPDATE_CONTAINER_RESOURCES: self._update_container_resources,
            cri.STOP_CONTAINER: self._stop_container,
            cri.REMOVE_CONTAINER: self._remove_container,
        }

    # --- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        self._runtime = grpc.aio.insecure_channel(
            socket_target(self.runtime_endpoint), options=CHANNEL_OPTIONS
        )
        same = socket_target(self.image_endpoint) == socket_target(self.runtime_endpoint)
        self._image = (
            self._runtime
            if same
            else grpc.aio.insecure_channel(socket_target(self.image_endpoint), options=CHANNEL_OPTIONS)
        )
        await self.recover()
        self.listen.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            self.listen.unlink()  # left by a proxy that was killed
        server = grpc.aio.server(options=CHANNEL_OPTIONS)
        server.add_generic_rpc_handlers([_Handler(self)])
        server.add_insecure_port(f"unix://{self.listen}")
        await server.start()
        self._server = server
        log.info("koord-runtime-proxy serving CRI on %s for %s", self.listen, self.runtime_endpoint)

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop(grace=2)
        for channel in {id(c): c for c in (self._runtime, self._image) if c is not None}.values():
            await channel.close()
        await self.hooks.close()

    async def recover(self) -> None:
        """What the runtime already runs (a proxy restarted under running pods)."""
        try:
            sandboxes = await self.forward(cri.LIST_POD_SANDBOX, b"")
            containers = await self.forward(cri.LIST_CONTAINERS, b"")
        except Exception as exc:  # the runtime is down: IDs are learnt as calls come
            log.warning("cannot list the runtime's pods (%s); hooks skip the ones it already runs", exc)
            return
        self.pods.update(cri.listed_sandboxes(sandboxes))
        self.containers.update(cri.listed_containers(containers))
        log.info("runtime runs %d sandboxes and %d containers", len(self.pods), len(self.containers))

    # --- forwarding ------------------------------------------------------------------------

    def _channel(self, method: str) -> Any:
        return self._image if method.startswith(f"/{cri.IMAGE_SERVICE}/") else self._runtime

    async def forward(self, method: str, request: bytes, limit_s: float | None = None) -> bytes:
        """The runtime's answer; grpc.aio.AioRpcError with its status when it refuses."""
        call = self._channel(method).unary_unary(method)
        answer: bytes = await call(request, timeout=limit_s)
        return answer

    async def unary(self, method: str, request: bytes, context: Any) -> bytes:
        timeout = context.time_remaining()

        async def forward(name: str, data: bytes) -> bytes:
            return await self.forward(name, data, timeout)

        intercept = self._intercepts.get(method)
        try:
            if intercept is None:
                return await forward(method, request)
            return await intercept(request, forward)
        except grpc.aio.AioRpcError as err:
            await context.abort(err.code(), err.details() or "")
        except HookServerError as exc:
            await context.abort(grpc.StatusCode.UNKNOWN, str(exc))
        except ProtoError as exc:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, f"koord-runtime-proxy: malformed {method}: {exc}"
            )
        return b""  # not reached: abort raises

    async def stream(self, method: str, request: bytes, context: Any) -> AsyncIterator[bytes]:
        call = self._channel(method).unary_stream(method)(request, timeout=context.time_remaining())
        try:
            async for message in call:
                yield message
        except grpc.aio.AioRpcError as err:
            await context.abort(err.code(), err.details() or "")

    # --- hooks -----------------------------------------------------------------------------

    def _skipped(self, pod: cri.PodInfo | None) -> bool:
        return pod is None or pod.skips_hooks(*self.skip)

    async def _run_pod_sandbox(self, request: bytes, forward: Forward) -> bytes:
        pod = cri.run_pod_sandbox(request)
        if not self._skipped(pod):
            payload = pod.hook_request().encode()
            hook = rh.HookType.PRE_RUN_POD_SANDBOX
            for response in await self.hooks.call(hook, payload, rh.PodSandboxHookResponse.decode):
                request = cri.apply_sandbox_hook(request, response)
            pod = cri.run_pod_sandbox(request)
        answer = await forward(cri.RUN_POD_SANDBOX, request)
        self.pods[cri.pod_sandbox_id(answer)] = pod
        return answer

    async def _stop_pod_sandbox(self, request: bytes, forward: Forward) -> bytes:
        answer = await forward(cri.STOP_POD_SANDBOX, request)
        pod = self.pods.get(cri.pod_sandbox_id(request))
        if pod is not None and not self._skipped(pod):
            await self._after(rh.HookType.POST_STOP_POD_SANDBOX, pod.hook_request().encode())
        return answer

    async def _remove_pod_sandbox(self, request: bytes, forward: Forward) -> bytes:
        answer = await forward(cri.REMOVE_POD_SANDBOX, request)
        pod_id = cri.pod_sandbox_id(request)
        self.pods.pop(pod_id, None)
        for container_id in [c for c, info in self.containers.items() if info.pod_id == pod_id]:
            del self.containers[container_id]
        return answer

    async def _after(self, hook: rh.HookType, payload: bytes) -> None:
        """A hook after the fact: the call already happened, so a failure is only logged."""
        decode = (
            rh.PodSandboxHookResponse.decode if hook.pod_level else rh.ContainerResourceHookResponse.decode
        )
        try:
            await self.hooks.call(hook, payload, decode)
        except HookServerError as exc:
            log.warning("%s", exc)

    async def _create_container(self, request: bytes, forward: Forward) -> bytes:
        pod_id, container, described = cri.create_container(request)
        pod = self.pods.setdefault(pod_id, described)
        if not self._skipped(pod):
            payload = container.hook_request(pod).encode()
            hook = rh.HookType.PRE_CREATE_CONTAINER
            for response in await self.hooks.call(hook, payload, rh.ContainerResourceHookResponse.decode):
                request = cri.apply_container_hook(request, response)
            container = cri.create_container(request)[1]
        answer = await forward(cri.CREATE_CONTAINER, request)
        self.containers[cri.container_id(answer)] = container
        return answer

    def _container(self, container_id: str) -> tuple[cri.ContainerInfo, cri.PodInfo] | None:
        container = self.containers.get(container_id)
        pod = self.pods.get(container.pod_id) if container is not None else None
        if container is None or pod is None or self._skipped(pod):
            return None
        return container, pod

    async def _start_container(self, request: bytes, forward: Forward) -> bytes:
        container_id = cri.container_id(request)
        known = self._container(container_id)
        if known is not None:
            container, pod = known
            payload = container.hook_request(pod, container_id).encode()
            hook = rh.HookType.PRE_START_CONTAINER
            for response in await self.hooks.call(hook, payload, rh.ContainerResourceHookResponse.decode):
                resources = response.container_resources
                if resources:
                    await forward(cri.UPDATE_CONTAINER_RESOURCES, cri.update_request(container_id, resources))
        answer = await forward(cri.START_CONTAINER, request)
        if known is not None:
            await self._after(rh.HookType.POST_START_CONTAINER, payload)
        return answer

    async def _update_container_resources(self, request: bytes, forward: Forward) -> bytes:
        container_id = cri.container_id(request)
        known = self._container(container_id)
        if known is not None:
            container, pod = known
            container.resources, container.annotations = cri.update_resources(request)
            payload = container.hook_request(pod, container_id).encode()
            hook = rh.HookType.PRE_UPDATE_CONTAINER_RESOURCES
            for response in await self.hooks.call(hook, payload, rh.ContainerResourceHookResponse.decode):
                request = cri.apply_update_hook(request, response)
            container.resources, container.annotations = cri.update_resources(request)
        return await forward(cri.UPDATE_CONTAINER_RESOURCES, request)

    async def _stop_container(self, request: bytes, forward: Forward) -> bytes:
        answer = await forward(cri.STOP_CONTAINER, request)
        container_id = cri.container_id(request)
        known = self._container(container_id)
        if known is not None:
            container, pod = known
            await self._after(
                rh.HookType.POST_STOP_CONTAINER, container.hook_request(pod, container_id).encode()
            )
        return answer

    async def _remove_container(self, request: bytes, forward: Forward) -> bytes:
        answer = await forward(cri.REMOVE_CONTAINER, request)
        self.containers.pop(cri.container_id(request), None)
        return answer


class _Handler(grpc.GenericRpcHandler):
    """gRPC's generic handler: every method, raw bytes both ways."""

    def __init__(self, proxy: RuntimeProxy) -> None:
        self.proxy = proxy

    def service(self, details: Any) -> Any:
        method: str = details.method
        if not method.startswith((f"/{cri.RUNTIME_SERVICE}/", f"/{cri.IMAGE_SERVICE}/")):
            return None  # UNIMPLEMENTED, as the runtime would answer
        if method in cri.STREAMING:

            async def relay(request: bytes, context: Any) -> AsyncIterator[bytes]:
                async for message in self.proxy.stream(method, request, context):
                    yield message

            return grpc.unary_stream_rpc_method_handler(relay)

        async def unary(request: bytes, context: Any) -> bytes:
            return await self.proxy.unary(method, request, context)

        return grpc.unary_unary_rpc_method_handler(unary)
