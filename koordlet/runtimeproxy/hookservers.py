"""The hook servers koord-runtime-proxy calls, from its configuration directory.

Each ``*.json`` file there (``/etc/runtime/hookserver.d``; the koordlet writes
``koordlet.json``) names a server's socket, the hook points it serves and its failure
policy. The directory is read again when a file in it changes, so a koordlet that restarts
on another socket is followed; a file that cannot be read is logged once and skipped.

A call goes to every server that serves the hook point, in file-name order. A server that
fails or does not answer within the timeout fails the CRI call under ``Fail``; under
``Ignore`` it is logged and the call goes on without its changes.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import grpc

from koordinator.api import runtimehook as rh

log = logging.getLogger(__name__)

CALL_TIMEOUT_S = 5.0


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
                configs.append(rh.HookServerConfig.from_json(path.read_text()))
            except (OSError, rh.HookServerConfigError) as exc:
                if self._bad.get(path.name) != str(exc):
                    log.warning("hook server configuration %s skipped: %s", path, exc)
                    self._bad[path.name] = str(exc)
        self._stamp, self._configs = stamp, configs
        log.info("hook servers: %s", ", ".join(c.remote_endpoint for c in configs) or "none")
        return configs

    def serving(self, hook: rh.HookType) -> list[rh.HookServerConfig]:
        return [c for c in self.configs() if hook in c.runtime_hooks]

    def _channel(self, endpoint: str) -> Any:
        channel = self._channels.get(endpoint)
        if channel is None:
            channel = self._channels[endpoint] = grpc.aio.insecure_channel(socket_target(endpoint))
        return channel

    async def call(self, hook: rh.HookType, payload: bytes) -> list[bytes]:
        """Each serving server's answer; HookServerError when one under Fail fails."""
        answers = []
        for config in self.serving(hook):
            method = self._channel(config.remote_endpoint).unary_unary(hook.method)
            try:
                answers.append(await method(payload, timeout=self.timeout))
            except grpc.aio.AioRpcError as err:
                where = f"hook server {config.remote_endpoint} failed at {hook}"
                reason = f"{where}: {err.code().name}: {err.details()}"
                if config.failure_policy is rh.FailurePolicy.FAIL:
                    raise HookServerError(reason) from None
                log.warning("%s (ignored: failure policy Ignore)", reason)
        return answers

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()
