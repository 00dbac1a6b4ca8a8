"""RDMA PF and SR-IOV VF discovery on fake sysfs trees laid out like the kernel's."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from koordlet.system.devices import rdma
from koordlet.system.devices.rdma import RDMADevice, VirtualFunction, discover
from koordlet.system.probe import probe
from tests.fakes.host import FakeHost
from tests.koordlet.system.devices.sysfs import (
    CX5,
    DISPLAY,
    INFINIBAND,
    MELLANOX,
    NETWORK,
    FakeSysfs,
)

PF0 = "0000:3b:00.0"
PF1 = "0000:3b:00.1"
VF0 = "0000:3b:00.2"
VF1 = "0000:3b:00.3"


@pytest.fixture
def sysfs(tmp_path: Path) -> FakeSysfs:
    return FakeSysfs(tmp_path)


def by_bus_id(sys_root: Path) -> dict[str, RDMADevice]:
    return {d.bus_id: d for d in discover(sys_root)}


def two_pfs(sysfs: FakeSysfs) -> None:
    """PF0 (mlx5_0) with two VFs, PF1 (mlx5_1) without SR-IOV, all ports ACTIVE."""
    sysfs.pci(PF0, ib=("mlx5_0",), numa=1)
    sysfs.vfs(PF0, [VF0, VF1], ib=("mlx5_2", "mlx5_3"))
    sysfs.pci(PF1, ib=("mlx5_1",), numa=1)
    for ib in ("mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"):
        sysfs.port(ib, 1, "4: ACTIVE")


def test_pf_with_vfs_and_pf_without_sriov(sysfs):
    two_pfs(sysfs)
    assert discover(sysfs.sys_root) == [
        RDMADevice(
            bus_id=PF0,
            ib_devices=("mlx5_0",),
            minor=0,
            healthy=True,
            numa_node=1,
            pcie_root="pci0000:3a",
            vendor_id=MELLANOX,
            device_id=CX5,
            vfs=(VirtualFunction(VF0, -1), VirtualFunction(VF1, -1)),
        ),
        RDMADevice(
            bus_id=PF1,
            ib_devices=("mlx5_1",),
            minor=1,
            healthy=True,
            numa_node=1,
            pcie_root="pci0000:3a",
            vendor_id=MELLANOX,
            device_id=CX5,
            vfs=(),
        ),
    ]


def test_vfs_are_not_devices_even_with_infiniband_entries(sysfs):
    two_pfs(sysfs)
    assert (sysfs.sys_root / "bus/pci/devices" / VF0 / "infiniband" / "mlx5_2").is_dir()
    assert [d.bus_id for d in discover(sysfs.sys_root)] == [PF0, PF1]


def test_result_is_sorted_by_bus_id_across_roots(sysfs):
    sysfs.pci("0000:d8:00.0", parent="pci0000:d7/0000:d7:00.0", ib=("mlx5_1",))
    sysfs.pci("0000:18:00.0", parent="pci0000:17/0000:17:00.0", ib=("mlx5_0",))
    found = discover(sysfs.sys_root)
    assert [(d.bus_id, d.pcie_root, d.minor) for d in found] == [
        ("0000:18:00.0", "pci0000:17", 0),
        ("0000:d8:00.0", "pci0000:d7", 1),
    ]


def test_non_network_device_is_ignored_even_with_infiniband(sysfs):
    sysfs.pci("0000:3b:00.0", cls=DISPLAY, vendor=0x10DE, device=0x20B0, ib=("mlx5_0",))
    assert discover(sysfs.sys_root) == []


def test_any_network_subclass_counts(sysfs):
    sysfs.pci(PF0, cls=INFINIBAND, ib=("mlx5_0",))
    assert [d.bus_id for d in discover(sysfs.sys_root)] == [PF0]


def test_network_device_without_infiniband_is_ignored(sysfs):
    sysfs.pci("0000:3b:00.0")  # an Ethernet NIC without RDMA
    empty = sysfs.pci("0000:3b:00.1")
    (empty / "infiniband").mkdir()  # present but empty
    sysfs.pci("0000:3c:00.0", ib=("mlx5_0",))
    assert [d.bus_id for d in discover(sysfs.sys_root)] == ["0000:3c:00.0"]


def test_numa_minus_one_is_zero_and_missing_numa_is_none(sysfs):
    sysfs.pci(PF0, ib=("mlx5_0",), numa=-1)
    sysfs.pci(PF1, ib=("mlx5_1",), numa=None)
    found = by_bus_id(sysfs.sys_root)
    assert found[PF0].numa_node == 0
    assert found[PF1].numa_node is None


def test_port_down_is_unhealthy(sysfs):
    sysfs.pci(PF0, ib=("mlx5_0",))
    sysfs.port("mlx5_0", 1, "4: ACTIVE")
    sysfs.port("mlx5_0", 2, "1: DOWN")
    sysfs.pci(PF1, ib=("mlx5_1",))
    sysfs.port("mlx5_1", 1, "4: ACTIVE")
    found = by_bus_id(sysfs.sys_root)
    assert not found[PF0].healthy
    assert found[PF1].healthy


def test_missing_ports_dir_is_unhealthy(sysfs):
    sysfs.pci(PF0, ib=("mlx5_0",))  # class/infiniband/mlx5_0 exists, no ports/
    assert (sysfs.sys_root / "class/infiniband/mlx5_0").is_dir()
    [device] = discover(sysfs.sys_root)
    assert not device.healthy


def test_empty_ports_dir_or_no_class_entry_is_unhealthy(sysfs):
    sysfs.pci(PF0, ib=("mlx5_0",))
    (sysfs.sys_root / "class/infiniband/mlx5_0/ports").mkdir()
    sysfs.pci(PF1, ib=("mlx5_1",))
    (sysfs.sys_root / "class/infiniband/mlx5_1").unlink()
    found = by_bus_id(sysfs.sys_root)
    assert not found[PF0].healthy
    assert not found[PF1].healthy


def test_unreadable_port_state_is_unhealthy(sysfs):
    sysfs.pci(PF0, ib=("mlx5_0",))
    sysfs.port("mlx5_0", 1, "4: ACTIVE")
    (sysfs.sys_root / "class/infiniband/mlx5_0/ports/2").mkdir()  # no state file
    [device] = discover(sysfs.sys_root)
    assert not device.healthy


def test_every_ib_device_of_a_pf_must_be_active(sysfs):
    sysfs.pci(PF0, ib=("mlx5_1", "mlx5_0"))
    sysfs.port("mlx5_0", 1, "4: ACTIVE")
    sysfs.port("mlx5_1", 1, "1: DOWN")
    [device] = discover(sysfs.sys_root)
    assert device.ib_devices == ("mlx5_0", "mlx5_1")
    assert not device.healthy


def test_minor_from_first_mlx_name(sysfs):
    sysfs.pci(PF0, ib=("mlx5_3",))
    sysfs.pci(PF1, ib=("mlx5_12", "mlx5_7"))  # sorted as text: mlx5_12 first
    found = by_bus_id(sysfs.sys_root)
    assert found[PF0].minor == 3
    assert found[PF1].minor == 12


def test_minor_falls_back_to_index_in_bdf_order(sysfs):
    sysfs.pci("0000:5e:00.0", ib=("irdma1",))
    sysfs.pci("0000:18:00.0", ib=("rxe0",))
    sysfs.pci("0000:3b:00.0", ib=("mlx5_9",))
    found = discover(sysfs.sys_root)
    assert [(d.bus_id, d.minor) for d in found] == [
        ("0000:18:00.0", 0),
        ("0000:3b:00.0", 9),
        ("0000:5e:00.0", 2),
    ]


def test_vfs_follow_virtfn_index_numerically(sysfs):
    vfs = [f"0000:3b:{1 + i // 8:02x}.{i % 8}" for i in range(12)]
    sysfs.pci(PF0, ib=("mlx5_0",))
    sysfs.vfs(PF0, vfs)
    [device] = discover(sysfs.sys_root)
    assert device.vfs == tuple(VirtualFunction(vf) for vf in vfs)  # virtfn10 after virtfn9


def test_sriov_numvfs_zero_or_garbage_means_no_vfs(sysfs):
    pf = sysfs.pci(PF0, ib=("mlx5_0",))
    sysfs.vfs(PF0, [VF0])
    (pf / "sriov_numvfs").write_text("0\n")  # stale virtfn0 link left behind
    other = sysfs.pci(PF1, ib=("mlx5_1",), numvfs="lots\n")
    os.symlink(f"../{VF1}", other / "virtfn0")
    found = by_bus_id(sysfs.sys_root)
    assert found[PF0].vfs == ()
    assert found[PF1].vfs == ()


def test_virtfn_that_is_not_a_link_is_skipped(sysfs):
    pf = sysfs.pci(PF0, ib=("mlx5_0",))
    sysfs.vfs(PF0, [VF0, VF1])
    (pf / "virtfn1").unlink()
    (pf / "virtfn1").mkdir()
    (pf / "virtfn_extra").write_text("")
    [device] = discover(sysfs.sys_root)
    assert device.vfs == (VirtualFunction(VF0),)


def test_dangling_and_vanished_devices_are_skipped(sysfs):
    two_pfs(sysfs)
    sysfs.bus_link("0000:af:00.0", "../../../devices/pci0000:ae/0000:ae:00.0/0000:af:00.0")
    shutil.rmtree(sysfs.sys_root / "devices/pci0000:3a/0000:3a:00.0" / PF1)  # hot-unplugged
    found = discover(sysfs.sys_root)
    assert [d.bus_id for d in found] == [PF0]
    assert found[0].vfs == (VirtualFunction(VF0), VirtualFunction(VF1))


def test_upper_case_bdf_is_reported_lower_case(sysfs):
    sysfs.pci("0000:AF:00.0", parent="pci0000:ae/0000:ae:00.0", ib=("mlx5_0",))
    [device] = discover(sysfs.sys_root)
    assert device.bus_id == "0000:af:00.0"
    assert device.pcie_root == "pci0000:ae"
    assert device.vendor_id == MELLANOX


def test_missing_or_empty_tree_finds_nothing(tmp_path):
    assert discover(tmp_path / "nowhere") == []
    assert discover(FakeSysfs(tmp_path).sys_root) == []


def test_health_reads_the_configured_sys_root(tmp_path):
    # upstream reads /sys/class/infiniband even with --sys-root-dir=/host-sys/; here the
    # configured root decides: the same PF is healthy under one root and not the other
    up = FakeSysfs(tmp_path / "up")
    up.pci(PF0, ib=("mlx5_0",))
    up.port("mlx5_0", 1, "4: ACTIVE")
    down = FakeSysfs(tmp_path / "down")
    down.pci(PF0, ib=("mlx5_0",))
    down.port("mlx5_0", 1, "1: DOWN")
    assert [d.healthy for d in discover(up.sys_root)] == [True]
    assert [d.healthy for d in discover(down.sys_root)] == [False]


def test_supported_lists_class_infiniband(sysfs):
    two_pfs(sysfs)
    assert rdma.devices(sysfs.sys_root) == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
    assert rdma.supported(sysfs.sys_root) == (True, "4 device(s): mlx5_0, mlx5_1, mlx5_2, mlx5_3")


def test_supported_falls_back_to_pci_discovery(sysfs):
    sysfs.pci(PF0, ib=("mlx5_0",))
    shutil.rmtree(sysfs.sys_root / "class")
    assert rdma.devices(sysfs.sys_root) == []
    assert rdma.supported(sysfs.sys_root) == (True, f"1 PCI device(s): {PF0} (mlx5_0)")


def test_unsupported_without_rdma(sysfs):
    sysfs.pci(PF0, cls=NETWORK)  # plain Ethernet
    ok, why = rdma.supported(sysfs.sys_root)
    assert not ok
    assert why.startswith("no RDMA devices under ")


def test_probe_rdma_row(tmp_path):
    host = FakeHost(tmp_path, "v2")
    rows = {row.name: row for row in probe(host.paths)}
    assert not rows["RDMA"].supported
    sysfs = FakeSysfs(tmp_path)
    sysfs.pci(PF0, ib=("mlx5_0",))
    sysfs.port("mlx5_0", 1, "4: ACTIVE")
    rows = {row.name: row for row in probe(host.paths)}
    assert rows["RDMA"].supported
    assert rows["RDMA"].reason == "1 device(s): mlx5_0"
