"""koord-runtime-proxy with hook servers that misbehave or are configured loosely: a hook name
the proxy does not know (skipped alone), an answer that is not the hook's response message
(the failure policy decides), and CRI answers larger than gRPC's default 4 MiB (passed, up to
the kubelet's 16 MiB)."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from koordinator import protowire as pw
from koordinator.api import runtimehook as rh
from koordinator.protowire import Writer
from koordlet.runtimeproxy import cri
from koordlet.runtimeproxy.hookservers import HookServers
from koordlet.runtimeproxy.server import RuntimeProxy
from tests.koordlet.runtimeproxy import crimsg
from tests.koordlet.runtimeproxy.fakeruntime import FakeCriRuntime

Answer = Callable[[str, bytes], Awaitable[bytes]]
MiB = 1 << 20


class FakeHookServer(grpc.GenericRpcHandler):
    """A hook server that answers every hook with what ``answer(method, request)`` returns,
    bytes as they are (so it can answer what no RuntimeHookService would)."""

    def __init__(self, socket: Path, answer: Answer) -> None:
        self.socket = socket
        self.answer = answer
        self.methods: list[str] = []
        self._server: Any = None

    async def start(self) -> None:
        self._server = grpc.aio.server()
        self._server.add_generic_rpc_handlers([self])
        self._server.add_insecure_port(f"unix://{self.socket}")
        await self._server.start()

    async def stop(self) -> None:
        await self._server.stop(grace=0)

    def service(self, details: Any) -> Any:
        method: str = details.method

        async def unary(request: bytes, context: Any) -> bytes:
            self.methods.append(method)
            return await self.answer(method, request)

        return grpc.unary_unary_rpc_method_handler(unary)


@dataclass
class Proxied:
    runtime: FakeCriRuntime
    hook: FakeHookServer
    proxy: RuntimeProxy
    config_dir: Path
    channel: grpc.aio.Channel

    async def call(self, method: str, request: bytes) -> bytes:
        call: Any = self.channel.unary_unary(method)
        answer: bytes = await call(request, timeout=10)
        return answer


def _announce(config_dir: Path, endpoint: Path, policy: str, hooks: list[str]) -> Path:
    path = config_dir / "koordlet.json"
    path.write_text(
        json.dumps({"remote-endpoint": str(endpoint), "failure-policy": policy, "runtime-hooks": hooks})
    )
    return path


@pytest.fixture
async def proxied(tmp_path: Path) -> AsyncIterator[Callable[[Answer, str, list[str]], Awaitable[Proxied]]]:
    built: list[Proxied] = []

    async def build(answer: Answer, policy: str, hooks: list[str]) -> Proxied:
        runtime = FakeCriRuntime(tmp_path / "containerd.sock")
        await runtime.start()
        hook = FakeHookServer(tmp_path / "koordlet.sock", answer)
        await hook.start()
        config_dir = tmp_path / "hookserver.d"
        config_dir.mkdir()
        _announce(config_dir, hook.socket, policy, hooks)
        proxy = RuntimeProxy(
            tmp_path / "proxy" / "runtimeproxy.sock",
            str(runtime.socket),
            str(runtime.socket),
            HookServers(config_dir),
        )
        await proxy.start()
        # the kubelet's CRI client takes answers of up to 16 MiB
        channel = grpc.aio.insecure_channel(
            f"unix://{proxy.listen}", options=[("grpc.max_receive_message_length", 16 * MiB)]
        )
        stack = Proxied(runtime, hook, proxy, config_dir, channel)
        built.append(stack)
        return stack

    yield build
    for stack in built:
        await stack.channel.close()
        await stack.proxy.stop()
        await stack.hook.stop()
        await stack.runtime.stop()


def _sandbox(uid: str = "u1") -> bytes:
    config = crimsg.sandbox_config("web", uid, {"app": "web"}, {}, f"/kubepods/pod{uid}")
    return crimsg.run_pod_sandbox(config)


async def _annotate(method: str, request: bytes) -> bytes:
    return rh.PodSandboxHookResponse(annotations={"hooked": method.rsplit("/", 1)[-1]}).encode()


async def _garbage(method: str, request: bytes) -> bytes:
    return b"\xff\xff\xff"  # a truncated varint: no protobuf message at all


async def test_unknown_hook_names_are_skipped_and_the_known_ones_still_called(proxied, caplog):
    hooks = ["PreRunPodSandbox", "PreRemoveRunPodSandbox", "PreFlightCheck", "PreFlightCheck"]
    with caplog.at_level(logging.INFO, logger="koordlet.runtimeproxy.hookservers"):
        stack = await proxied(_annotate, "Ignore", hooks)
        await stack.call(cri.RUN_POD_SANDBOX, _sandbox())
        # the file is read again when it changes: the unknown name is not logged again
        path = stack.config_dir / "koordlet.json"
        os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
        await stack.call(cri.RUN_POD_SANDBOX, _sandbox("u2"))
    assert stack.hook.methods == [rh.HookType.PRE_RUN_POD_SANDBOX.method] * 2
    sent = [cri.run_pod_sandbox(r) for r in stack.runtime.requests(cri.RUN_POD_SANDBOX)]
    assert [pod.annotations for pod in sent] == [{"hooked": "PreRunPodSandboxHook"}] * 2
    messages = [r.getMessage() for r in caplog.records]
    assert [m for m in messages if "PreFlightCheck" in m] == [
        f"hook server configuration {path}: unknown runtime hook 'PreFlightCheck' ignored"
    ]
    assert [m for m in messages if "PreRemoveRunPodSandbox" in m] == [
        f"hook server configuration {path}: PreRemoveRunPodSandbox is never called by the proxy"
    ]


async def test_an_undecodable_answer_under_ignore_lets_the_call_through_unchanged(proxied, caplog):
    stack = await proxied(_garbage, "Ignore", ["PreRunPodSandbox", "PreCreateContainer"])
    request = _sandbox()
    with caplog.at_level(logging.WARNING, logger="koordlet.runtimeproxy.hookservers"):
        answer = await stack.call(cri.RUN_POD_SANDBOX, request)
        sandbox = pw.string(pw.fields(answer), 1)
        config = crimsg.sandbox_config("web", "u1", {"app": "web"}, {}, "/kubepods/podu1")
        create = crimsg.create_container(sandbox, config)
        await stack.call(cri.CREATE_CONTAINER, create)
    assert sandbox.startswith("sb-")
    assert stack.runtime.requests(cri.RUN_POD_SANDBOX) == [request]  # as the kubelet sent it
    assert stack.runtime.requests(cri.CREATE_CONTAINER) == [create]
    assert any(
        "failed at PreRunPodSandbox: its answer is not a PreRunPodSandbox response" in r.getMessage()
        and "ignored: failure policy Ignore" in r.getMessage()
        for r in caplog.records
    )


async def test_an_undecodable_answer_under_fail_fails_the_call(proxied):
    stack = await proxied(_garbage, "Fail", ["PreRunPodSandbox"])
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stack.call(cri.RUN_POD_SANDBOX, _sandbox())
    assert err.value.code() is grpc.StatusCode.UNKNOWN
    assert "its answer is not a PreRunPodSandbox response" in (err.value.details() or "")
    assert stack.runtime.requests(cri.RUN_POD_SANDBOX) == []  # never reached the runtime


async def test_answers_above_grpcs_default_limit_pass_through(proxied):
    stack = await proxied(_annotate, "Ignore", [])
    images = b"".join(
        bytes(Writer().message(1, Writer().string(1, f"sha256:{i:064x}").string(99, "x" * 4096)))
        for i in range(1280)
    )
    assert 5 * MiB < len(images) < 16 * MiB
    original = stack.runtime.service

    def service(details: Any) -> Any:
        if details.method == f"/{cri.IMAGE_SERVICE}/ListImages":

            async def list_images(request: bytes, context: Any) -> bytes:
                return images

            return grpc.unary_unary_rpc_method_handler(list_images)
        return original(details)

    stack.runtime.service = service
    assert await stack.call(f"/{cri.IMAGE_SERVICE}/ListImages", b"") == images
    # and a request as large reaches the runtime
    big = bytes(Writer().string(99, "y" * (6 * MiB)))
    await stack.call(f"/{cri.RUNTIME_SERVICE}/Version", big)
    assert stack.runtime.requests(f"/{cri.RUNTIME_SERVICE}/Version") == [big]
