"""koord-runtime-proxy end to end in one process: a kubelet-like client, the proxy, the
koordlet's runtime hook server on a fake host, and a fake runtime that records what reaches
it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from koordinator import protowire as pw
from koordinator.api import runtimehook as rh
from koordinator.api.extension.device import ANNOTATION_DEVICE_ALLOCATED
from koordinator.api.extension.resources import ANNOTATION_EXTENDED_RESOURCE_SPEC, BATCH_CPU, BATCH_MEMORY
from koordlet.executor import ResourceUpdateExecutor
from koordlet.runtimehooks.framework import HookBase, HookManager
from koordlet.runtimehooks.protocol import ContainerContext
from koordlet.runtimehooks.proxyserver import HookServerOptions, RuntimeHookServer
from koordlet.runtimehooks.registry import hooks
from koordlet.runtimehooks.transport import HookRunner
from koordlet.runtimeproxy import cri
from koordlet.runtimeproxy.hookservers import HookServers
from koordlet.runtimeproxy.server import RuntimeProxy
from tests.fakes.host import FakeHost
from tests.koordlet.runtimehooks.conftest import facts
from tests.koordlet.runtimeproxy import crimsg
from tests.koordlet.runtimeproxy.fakeruntime import FakeCriRuntime

QOS = "koordinator.sh/qosClass"
BE_SLO = {"resourceQOSStrategy": {"beClass": {"cpuQOS": {"enable": True, "schedIdle": 1}}}}
BATCH = {BATCH_CPU: "500", BATCH_MEMORY: "256Mi"}


@dataclass
class Stack:
    host: FakeHost
    runtime: FakeCriRuntime
    proxy: RuntimeProxy
    koordlet: RuntimeHookServer
    channel: grpc.aio.Channel

    async def call(self, method: str, request: bytes) -> bytes:
        call: Any = self.channel.unary_unary(method)
        answer: bytes = await call(request, timeout=10)
        return answer


async def _stack(tmp_path: Path, manager: HookManager, policy=rh.FailurePolicy.IGNORE) -> Stack:
    host = FakeHost(tmp_path / "host", "v1", driver="cgroupfs", features={"cpu.idle"})
    node = facts(host, slo=BE_SLO, gates={"GPUEnvInject": True})
    runtime = FakeCriRuntime(tmp_path / "containerd.sock")
    await runtime.start()
    options = HookServerOptions(
        tmp_path / "koordlet.sock", str(tmp_path / "koordlet.sock"), tmp_path / "hookserver.d", policy
    )
    koordlet = RuntimeHookServer(
        HookRunner(manager, lambda: node, ResourceUpdateExecutor(node.cgroups)), options
    )
    assert await koordlet.start()
    proxy = RuntimeProxy(
        tmp_path / "proxy" / "runtimeproxy.sock",
        str(runtime.socket),
        str(runtime.socket),
        HookServers(tmp_path / "hookserver.d"),
    )
    await proxy.start()
    channel = grpc.aio.insecure_channel(f"unix://{proxy.listen}")
    return Stack(host, runtime, proxy, koordlet, channel)


@pytest.fixture
async def stack(tmp_path) -> AsyncIterator[Stack]:
    built = await _stack(tmp_path, HookManager(hooks()))
    yield built
    await _close(built)


async def _close(stack: Stack) -> None:
    await stack.channel.close()
    await stack.proxy.stop()
    await stack.koordlet.stop()
    await stack.runtime.stop()


def _be_config(uid: str = "u-be", **annotations: str):
    recorded = json.dumps({"containers": {"main": {"requests": BATCH, "limits": BATCH}}})
    return crimsg.sandbox_config(
        "batch",
        uid,
        {QOS: "BE"},
        {ANNOTATION_EXTENDED_RESOURCE_SPEC: recorded, **annotations},
        f"/kubepods/besteffort/pod{uid}",
    )


def test_the_koordlet_announces_itself(stack):
    config = rh.HookServerConfig.from_json((stack.koordlet.config_dir / "koordlet.json").read_text())
    assert config.remote_endpoint == str(stack.koordlet.address)
    assert config.failure_policy is rh.FailurePolicy.IGNORE
    assert set(config.runtime_hooks) == {
        rh.HookType.PRE_RUN_POD_SANDBOX,
        rh.HookType.POST_STOP_POD_SANDBOX,
        rh.HookType.PRE_CREATE_CONTAINER,
        rh.HookType.PRE_START_CONTAINER,
        rh.HookType.PRE_UPDATE_CONTAINER_RESOURCES,
    }


async def test_a_be_pod_is_created_with_its_batch_resources(stack):
    pod_dir = stack.host.add_pod("BestEffort", "u-be")
    config = _be_config()
    sandbox = pw.string(pw.fields(await stack.call(cri.RUN_POD_SANDBOX, crimsg.run_pod_sandbox(config))), 1)
    # the pod cgroup got its batch quota and idle flag before the sandbox ran
    assert stack.host.get("cpu.cfs_quota_us", pod_dir) == 50000
    assert stack.host.get("cpu.idle", pod_dir) == 1
    container = pw.string(
        pw.fields(await stack.call(cri.CREATE_CONTAINER, crimsg.create_container(sandbox, config))), 1
    )
    [created] = stack.runtime.requests(cri.CREATE_CONTAINER)
    resources = crimsg.container_resources(created)
    assert pw.int64(resources, 2) == 50000  # quota from batch-cpu limits
    assert pw.int64(resources, 3) == 512  # shares from batch-cpu requests
    assert pw.int64(resources, 4) == 256 << 20
    assert pw.int64(resources, 5) == 1000  # the kubelet's OOM score, untouched
    assert pw.string(pw.message(pw.fields(created), 2) or {}, crimsg.UNKNOWN_FIELD) == "kept"
    # StartContainer: the PreStartContainer answer is applied first, then the start goes through
    await stack.call(cri.START_CONTAINER, crimsg.id_request(container))
    methods = [name for name, _ in stack.runtime.calls]
    assert methods[-2:] == [cri.UPDATE_CONTAINER_RESOURCES, cri.START_CONTAINER]
    # an update keeps the batch values the kubelet does not know about
    await stack.call(
        cri.UPDATE_CONTAINER_RESOURCES, crimsg.update_request(container, cpu_shares=2, cpu_quota=-1)
    )
    update = stack.runtime.requests(cri.UPDATE_CONTAINER_RESOURCES)[-1]
    assert cri.update_resources(update)[0] == rh.LinuxContainerResources(
        cpu_quota=50000, cpu_shares=512, memory_limit_in_bytes=256 << 20
    )


async def test_gpu_environment_reaches_the_container(stack):
    allocated = {"gpu": [{"minor": 2, "resources": {"koordinator.sh/gpu-core": "100"}}]}
    config = crimsg.sandbox_config(
        "train",
        "u-gpu",
        {QOS: "LS"},
        {ANNOTATION_DEVICE_ALLOCATED: json.dumps(allocated)},
        "/kubepods/burstable/podu-gpu",
    )
    await stack.call(cri.CREATE_CONTAINER, crimsg.create_container("sb-x", config, envs={"PATH": "/bin"}))
    [created] = stack.runtime.requests(cri.CREATE_CONTAINER)
    assert crimsg.container_envs(created) == {"PATH": "/bin", "NVIDIA_VISIBLE_DEVICES": "2"}


async def test_a_pod_asking_to_skip_the_hooks_passes_unchanged(stack):
    config = _be_config("u-skip", **{rh.SKIP_HOOK_SERVER_KEY: "true"})
    request = crimsg.create_container("sb-1", config)
    await stack.call(cri.RUN_POD_SANDBOX, crimsg.run_pod_sandbox(config))
    await stack.call(cri.CREATE_CONTAINER, request)
    assert stack.runtime.requests(cri.CREATE_CONTAINER) == [request]
    assert stack.runtime.requests(cri.RUN_POD_SANDBOX) == [crimsg.run_pod_sandbox(config)]


async def test_other_calls_pass_through_with_their_status(stack):
    version = await stack.call(f"/{cri.RUNTIME_SERVICE}/Version", b"\x0a\x020.1")
    assert pw.string(pw.fields(version), 2) == "containerd"
    assert stack.runtime.requests(f"/{cri.RUNTIME_SERVICE}/Version") == [b"\x0a\x020.1"]
    await stack.call(f"/{cri.IMAGE_SERVICE}/ListImages", b"")
    assert stack.runtime.requests(f"/{cri.IMAGE_SERVICE}/ListImages") == [b""]
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stack.call(cri.START_CONTAINER, crimsg.id_request("nope"))
    assert err.value.code() is grpc.StatusCode.NOT_FOUND
    assert "container 'nope' not found" in (err.value.details() or "")
    events = stack.channel.unary_stream(f"/{cri.RUNTIME_SERVICE}/GetContainerEvents")(b"", timeout=10)
    assert [pw.string(pw.fields(e), 1) async for e in events] == ["c-a", "c-b"]


class Boom(HookBase):
    NAME = "AAA-Boom"

    def container(self, ctx: ContainerContext) -> None:
        raise RuntimeError("no batch for you")


@pytest.mark.parametrize("policy", [rh.FailurePolicy.FAIL, rh.FailurePolicy.IGNORE])
async def test_a_failing_hook_follows_the_failure_policy(tmp_path, policy):
    manager = HookManager([Boom(), *hooks()], failure_policy=rh.FailurePolicy.FAIL)
    stack = await _stack(tmp_path, manager, policy)
    try:
        request = crimsg.create_container("sb-1", _be_config())
        if policy is rh.FailurePolicy.FAIL:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await stack.call(cri.CREATE_CONTAINER, request)
            assert "hook AAA-Boom failed at PreCreateContainer: no batch for you" in (
                err.value.details() or ""
            )
            assert stack.runtime.requests(cri.CREATE_CONTAINER) == []  # never reached the runtime
        else:
            await stack.call(cri.CREATE_CONTAINER, request)
            assert stack.runtime.requests(cri.CREATE_CONTAINER) == [request]  # as the kubelet sent it
    finally:
        await _close(stack)


async def test_the_proxy_learns_running_pods_at_start(tmp_path):
    stack = await _stack(tmp_path, HookManager(hooks()))
    try:
        config = _be_config()
        sandbox = pw.string(
            pw.fields(await stack.call(cri.RUN_POD_SANDBOX, crimsg.run_pod_sandbox(config))), 1
        )
        container = pw.string(
            pw.fields(await stack.call(cri.CREATE_CONTAINER, crimsg.create_container(sandbox, config))), 1
        )
        restarted = RuntimeProxy(
            stack.proxy.listen,
            str(stack.runtime.socket),
            str(stack.runtime.socket),
            HookServers(tmp_path / "hookserver.d"),
        )
        # a proxy restarted under running pods lists them, and hooks their next calls
        await stack.proxy.stop()
        await restarted.start()
        stack.proxy = restarted
        assert restarted.containers[container].pod_id == sandbox
        assert restarted.pods[sandbox].annotations[ANNOTATION_EXTENDED_RESOURCE_SPEC]
        await stack.call(cri.START_CONTAINER, crimsg.id_request(container))
        assert [n for n, _ in stack.runtime.calls][-2:] == [
            cri.UPDATE_CONTAINER_RESOURCES,
            cri.START_CONTAINER,
        ]
    finally:
        await _close(stack)
