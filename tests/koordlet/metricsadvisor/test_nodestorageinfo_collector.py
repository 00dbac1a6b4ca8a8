"""NodeStorageInfoCollector over recorded lsblk, vgs, lvs and findmnt outputs."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from koordlet.metriccache import kinds
from koordlet.metricsadvisor.collectors.nodestorageinfo import NodeStorageInfoCollector
from koordlet.system.localstorage import (
    FINDMNT,
    LSBLK,
    LVS,
    VGS,
    LocalStorageError,
    NodeLocalStorageInfo,
    mapper_name,
    read_local_storage_info,
)
from tests.koordlet.metricsadvisor.conftest import make_context

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
    collector.collect(1.0)
    stored = ctx.kv.get(kinds.NODE_LOCAL_STORAGE_INFO)
    assert isinstance(stored, NodeLocalStorageInfo)
    assert stored.vg_disk_map["yoda-pool0"] == "/dev/vdb"
    assert collector.started
    outputs[FINDMNT] = "garbage\n"
    collector.collect(2.0)
    assert ctx.kv.get(kinds.NODE_LOCAL_STORAGE_INFO) is stored
    status = ctx.metrics.registry.get_sample_value
    counter = "koordlet_collect_node_local_storage_info_status_total"
    assert status(counter, {"node": "node-1", "status": "succeeded"}) == 1
    assert status(counter, {"node": "node-1", "status": "failed"}) == 1


def test_collector_needs_the_blkio_gate(fake_host, states):
    assert not NodeStorageInfoCollector(make_context(fake_host, states)).enabled()
