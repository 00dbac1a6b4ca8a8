"""BlkIOReconcile plans: disks resolved from a fake sysfs and mount table, BE and pod throttles
and weights on v1 and v2, iocost on the root, resets of disks no longer configured."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from koordinator.api.extension.constants import ANNOTATION_POD_BLKIO_QOS
from koordinator.api.kubeqos import KubeQOSClass
from koordlet.qosmanager.strategies.blkio import BlkIOReconcile
from koordlet.system.blockdev import BlockDevices, lvm_volume_group, mount_device_number
from koordlet.system.cgroup.cgroupfs import CgroupFS
from koordlet.system.cgroup.registry import (
    BLKIO_COST_MODEL,
    BLKIO_COST_QOS,
    BLKIO_COST_WEIGHT,
    BLKIO_READ_BPS,
    BLKIO_READ_IOPS,
    BLKIO_WRITE_BPS,
    BLKIO_WRITE_IOPS,
)
from tests.fakes.host import FakeHost
from tests.fakes.pods import make_pod
from tests.koordlet.qosmanager.strategy_env import build_snapshot, cgroup_writes

THROTTLES = (BLKIO_READ_IOPS, BLKIO_READ_BPS, BLKIO_WRITE_IOPS, BLKIO_WRITE_BPS)


def make_disks(host: FakeHost) -> None:
    """sdb (8:16) with partition sdb1 (8:17); sdc (8:32) under LVM volume group vg-data (dm-0, 253:0)."""
    host.write("sys/block/sdb/dev", "8:16\n")
    host.write("sys/block/sdb/sdb1/dev", "8:17\n")
    host.write("sys/block/sdb/sdb1/partition", "1\n")
    host.write("sys/block/sdc/dev", "8:32\n")
    host.write("sys/block/dm-0/dev", "253:0\n")
    host.write("sys/block/dm-0/dm/name", "vg--data-lv1\n")
    host.write("sys/block/dm-0/dm/uuid", "LVM-Qx1\n")
    (host.root / "sys/block/dm-0/slaves/sdc").mkdir(parents=True)
    host.write("sys/block/loop0/dev", "7:0\n")


def be_blocks(*blocks: dict[str, Any], enable: bool = True) -> dict[str, Any]:
    return {"resourceQOSStrategy": {"beClass": {"blkioQOS": {"enable": enable, "blocks": list(blocks)}}}}


def throttles(relative: str, number: str, values=(0, 0, 0, 0)) -> list[tuple[str, str, object]]:
    return [(key, relative, f"{number} {v}") for key, v in zip(THROTTLES, values, strict=True)]


@pytest.fixture
def host(fake_host: FakeHost) -> FakeHost:
    make_disks(fake_host)
    return fake_host


def be_dir(host: FakeHost) -> str:
    return host.layout.qos_dir(KubeQOSClass.BEST_EFFORT)


def weight(host: FakeHost, relative: str, number: str, percent: int) -> list[tuple[str, str, object]]:
    """io.weight is part of v2; v1 has blkio.cost.weight only on Anolis (not on this fake)."""
    return [(BLKIO_COST_WEIGHT, relative, f"{number} {percent}")] if host.version == "v2" else []


# --- devices ---------------------------------------------------------------------------------------


def test_block_devices_from_sysfs(tmp_path):
    host = FakeHost(tmp_path, "v1")
    make_disks(host)
    devices = BlockDevices.scan(host.paths)
    assert devices.disks == {"dm-0": "253:0", "loop0": "7:0", "sdb": "8:16", "sdc": "8:32"}
    assert devices.partitions == {"sdb1": "sdb"}
    assert devices.disks_of("/dev/sdb") == ["sdb"]
    assert devices.disks_of("sdb1") == ["sdb"]
    assert devices.disks_of("/dev/dm-0") == ["sdc"]
    assert devices.disks_of("/dev/mapper/vg--data-lv1") == ["sdc"]
    assert devices.disks_of("/dev/nvme0n1") == []
    assert devices.volume_group_disks("vg-data") == ["sdc"]
    assert devices.volume_group_disks("vg") == []
    assert devices.names["8:17"] == "sdb1"


@pytest.mark.parametrize(
    ("name", "group"), [("vg-lv", "vg"), ("vg--data-lv1", "vg-data"), ("a--b-c--d", "a-b"), ("plain", None)]
)
def test_lvm_volume_group(name, group):
    assert lvm_volume_group(name) == group


def test_mount_device_number(tmp_path):
    host = FakeHost(tmp_path, "v1")
    host.write(
        "proc/1/mountinfo",
        "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n90 22 253:0 / /mnt/with\\040space rw - ext4 /dev/dm-0 rw\n",
    )
    assert mount_device_number(host.paths, "/mnt/with space") == "253:0"
    assert mount_device_number(host.paths, "/") == "8:1"
    assert mount_device_number(host.paths, "/nowhere") is None


# --- the BE class -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("case", "block", "number"),
    [
        ("a disk", {"name": "/dev/sdb", "type": "device"}, "8:16"),
        ("a partition means its disk", {"name": "/dev/sdb1", "type": "device"}, "8:16"),
        (
            "a mapper device means the disks under it",
            {"name": "/dev/mapper/vg--data-lv1", "type": "device"},
            "8:32",
        ),
        ("a volume group", {"name": "vg-data", "type": "volumegroup"}, "8:32"),
    ],
)
def test_be_throttles_and_weight(host, case, block, number):
    io = {"readIOPS": 1000, "writeBPS": 1048576, "ioWeightPercent": 60}
    plan = BlkIOReconcile().plan(build_snapshot(host, slo=be_blocks({**block, "ioCfg": io})))
    assert cgroup_writes(plan.updates) == [
        *throttles(be_dir(host), number, (1000, 0, 0, 1048576)),
        *weight(host, be_dir(host), number, 60),
    ], case


def test_defaults_are_unlimited_with_weight_100(host):
    plan = BlkIOReconcile().plan(build_snapshot(host, slo=be_blocks({"name": "sdc", "type": "device"})))
    assert cgroup_writes(plan.updates) == [
        *throttles(be_dir(host), "8:32"),
        *weight(host, be_dir(host), "8:32", 100),
    ]


@pytest.mark.parametrize(
    ("block", "note"),
    [
        ({"name": "/dev/nvme9n1", "type": "device"}, "device '/dev/nvme9n1': no disk found"),
        ({"name": "vg-idle", "type": "volumegroup"}, "volumegroup 'vg-idle': no disk found"),
        ({"name": "data", "type": "podvolume"}, "podvolume 'data' outside a pod annotation"),
    ],
)
def test_unresolved_blocks(host, block, note):
    plan = BlkIOReconcile().plan(build_snapshot(host, slo=be_blocks(block)))
    assert plan.empty
    assert note in plan.notes


def test_disks_no_longer_configured_are_reset(host):
    host.set(BLKIO_READ_BPS, be_dir(host), "8:48 2000")  # sdd, configured earlier
    plan = BlkIOReconcile().plan(build_snapshot(host, slo=be_blocks({"name": "sdb", "type": "device"})))
    assert cgroup_writes(plan.updates) == [
        *throttles(be_dir(host), "8:16"),
        *weight(host, be_dir(host), "8:16", 100),
        *throttles(be_dir(host), "8:48"),
        *weight(host, be_dir(host), "8:48", 100),
    ]


def test_node_slo_disabled_resets_what_is_there(host):
    host.set(BLKIO_WRITE_IOPS, be_dir(host), "8:16 300")
    plan = BlkIOReconcile().plan(build_snapshot(host))
    assert cgroup_writes(plan.updates) == [
        *throttles(be_dir(host), "8:16"),
        *weight(host, be_dir(host), "8:16", 100),
    ]
    # disabled with blocks listed: the same
    disabled = be_blocks({"name": "sdb", "type": "device", "ioCfg": {"readIOPS": 5}}, enable=False)
    assert BlkIOReconcile().plan(build_snapshot(host, slo=disabled)).updates == plan.updates


def test_nothing_configured_and_nothing_there(host):
    assert BlkIOReconcile().plan(build_snapshot(host)).empty


def test_no_reset_while_a_block_is_unresolved(host):
    host.set(BLKIO_READ_BPS, be_dir(host), "8:48 2000")
    slo = be_blocks({"name": "sdb", "type": "device"}, {"name": "/dev/sdd", "type": "device"})
    plan = BlkIOReconcile().plan(build_snapshot(host, slo=slo))
    assert cgroup_writes(plan.updates) == [
        *throttles(be_dir(host), "8:16"),
        *weight(host, be_dir(host), "8:16", 100),
    ]
    assert f"{be_dir(host)}: disks 8:48 not reset while a block is unresolved" in plan.notes


def test_ls_and_lsr_blocks_are_not_supported(host):
    slo = {
        "resourceQOSStrategy": {
            "lsClass": {"blkioQOS": {"enable": True, "blocks": [{"name": "sdb", "type": "device"}]}}
        }
    }
    plan = BlkIOReconcile().plan(build_snapshot(host, slo=slo))
    assert plan.empty
    assert "lsClass: block I/O configs are only supported for BE pods" in plan.notes


# --- pods -----------------------------------------------------------------------------------------------


def volume_pod(
    host: FakeHost, volumes: list[dict[str, Any]], blocks: list[dict[str, Any]], *, qos: str | None = "BE"
):
    builder = make_pod("batch").container("main", cid="containerd://b1")
    if qos:
        builder.qos(qos)
    pod = builder.build()
    pod["spec"]["volumes"] = volumes
    pod["metadata"]["annotations"][ANNOTATION_POD_BLKIO_QOS] = json.dumps({"blocks": blocks})
    pod_dir = host.add_pod("BestEffort", builder.uid, ["containerd://b1"])
    mount = (
        host.paths.var_lib_kubelet / "pods" / builder.uid / "volumes" / "kubernetes.io~csi" / "data" / "mount"
    )
    host.write(
        "proc/1/mountinfo",
        f"22 1 8:1 / / rw - ext4 /dev/sda1 rw\n95 22 253:0 / {mount} rw - ext4 /dev/dm-0 rw\n",
    )
    return pod, pod_dir


def test_pod_csi_volume(host):
    pod, pod_dir = volume_pod(
        host,
        [{"name": "data", "csi": {"driver": "local.csi"}}],
        [{"name": "data", "type": "podvolume", "ioCfg": {"readBPS": 5000}}],
    )
    plan = BlkIOReconcile().plan(build_snapshot(host, pods=[pod]))
    assert cgroup_writes(plan.updates) == [
        *throttles(pod_dir, "8:32", (0, 5000, 0, 0)),
        *weight(host, pod_dir, "8:32", 100),
    ]


def test_pod_device_block(host):
    pod, pod_dir = volume_pod(host, [], [{"name": "/dev/sdb", "type": "device", "ioCfg": {"writeIOPS": 10}}])
    plan = BlkIOReconcile().plan(build_snapshot(host, pods=[pod]))
    assert cgroup_writes(plan.updates) == [
        *throttles(pod_dir, "8:16", (0, 0, 10, 0)),
        *weight(host, pod_dir, "8:16", 100),
    ]


def test_pod_pvc_volume_is_skipped_with_a_note(host):
    pod, _ = volume_pod(
        host,
        [{"name": "data", "persistentVolumeClaim": {"claimName": "c"}}],
        [{"name": "data", "type": "podvolume"}],
    )
    plan = BlkIOReconcile().plan(build_snapshot(host, pods=[pod]))
    assert plan.empty
    assert "default/batch: volume 'data' is a PVC; its PV name is not known here, skipped" in plan.notes


@pytest.mark.parametrize("change", ["no qos label", "pending", "no annotation"])
def test_pods_left_alone(host, change):
    pod, _ = volume_pod(
        host, [], [{"name": "/dev/sdb", "type": "device"}], qos=None if change == "no qos label" else "BE"
    )
    if change == "pending":
        pod["status"]["phase"] = "Pending"
    if change == "no annotation":
        del pod["metadata"]["annotations"][ANNOTATION_POD_BLKIO_QOS]
    assert BlkIOReconcile().plan(build_snapshot(host, pods=[pod])).empty


# --- iocost on the root ---------------------------------------------------------------------------------


def with_iocost(root: Path, qos: str = "", model: str = "") -> FakeHost:
    host = FakeHost(root, "v2")
    make_disks(host)
    host.cgroups.path(BLKIO_COST_QOS, "").write_text(qos)
    host.cgroups.path(BLKIO_COST_MODEL, "").write_text(model)
    return host


def root_blocks(*blocks: dict[str, Any]) -> dict[str, Any]:
    return {"resourceQOSStrategy": {"cgroupRoot": {"blkioQOS": {"enable": True, "blocks": list(blocks)}}}}


def test_iocost_qos_and_auto_model(tmp_path):
    host = with_iocost(tmp_path)
    slo = root_blocks(
        {"name": "sdb", "type": "device", "ioCfg": {"readLatency": 2000, "writeLatencyPercent": 90}}
    )
    plan = BlkIOReconcile().plan(build_snapshot(host, slo=slo))
    assert cgroup_writes(plan.updates) == [
        (BLKIO_COST_QOS, "", "8:16 enable=1 ctrl=user rpct=95 rlat=2000 wpct=90 wlat=3000"),
        (BLKIO_COST_MODEL, "", "8:16 ctrl=auto"),
    ]
    cgroups = CgroupFS.detect(host.paths)
    for update in plan.updates:  # the registry accepts them for the kernel
        cgroups.render(update.key, update.value)  # type: ignore[union-attr]


def test_iocost_user_model_and_removal(tmp_path):
    host = with_iocost(
        tmp_path, qos="8:32 enable=1 ctrl=user rpct=95 rlat=3000 wpct=95 wlat=3000\n8:48 enable=0\n"
    )
    io = {
        "enableUserModel": True,
        "modelReadBPS": 100,
        "modelWriteBPS": 200,
        "modelReadSeqIOPS": 300,
        "modelWriteSeqIOPS": 400,
        "modelReadRandIOPS": 500,
        "modelWriteRandIOPS": 600,
    }
    plan = BlkIOReconcile().plan(
        build_snapshot(host, slo=root_blocks({"name": "sdb", "type": "device", "ioCfg": io}))
    )
    assert cgroup_writes(plan.updates) == [
        (BLKIO_COST_QOS, "", "8:16 enable=1 ctrl=user rpct=95 rlat=3000 wpct=95 wlat=3000"),
        (
            BLKIO_COST_MODEL,
            "",
            "8:16 ctrl=user rbps=100 rseqiops=300 rrandiops=500 wbps=200 wseqiops=400 wrandiops=600",
        ),
        (BLKIO_COST_QOS, "", "8:32 enable=0"),  # enabled before, no longer configured; 8:48 is already off
    ]


def test_no_iocost_in_the_kernel(host):
    plan = BlkIOReconcile().plan(build_snapshot(host, slo=root_blocks({"name": "sdb", "type": "device"})))
    assert plan.empty
    assert "cgroupRoot: this kernel has no iocost (blkio.cost.qos / io.cost.qos)" in plan.notes


def test_gate(host):
    assert BlkIOReconcile().enabled(build_snapshot(host)) == (False, "feature gate BlkIOReconcile is off")
    assert BlkIOReconcile().enabled(build_snapshot(host, gates={"BlkIOReconcile": True})) == (True, "")
