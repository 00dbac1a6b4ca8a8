"""The NRI plug-in against a fake containerd: registration, the hooks' adjustments and pod
cgroup writes, synchronization applying nothing, reconnects and failures."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator

import pytest

from koordinator.api.extension.device import ANNOTATION_DEVICE_ALLOCATED
from koordinator.api.extension.numa import ANNOTATION_RESOURCE_STATUS
from koordinator.api.extension.resources import ANNOTATION_EXTENDED_RESOURCE_SPEC, BATCH_CPU, BATCH_MEMORY
from koordinator.api.runtimehook import FailurePolicy
from koordlet.executor import ResourceUpdateExecutor
from koordlet.runtimehooks.framework import HookBase, HookManager
from koordlet.runtimehooks.nri import messages as m
from koordlet.runtimehooks.nri.plugin import NriOptions, NriPlugin
from koordlet.runtimehooks.nri.ttrpc import TtrpcError
from koordlet.runtimehooks.protocol import ContainerContext, NodeFacts, PodContext
from koordlet.runtimehooks.registry import hooks
from koordlet.runtimehooks.transport import HookRunner
from tests.fakes.host import FakeHost
from tests.koordlet.runtimehooks.conftest import facts
from testsupport.nri import FakeNriRuntime

QOS = "koordinator.sh/qosClass"
BE_SLO = {"resourceQOSStrategy": {"beClass": {"cpuQOS": {"enable": True, "schedIdle": 1}}}}
CID = "c" * 64


def sandbox(host: FakeHost, uid: str, kube_qos: str, labels=None, annotations=None) -> m.PodSandbox:
    return m.PodSandbox(
        id="sb-" + uid,
        name="pod-" + uid,
        uid=uid,
        namespace="default",
        labels=dict(labels or {}),
        annotations=dict(annotations or {}),
        cgroup_parent="/" + host.pod_dir(kube_qos, uid),
    )


def container(pod: m.PodSandbox, cid: str = CID, name: str = "main") -> m.Container:
    return m.Container(
        id=cid,
        pod_sandbox_id=pod.id,
        name=name,
        resources=m.LinuxResources(cpu_shares=2, cpu_quota=-1, memory_limit=-1),
    )


class Node:
    """A fake host, the plug-in on it and a fake containerd it talks to."""

    def __init__(self, tmp_path, host: FakeHost, node: NodeFacts, manager: HookManager | None = None, **kw):
        self.host = host
        self.node = node
        self.executor = ResourceUpdateExecutor(node.cgroups)
        self.socket = tmp_path / "nri.sock"
        runner = HookRunner(manager or HookManager(hooks()), lambda: self.node, self.executor)
        self.plugin = NriPlugin(NriOptions(self.socket, backoff_duration=0.02, backoff_cap=0.1), runner)
        self.runtime = FakeNriRuntime(self.socket, **kw)

    def writes(self) -> list[str]:
        return [event.target for event in self.executor.audit]


@pytest.fixture
async def be_node(tmp_path) -> AsyncIterator[Node]:
    host = FakeHost(tmp_path / "host", "v1", driver="cgroupfs", features={"cpu.idle"})
    node = Node(tmp_path, host, facts(host, slo=BE_SLO))
    await node.runtime.start()
    task = asyncio.create_task(node.plugin.run())
    await node.runtime.wait_plugin()
    yield node
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    await node.runtime.stop()


def be_sandbox(host: FakeHost, uid: str = "u-be") -> m.PodSandbox:
    spec = {
        "containers": {
            "main": {"requests": {BATCH_CPU: "500"}, "limits": {BATCH_CPU: "1000", BATCH_MEMORY: "1Gi"}}
        }
    }
    return sandbox(
        host, uid, "BestEffort", {QOS: "BE"}, {ANNOTATION_EXTENDED_RESOURCE_SPEC: json.dumps(spec)}
    )


async def test_registers_and_subscribes_to_upstreams_events(be_node):
    plugin = be_node.runtime.plugins[0]
    assert (plugin.name, plugin.index) == ("koordlet_nri", "00")
    wanted = [
        m.Event.RUN_POD_SANDBOX,
        m.Event.REMOVE_POD_SANDBOX,
        m.Event.CREATE_CONTAINER,
        m.Event.UPDATE_CONTAINER,
    ]
    assert plugin.events == sum(e.bit for e in wanted)
    assert be_node.plugin.runtime == ("containerd", "v2.2.9")
    assert be_node.plugin.registrations == 1


async def test_a_be_pod_gets_batch_resources_before_its_container_starts(be_node):
    host = be_node.host
    pod = be_sandbox(host)
    pod_dir = host.add_pod("BestEffort", pod.uid)  # the kubelet makes it before the sandbox
    await be_node.runtime.run_pod_sandbox(pod)
    # the pod cgroup: batch quota and memory, idle (BE schedIdle)
    assert host.get("cpu.cfs_quota_us", pod_dir) == 100000
    assert host.get("memory.limit_in_bytes", pod_dir) == 1 << 30
    assert host.get("cpu.idle", pod_dir) == 1
    answer = await be_node.runtime.create_container(pod, container(pod))
    # the container is created with them: CPU shares from batch-cpu requests, quota from limits
    assert answer.adjust.resources == m.LinuxResources(memory_limit=1 << 30, cpu_shares=512, cpu_quota=100000)
    assert answer.adjust.env == {}
    assert answer.updates == []


async def test_an_lsr_container_is_created_pinned(be_node):
    host = be_node.host
    pod = sandbox(host, "u-lsr", "Guaranteed", {QOS: "LSR"}, {ANNOTATION_RESOURCE_STATUS: '{"cpuset":"2-3"}'})
    host.add_pod("Guaranteed", pod.uid)
    await be_node.runtime.run_pod_sandbox(pod)
    answer = await be_node.runtime.create_container(pod, container(pod))
    assert answer.adjust.resources.cpuset_cpus == "2-3"
    assert answer.adjust.resources.cpu_quota == -1  # the pinned container's quota is lifted


async def test_a_gpu_container_gets_its_environment(tmp_path):
    host = FakeHost(tmp_path / "host", "v2")
    node = Node(tmp_path, host, facts(host, gates={"GPUEnvInject": True}))
    await node.runtime.start()
    task = asyncio.create_task(node.plugin.run())
    try:
        await node.runtime.wait_plugin()
        allocated = {"gpu": [{"minor": 1, "resources": {"koordinator.sh/gpu-core": "100"}}]}
        pod = sandbox(
            host, "u-gpu", "Burstable", {QOS: "LS"}, {ANNOTATION_DEVICE_ALLOCATED: json.dumps(allocated)}
        )
        answer = await node.runtime.create_container(pod, container(pod))
        assert answer.adjust.env == {"NVIDIA_VISIBLE_DEVICES": "1"}
    finally:
        task.cancel()
        await node.runtime.stop()


async def test_update_container_answers_with_an_update(be_node):
    pod = be_sandbox(be_node.host)
    updates = await be_node.runtime.update_container(pod, container(pod), m.LinuxResources(cpu_shares=2))
    assert updates == [
        m.ContainerUpdate(CID, m.LinuxResources(memory_limit=1 << 30, cpu_shares=512, cpu_quota=100000))
    ]
    # a pod the hooks leave alone gets no update at all
    plain = sandbox(be_node.host, "u-ls", "Burstable", {QOS: "LS"})
    assert await be_node.runtime.update_container(plain, container(plain), m.LinuxResources()) == []


async def test_reconnect_after_a_runtime_restart_applies_nothing_twice(be_node):
    host = be_node.host
    pod = be_sandbox(host)
    host.add_pod("BestEffort", pod.uid)
    await be_node.runtime.run_pod_sandbox(pod)
    created = container(pod)
    await be_node.runtime.create_container(pod, created)
    before = be_node.writes()
    assert before  # the pod cgroup was written
    pods, containers = list(be_node.runtime.pods), list(be_node.runtime.containers)
    await be_node.runtime.stop()
    be_node.runtime = FakeNriRuntime(be_node.socket, pods=pods, containers=containers)
    await be_node.runtime.start()
    await be_node.runtime.wait_plugin()
    assert be_node.plugin.registrations == 2
    # Synchronize handed over the running pod and container: nothing is updated or written
    assert be_node.runtime.sync_answers == [m.SynchronizeResponse()]
    assert be_node.writes() == before


async def test_waits_for_a_missing_socket_then_connects(tmp_path, caplog):
    caplog.set_level("INFO", logger="koordlet.runtimehooks.nri.plugin")
    host = FakeHost(tmp_path / "host", "v1")
    node = Node(tmp_path, host, facts(host))
    task = asyncio.create_task(node.plugin.run())
    try:
        await asyncio.sleep(0.3)  # several retries with no socket: one log line, no crash
        assert sum("no NRI socket" in r.message for r in caplog.records) == 1
        await node.runtime.start()
        await node.runtime.wait_plugin()
        assert node.plugin.connected.is_set()
    finally:
        task.cancel()
        await node.runtime.stop()


async def test_configure_config_chooses_events_and_bad_config_is_refused(tmp_path):
    host = FakeHost(tmp_path / "host", "v1")
    node = Node(tmp_path, host, facts(host), config="events: [CreateContainer, StopContainer]")
    await node.runtime.start()
    task = asyncio.create_task(node.plugin.run())
    try:
        plugin = await node.runtime.wait_plugin()
        assert plugin.events == m.Event.CREATE_CONTAINER.bit | m.Event.STOP_CONTAINER.bit
        pod = sandbox(host, "u-1", "Burstable")
        assert await node.runtime.stop_container(pod, container(pod)) == []
        bad = m.ConfigureRequest("events: [Bogus]").encode()
        with pytest.raises(TtrpcError, match="unknown NRI event 'bogus'"):
            await plugin.session.call(m.PLUGIN_SERVICE, "Configure", bad, 2)
        assert node.plugin.events == plugin.events  # the last good configuration stays
    finally:
        task.cancel()
        await node.runtime.stop()


class Boom(HookBase):
    NAME = "AAA-Boom"

    def container(self, ctx: ContainerContext) -> None:
        raise RuntimeError("no cpuset for you")

    def pod(self, ctx: PodContext) -> None:
        raise RuntimeError("no pod for you")


@pytest.mark.parametrize("policy", [FailurePolicy.FAIL, FailurePolicy.IGNORE])
async def test_failure_policy(tmp_path, policy):
    host = FakeHost(tmp_path / "host", "v1", driver="cgroupfs", features={"cpu.idle"})
    manager = HookManager([Boom(), *hooks()], failure_policy=policy)
    node = Node(tmp_path, host, facts(host, slo=BE_SLO), manager)
    await node.runtime.start()
    task = asyncio.create_task(node.plugin.run())
    try:
        await node.runtime.wait_plugin()
        pod = be_sandbox(host)
        host.add_pod("BestEffort", pod.uid)
        if policy is FailurePolicy.FAIL:
            # the runtime is told why, and so fails the container's creation
            with pytest.raises(
                TtrpcError, match="hook AAA-Boom failed at PreCreateContainer: no cpuset for you"
            ):
                await node.runtime.create_container(pod, container(pod))
            with pytest.raises(TtrpcError, match="no pod for you"):
                await node.runtime.run_pod_sandbox(pod)
        else:
            answer = await node.runtime.create_container(pod, container(pod))
            assert answer.adjust.resources.cpu_quota == 100000  # the other hooks ran
    finally:
        task.cancel()
        await node.runtime.stop()


async def test_remove_pod_sandbox_runs_the_cleanup(be_node):
    removed = []

    class Cleanup(HookBase):
        NAME = "Cleanup"

        def remove_pod(self, ctx: PodContext) -> None:
            removed.append(ctx.pod.uid)

    be_node.plugin.runner.manager = HookManager([Cleanup()])
    pod = be_sandbox(be_node.host)
    await be_node.runtime.remove_pod_sandbox(pod)
    assert removed == [pod.uid]
