"""The koordlet's runtime hook server: what koord-runtime-proxy calls around CRI calls.

A gRPC server (``runtime.v1alpha1.RuntimeHookService``) on ``--runtime-hooks-addr``, and the
file that tells the proxy about it: ``<--runtime-hooks-config-path>/koordlet.json`` with the
socket as the host sees it (``--runtime-hooks-host-endpoint``), the failure policy
(``--runtime-hooks-failure-policy``) and the hook points served (all but
``--runtime-hooks-disable-stages``). Each hook runs the same hooks as NRI and the reconciler
(:mod:`koordlet.runtimehooks.transport`):

* ``PreRunPodSandboxHook``: pod-level hooks, written to the pod cgroup; the answer carries
  the pod's resources;
* ``PreCreateContainerHook``: container-level hooks; the answer carries the container's
  CPU shares, CFS quota, cpuset and memory limit and its environment, which the proxy puts
  into the CreateContainer call;
* ``PreStartContainerHook``: the same once the container (and its cgroup) exists: the
  executor writes what CRI has no field for (``cpu.idle``, group identity) before it starts;
* ``PreUpdateContainerResourcesHook``: the same, merged into the update;
* ``PostStopPodSandboxHook``: the hooks' cleanup.

A hook that fails under ``--runtime-hooks-plugin-failure-policy=Fail`` answers with an error
status; the proxy's failure policy then decides whether the CRI call fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from koordinator.api import runtimehook as rh
from koordinator.protowire import ProtoError
from koordlet.runtimehooks.protocol import Resources, Stage
from koordlet.runtimehooks.transport import HookRunner, Sandbox, TransportHookError, origin_resources

log = logging.getLogger(__name__)

CONFIG_FILE = "koordlet.json"
#: the hook points served, and the stage each runs the hooks at
STAGES = {
    rh.HookType.PRE_RUN_POD_SANDBOX: Stage.PRE_RUN_POD_SANDBOX,
    rh.HookType.POST_STOP_POD_SANDBOX: Stage.POST_STOP_POD_SANDBOX,
    rh.HookType.PRE_CREATE_CONTAINER: Stage.PRE_CREATE_CONTAINER,
    rh.HookType.PRE_START_CONTAINER: Stage.PRE_START_CONTAINER,
    rh.HookType.PRE_UPDATE_CONTAINER_RESOURCES: Stage.PRE_UPDATE_CONTAINER_RESOURCES,
}


def cri_resources(resources: Resources) -> rh.LinuxContainerResources:
    """The resources the runtime applies itself, as CRI carries them (0: not specified)."""
    origin = origin_resources(resources)
    return rh.LinuxContainerResources(
        cpu_quota=origin.cfs_quota or 0,
        cpu_shares=origin.cpu_shares or 0,
        memory_limit_in_bytes=origin.memory_limit or 0,
        cpuset_cpus=origin.cpuset or "",
    )


def _pod_sandbox(request: rh.PodSandboxHookRequest) -> Sandbox:
    meta = request.pod_meta
    return Sandbox(
        meta.name, meta.namespace, meta.uid, request.labels, request.annotations, request.cgroup_parent
    )


def _container_sandbox(request: rh.ContainerResourceHookRequest) -> Sandbox:
    meta = request.pod_meta
    return Sandbox(
        meta.name,
        meta.namespace,
        meta.uid,
        request.pod_labels,
        request.pod_annotations,
        request.pod_cgroup_parent,
    )


@dataclass(frozen=True)
class HookServerOptions:
    """``--runtime-hooks-addr`` and friends."""

    address: Path
    host_endpoint: str
    config_dir: Path
    failure_policy: rh.FailurePolicy = rh.FailurePolicy.IGNORE
    disabled: tuple[rh.HookType, ...] = ()


class RuntimeHookServer:
    def __init__(self, runner: HookRunner, options: HookServerOptions) -> None:
        self.runner = runner
        self.address = options.address
        self.config_dir = options.config_dir
        self.hooks = tuple(h for h in STAGES if h not in options.disabled)
        self.config = rh.HookServerConfig(options.host_endpoint, options.failure_policy, self.hooks)
        self._server: Any = None

    # --- the hooks (worker threads) --------------------------------------------------------

    def pod_hook(self, hook: rh.HookType, payload: bytes) -> bytes:
        request = rh.PodSandboxHookRequest.decode(payload)
        ctx = self.runner.run_pod(_pod_sandbox(request), STAGES[hook])
        resources = cri_resources(ctx.response.resources)
        return rh.PodSandboxHookResponse(resources=resources or None).encode()

    def container_hook(self, hook: rh.HookType, payload: bytes) -> bytes:
        request = rh.ContainerResourceHookRequest.decode(payload)
        ctx = self.runner.run_container(
            _container_sandbox(request), request.container_name, request.container_id, STAGES[hook]
        )
        resources = cri_resources(ctx.response.resources)
        return rh.ContainerResourceHookResponse(
            container_resources=resources or None, container_envs=dict(ctx.response.env)
        ).encode()

    def handle(self, hook: rh.HookType, payload: bytes) -> bytes:
        if hook not in self.hooks:
            return b""  # a hook point disabled here: nothing to change
        return self.pod_hook(hook, payload) if hook.pod_level else self.container_hook(hook, payload)

    # --- gRPC ------------------------------------------------------------------------------

    def _method(self, hook: rh.HookType) -> Callable[[bytes, Any], Awaitable[bytes]]:
        import grpc

        async def call(payload: bytes, context: Any) -> bytes:
            try:
                return await asyncio.to_thread(self.handle, hook, payload)
            except ProtoError as exc:
                code, message = grpc.StatusCode.INVALID_ARGUMENT, f"malformed request: {exc}"
            except TransportHookError as exc:
                code, message = grpc.StatusCode.INTERNAL, str(exc)
            await context.abort(code, message)
            return b""  # not reached: abort raises

        return call

    async def start(self) -> bool:
        """Serve and announce; False (logged) when gRPC is not installed or the socket's
        directory is missing (the runtime proxy is not in use on this node)."""
        try:
            import grpc
        except ImportError:
            log.info(
                "runtime hook server not started: grpcio is not installed (koordinator-py[runtimeproxy])"
            )
            return False
        if not self.address.parent.is_dir():
            log.info("runtime hook server not started: %s does not exist", self.address.parent)
            return False
        with contextlib.suppress(FileNotFoundError):
            self.address.unlink()  # a socket left by the previous koordlet
        handlers: dict[str, Any] = {
            hook.method.rsplit("/", 1)[1]: grpc.unary_unary_rpc_method_handler(self._method(hook))
            for hook in rh.HookType
        }
        server = grpc.aio.server()
        server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(rh.SERVICE, handlers)])
        server.add_insecure_port(f"unix://{self.address}")
        await server.start()
        self._server = server
        self._announce()
        log.info("runtime hook server on %s (hooks: %s)", self.address, ", ".join(self.hooks))
        return True

    def _announce(self) -> None:
        try:
            self.config_dir.mkdir(parents=True, exist_ok=True)
            path = self.config_dir / CONFIG_FILE
            temporary = path.with_suffix(".tmp")
            temporary.write_text(self.config.to_json())
            temporary.replace(path)  # the proxy never reads half a file
        except OSError as exc:
            log.warning("runtime hook server: cannot write %s: %s", self.config_dir / CONFIG_FILE, exc)

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop(grace=1)
            self._server = None
