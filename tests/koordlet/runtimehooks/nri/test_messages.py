"""NRI messages: field numbers of ``api.proto`` checked on known bytes, every message round-trips."""

from __future__ import annotations

import pytest

from koordinator import protowire as pw
from koordlet.runtimehooks.nri import messages as m


def test_register_plugin_request_bytes():
    data = m.RegisterPluginRequest("koordlet_nri", "00").encode()
    assert data == b"\x0a\x0ckoordlet_nri\x12\x0200"


def test_upstream_event_mask():
    # koordlet's subscription: RunPodSandbox (bit 0), RemovePodSandbox (2), CreateContainer (3),
    # UpdateContainer (7)
    mask = m.event_mask(["RunPodSandbox,RemovePodSandbox,CreateContainer,UpdateContainer"])
    assert mask == 0b1000_1101
    assert m.event_mask(["all"]) == (1 << 14) - 1
    assert m.event_mask(["pod"]) == sum(e.bit for e in m.Event if "POD" in e.name)
    assert m.event_mask(["container"]) == sum(e.bit for e in m.Event if "CONTAINER" in e.name)
    assert m.event_mask(["createcontainer", " updatecontainer"]) == (1 << 3) | (1 << 7)
    with pytest.raises(ValueError, match="unknown NRI event 'run_pod_sandbox'"):
        m.event_mask(["run_pod_sandbox"])


def test_configure_response_carries_events_in_field_2():
    assert m.configure_response(141) == b"\x10\x8d\x01"
    assert m.configure_response_events(b"\x10\x8d\x01") == 141


def test_adjustment_layout():
    adjust = m.ContainerAdjustment(
        env={"A": "1"}, resources=m.LinuxResources(cpu_quota=-1, cpuset_cpus="2-3")
    )
    msg = pw.fields(bytes(adjust.encode()))
    env = pw.messages(msg, 4)
    assert [(pw.string(e, 1), pw.string(e, 2)) for e in env] == [("A", "1")]
    resources = pw.message(pw.message(msg, 6) or {}, 2) or {}
    cpu = pw.message(resources, 2) or {}
    assert pw.int64(pw.message(cpu, 2) or {}, 1) == -1  # OptionalInt64 quota
    assert pw.message(cpu, 1) is None  # shares left alone: no wrapper at all
    assert pw.string(cpu, 6) == "2-3"


def test_an_optional_zero_is_present():
    resources = m.LinuxResources(cpu_quota=0)
    assert m.LinuxResources.decode(pw.fields(bytes(resources.encode()))).cpu_quota == 0
    assert m.LinuxResources.decode(pw.fields(b"")).cpu_quota is None


POD = m.PodSandbox(
    id="sb1",
    name="web",
    uid="u-1",
    namespace="default",
    labels={"koordinator.sh/qosClass": "BE"},
    annotations={"a": "b"},
    runtime_handler="runc",
    cgroup_parent="/kubepods/besteffort/podu-1",
    pid=42,
)
CONTAINER = m.Container(
    id="c1",
    pod_sandbox_id="sb1",
    name="main",
    state=1,
    labels={"l": "v"},
    annotations={"x": "y"},
    args=["sh", "-c", ""],
    env=["PATH=/bin"],
    resources=m.LinuxResources(memory_limit=1 << 30, cpu_shares=2, cpu_quota=-1, cpu_period=100000),
    cgroups_path="/kubepods/besteffort/podu-1/c1",
    pid=7,
)


@pytest.mark.parametrize(
    "message",
    [
        m.ConfigureRequest("events: [all]", "containerd", "v2", 5_000_000_000, 2_000_000_000),
        m.SynchronizeRequest([POD], [CONTAINER], True),
        m.SynchronizeResponse([m.ContainerUpdate("c1", m.LinuxResources(cpuset_cpus="1"), True)], True),
        m.ContainerRequest(POD, CONTAINER),
        m.ContainerRequest(
            POD, CONTAINER, m.LinuxResources(cpu_shares=512, rdt_class="gold", unified={"k": "v"})
        ),
        m.CreateContainerResponse(
            m.ContainerAdjustment(
                env={"NVIDIA_VISIBLE_DEVICES": "0"},
                mounts=[m.Mount("/dst", "/src", "bind", ("rbind", "ro"))],
                resources=m.LinuxResources(memory_limit=-1),
            ),
            [m.ContainerUpdate("c0")],
        ),
        m.UpdatesResponse([m.ContainerUpdate("c1", m.LinuxResources(cpu_quota=50000))]),
        m.StateChangeEvent(m.Event.RUN_POD_SANDBOX, POD),
        m.StateChangeEvent(m.Event.START_CONTAINER, POD, CONTAINER),
        m.RegisterPluginRequest("p", "10"),
    ],
    ids=lambda msg: type(msg).__name__,
)
def test_round_trip(message):
    assert type(message).decode(message.encode()) == message
