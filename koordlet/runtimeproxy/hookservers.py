"""The hook servers koord-runtime-proxy calls, from its configuration directory.

Each ``*.json`` file there (``/etc/runtime/hookserver.d``; the koordlet writes
``koordlet.json``) names a server's socket, the hook points it serves and its failure
policy. The directory is read again when a file in it changes, so a koordlet that restarts
on another socket is followed; a file that cannot be read is logged once and skipped. A hook
name the proxy does not know is skipped alone, logged once per name (upstream matches names
as strings, so an unknown one is never called); the server is still called at the others.

A call goes to every server that serves the hook point, in file-name order. A server that
fails, does not answer within the timeout, or answers with bytes that are not the hook's
response message, fails the CRI call under ``Fail``; under ``Ignore`` it is logged and the
call goes on without its changes (upstream treats all three as a failed hook dispatch).

The channels to the servers accept messages of up to :data:`MAX_MESSAGE_BYTES`, as the
proxy's own (the kubelet's CRI limit).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import grpc

from koordinator.api import runtimehook as rh
from koordinator.protowire import ProtoError

log = logging.getLogger(__name__)

CALL_TIMEOUT_S = 5.0
#: the largest gRPC message the proxy sends or receives: the kubelet's CRI limit (16 MiB),
#: which containerd's server allows too (gRPC's default receive limit is 4 MiB)
MAX_MESSAGE_BYTES = 16 << 20
#: gRPC options of every channel and server of the proxy
CHANNEL_OPTIONS = (
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
)

Decoded = TypeVar("Decoded")


class HookServerError(Exception):
    """A hook server under the Fail policy failed: the CRI call fails with this message."""


def socket_target(endpoint: str) -> str:
    """A gRPC target for a socket path (``unix:///run/x.sock`` or ``/run/x.sock``)."""
    return endpoint if endpoint.startswith("unix:") else f"unix://{endpoint}"


class HookServers:
    def __init__(self, config_dir: Path, timeout: float = CALL_TIMEOUT_S) -> None:
        self.config_dir = config_dir
        self.timeout = timeout
        self._stamp: tuple[tuple[str, int], ...] = ()
        self._configs: list[rh.HookServerConfig] = []
        self._bad: dict[str, str] = {}
        self._ignored: set[str] = set()
        self._channels: dict[str, Any] = {}

    def configs(self) -> list[rh.HookServerConfig]:
        """The servers configured now (the directory re-read when a file changed)."""
        try:
            files = sorted(self.config_dir.glob("*.json"))
            stamp = tuple((f.name, f.stat().st_mtime_ns) for f in files)
        except OSError:
            files, stamp = [], ()
        if stamp == self._stamp:
            return self._configs
        configs = []
        for path in files:
            try:
                config = rh.HookServerConfig.from_json(path.read_text())
            except (OSError, rh.HookServerConfigError) as exc:
                if self._bad.get(path.name) != str(exc):
                    log.warning("hook server configuration %s skipped: %s", path, exc)
                    self._bad[path.name] = str(exc)
                continue
            configs.append(config)
            for name in config.ignored_hooks:
                if name not in self._ignored:
                    self._ignored.add(name)
                    if name in rh.UNCALLED_HOOKS:
                        log.info("hook server configuration %s: %s is never called by the proxy", path, name)
                    else:
                        log.warning(
                            "hook server configuration %s: unknown runtime hook %r ignored", path, name
                        )
        self._stamp, self._configs = stamp, configs
        log.info("hook servers: %s", ", ".join(c.remote_endpoint for c in configs) or "none")
        return configs

    def serving(self, hook: rh.HookType) -> list[rh.HookServerConfig]:
        return [c for c in self.configs() if hook in c.runtime_hooks]

    def _channel(self, endpoint: str) -> Any:
        channel = self._channels.get(endpoint)
        if channel is None:
            channel = grpc.aio.insecure_channel(socket_target(endpoint), options=CHANNEL_OPTIONS)
            self._channels[endpoint] = channel
        return channel

    async def call(
        self, hook: rh.HookType, payload: bytes, decode: Callable[[bytes], Decoded]
    ) -> list[Decoded]:
        """Each serving server's answer, decoded; HookServerError when one under Fail fails
        (an answer ``decode`` refuses with a ProtoError is a failure)."""
        answers = []
        for config in self.serving(hook):
            method = self._channel(config.remote_endpoint).unary_unary(hook.method)
            where = f"hook server {config.remote_endpoint} failed at {hook}"
            try:
                answers.append(decode(await method(payload, timeout=self.timeout)))
            except grpc.aio.AioRpcError as err:
                self._failed(config, f"{where}: {err.code().name}: {err.details()}")
            except ProtoError as err:
                self._failed(config, f"{where}: its answer is not a {hook} response: {err}")
        return answers

    @staticmethod
    def _failed(config: rh.HookServerConfig, reason: str) -> None:
        if config.failure_policy is rh.FailurePolicy.FAIL:
            raise HookServerError(reason)
        log.warning("%s (ignored: failure policy Ignore)", reason)

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()
