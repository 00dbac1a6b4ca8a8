"""NodeStorageInfoCollector over recorded lsblk, vgs, lvs and findmnt outputs; the reading
runs on a thread of its own, so a slow vgs/lvs never holds the other collectors."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import pytest

from koordlet.metriccache import kinds
from koordlet.metricsadvisor.collectors.nodestorageinfo import NodeStorageInfoCollector
from koordlet.metricsadvisor.framework import CollectorRunner
from koordlet.system.localstorage import (
    FINDMNT,
    LSBLK,
    LVS,
    VGS,
    LocalStorageError,
    NodeLocalStorageInfo,
    mapper_name,
    read_local_storage_info,
    run_command,
    scan_runner,
)
from tests.koordlet.metricsadvisor.conftest import make_context
from tests.polling import eventually

#: a bound on every wait for the reading thread (never reached unless the code is broken)
WAIT_S = 30.0

LV = "yoda-15199981-7229-45e9-b3a0-b5b30a6a162b"
MOUNT = f"/var/lib/kubelet/pods/0ef5/volumes/kubernetes.io~csi/{LV}/mount"
OUTPUTS: dict[tuple[str, ...], str | None] = {
    LSBLK: (
        'NAME="vda" TYPE="disk" MAJ:MIN="253:0"\n'
        'NAME="vda1" TYPE="part" MAJ:MIN="253:1"\n'
        'NAME="vdb" TYPE="disk" MAJ:MIN="253:16"\n'
        'NAME="vdb3" TYPE="part" MAJ:MIN="253:19"\n'
        'NAME="vdc" TYPE="disk" MAJ:MIN="253:32"\n'
        f'NAME="yoda--pool0-{LV.replace("-", "--")}" TYPE="lvm" MAJ:MIN="252:0"\n'
        'NAME="sr0" TYPE="rom" MAJ:MIN="11:0"\n'
    ),
    VGS: "  yoda-pool0 1 /dev/vdb3\n  data 1 /dev/vdc\n  wide 2 /dev/vda1\n",
    LVS: f"  {LV} yoda-pool0\n",
    FINDMNT: (f'TARGET="/" SOURCE="/dev/vda1"\nTARGET="{MOUNT}" SOURCE="{mapper_name("yoda-pool0", LV)}"\n'),
}


def recorded(outputs: dict[tuple[str, ...], str | None]) -> Callable[[Sequence[str]], str | None]:
    def run(args: Sequence[str]) -> str | None:
        return outputs[tuple(args)]

    return run


def test_layout_from_the_four_commands():
    info = read_local_storage_info(recorded(OUTPUTS))
    assert info.disk_number_map == {"/dev/vda": "253:0", "/dev/vdb": "253:16", "/dev/vdc": "253:32"}
    assert info.number_disk_map == {"253:0": "/dev/vda", "253:16": "/dev/vdb", "253:32": "/dev/vdc"}
    assert info.partition_disk_map == {"/dev/vda1": "/dev/vda", "/dev/vdb3": "/dev/vdb"}
    assert info.vg_disk_map == {"yoda-pool0": "/dev/vdb", "data": "/dev/vdc"}  # 2 PVs: not mapped
    lv_path = "/dev/mapper/yoda--pool0-yoda--15199981--7229--45e9--b3a0--b5b30a6a162b"
    assert info.lv_mapper_vg_map == {lv_path: "yoda-pool0"}
    assert info.mp_disk_map == {"/": "/dev/vda1", MOUNT: lv_path}


def test_hosts_without_lvm_tools_have_no_volume_groups():
    info = read_local_storage_info(recorded({**OUTPUTS, VGS: None, LVS: None}))
    assert info.vg_disk_map == {}
    assert info.lv_mapper_vg_map == {}
    assert info.partition_disk_map["/dev/vdb3"] == "/dev/vdb"


@pytest.mark.parametrize(
    ("command", "output", "message"),
    [
        pytest.param(LSBLK, None, "lsblk is not installed", id="no-lsblk"),
        pytest.param(LSBLK, 'NAME="vda" TYPE="disk"\n', "lsblk line", id="lsblk-columns"),
        pytest.param(VGS, "  only-two 1\n", "vgs line", id="vgs-columns"),
        pytest.param(LVS, "  a b c\n", "lvs line", id="lvs-columns"),
        pytest.param(FINDMNT, 'TARGET="/"\n', "findmnt line", id="findmnt-columns"),
    ],
)
def test_bad_output_is_an_error(command, output, message):
    with pytest.raises(LocalStorageError, match=message):
        read_local_storage_info(recorded({**OUTPUTS, command: output}))


def test_collector_stores_the_layout_and_keeps_the_last_good_one(fake_host, states):
    outputs: dict[tuple[str, ...], str | None] = dict(OUTPUTS)
    ctx = make_context(fake_host, states, {"BlkIOReconcile": True})
    collector = NodeStorageInfoCollector(ctx, run=recorded(outputs))
    assert collector.enabled()
    assert collector.interval == 1.0
    try:
        collector.collect(1.0)
        assert collector.wait_idle(WAIT_S)
        stored = ctx.kv.get(kinds.NODE_LOCAL_STORAGE_INFO)
        assert isinstance(stored, NodeLocalStorageInfo)
        assert stored.vg_disk_map["yoda-pool0"] == "/dev/vdb"
        assert collector.started
        outputs[FINDMNT] = "garbage\n"
        collector.collect(2.0)
        assert collector.wait_idle(WAIT_S)
        assert ctx.kv.get(kinds.NODE_LOCAL_STORAGE_INFO) is stored
    finally:
        collector.close()
    status = ctx.metrics.registry.get_sample_value
    counter = "koordlet_collect_node_local_storage_info_status_total"
    assert status(counter, {"node": "node-1", "status": "succeeded"}) == 1
    assert status(counter, {"node": "node-1", "status": "failed"}) == 1


def test_collector_needs_the_blkio_gate(fake_host, states):
    assert not NodeStorageInfoCollector(make_context(fake_host, states)).enabled()


class Ticking:
    """Another collector of the shared worker (node usage, say): journals its ticks."""

    NAME = "NodeResourceCollector"

    def __init__(self, interval: float, journal: list[str]) -> None:
        self.interval = interval
        self.started = False
        self.threads: set[str] = set()
        self._journal = journal

    def enabled(self) -> bool:
        return True

    def collect(self, now: float) -> None:
        self.threads.add(threading.current_thread().name)
        self._journal.append("usage tick")
        self.started = True

    def close(self) -> None:
        pass


class LockedVgs:
    """The four commands, with ``vgs`` waiting on the LVM lock until the test releases it."""

    def __init__(self, journal: list[str]) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.threads: list[str] = []
        self._journal = journal

    def __call__(self, args: Sequence[str]) -> str | None:
        if args[0] == "vgs":
            self.threads.append(threading.current_thread().name)
            self._journal.append("vgs waits")
            self.entered.set()
            self.release.wait(WAIT_S)
            self._journal.append("vgs done")
        return OUTPUTS[tuple(args)]


async def test_a_reading_stuck_in_vgs_holds_neither_the_other_collectors_nor_a_second_reading(
    fake_host_v1, states
):
    journal: list[str] = []
    ctx = make_context(
        fake_host_v1, states, {"BlkIOReconcile": True}, collect_node_storage_info_interval=0.02
    )
    commands = LockedVgs(journal)
    storage = NodeStorageInfoCollector(ctx, run=commands)
    usage = Ticking(0.02, journal)
    runner = CollectorRunner([usage, storage])
    runner.start()
    try:
        await eventually(commands.entered.is_set, within=WAIT_S)
        ticks, skipped = journal.count("usage tick"), storage.skipped
        # the worker goes on: the usage collector ticks, the storage ticks are skipped
        await eventually(
            lambda: journal.count("usage tick") >= ticks + 5 and storage.skipped >= skipped + 3,
            within=WAIT_S,
        )
        assert "vgs done" not in journal
        assert ctx.kv.get(kinds.NODE_LOCAL_STORAGE_INFO) is None
        assert not runner.all_started()  # the storage collector has no data yet
        commands.release.set()
        await eventually(lambda: ctx.kv.get(kinds.NODE_LOCAL_STORAGE_INFO) is not None, within=WAIT_S)
        await runner.wait_started()
        assert storage.started
    finally:
        commands.release.set()
        await runner.stop()
    waits = journal.index("vgs waits")
    assert journal[waits + 1 : waits + 6] == ["usage tick"] * 5  # while vgs waited
    # one reading at a time, on its own thread; the usage collector on the shared worker
    assert commands.threads[0] == "koordlet-storage-info"
    assert set(commands.threads) == {"koordlet-storage-info"}
    assert all(name.startswith("koordlet-collect") for name in usage.threads)
    assert journal.count("vgs waits") == journal.count("vgs done")


def test_a_reading_that_ends_after_close_is_not_published(fake_host_v1, states):
    journal: list[str] = []
    ctx = make_context(fake_host_v1, states, {"BlkIOReconcile": True})
    commands = LockedVgs(journal)
    collector = NodeStorageInfoCollector(ctx, run=commands)
    collector.collect(1.0)
    assert commands.entered.wait(WAIT_S)
    collector.close()  # does not wait for the command
    commands.release.set()
    assert collector.wait_idle(WAIT_S)
    collector.collect(2.0)  # closed: no new reading
    assert collector.wait_idle(WAIT_S)
    assert journal == ["vgs waits", "vgs done"]
    assert ctx.kv.get(kinds.NODE_LOCAL_STORAGE_INFO) is None
    assert not collector.started


def test_a_failing_reading_is_said_once_and_keeps_the_thread(fake_host_v1, states, caplog):
    ctx = make_context(fake_host_v1, states, {"BlkIOReconcile": True})
    outputs: dict[tuple[str, ...], str | None] = {**OUTPUTS, LSBLK: None}
    collector = NodeStorageInfoCollector(ctx, run=recorded(outputs))
    try:
        for tick in range(3):
            collector.collect(float(tick))
            assert collector.wait_idle(WAIT_S)
        outputs[LSBLK] = OUTPUTS[LSBLK]
        collector.collect(3.0)
        assert collector.wait_idle(WAIT_S)
    finally:
        collector.close()
    assert [r.getMessage() for r in caplog.records if "local storage" in r.getMessage()] == [
        "cannot read the node's local storage: lsblk is not installed"
    ]
    assert isinstance(ctx.kv.get(kinds.NODE_LOCAL_STORAGE_INFO), NodeLocalStorageInfo)


def test_the_commands_of_a_reading_share_one_deadline():
    now = [100.0]
    run = scan_runner(timeout=10.0, clock=lambda: now[0])
    assert run(("echo", "NAME=vda")) == "NAME=vda\n"
    now[0] = 110.0  # the reading's 10 s are spent: the next command is not started
    with pytest.raises(LocalStorageError, match="vgs not run: the reading's 10 s are spent"):
        run(VGS)


def test_a_command_past_its_time_is_killed():
    with pytest.raises(LocalStorageError, match=r"sleep did not finish within 0\.2 s"):
        run_command(("sleep", "60"), timeout=0.2)


def test_an_absent_program_is_none():
    assert run_command(("koordlet-no-such-program-lsblk",)) is None
