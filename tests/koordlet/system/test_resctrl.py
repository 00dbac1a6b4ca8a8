"""resctrl on a fake tree: detection, schemata, masks, groups, tasks and monitoring."""

from __future__ import annotations

import pytest

from koordlet.system.errors import InvalidValueError
from koordlet.system.resctrl import Resctrl, SchemataError, l3_mask, mba_value, parse_schemata


@pytest.mark.parametrize(
    ("cbm", "start", "end", "mask"),
    [
        ("7ff", 0, 30, 0xF),  # upstream's BE default: 11 ways -> ways [0, 4)
        ("7ff", 0, 100, 0x7FF),
        ("fffff", 50, 100, 0xFFC00),
        ("ff", 10, 20, 0x2),
    ],
)
def test_l3_masks(cbm, start, end, mask):
    assert l3_mask(cbm, start, end) == mask


@pytest.mark.parametrize(
    ("cbm", "start", "end"),
    [("7f7", 0, 30), ("zz", 0, 30), ("7ff", 30, 30), ("7ff", -1, 50), ("7ff", 0, 101), ("7ff", 1, 2)],
)
def test_bad_mask_inputs(cbm, start, end):
    with pytest.raises(InvalidValueError):
        l3_mask(cbm, start, end)


@pytest.mark.parametrize(
    ("percent", "vendor", "value"),
    [
        (100, "GenuineIntel", 100),
        (35, "GenuineIntel", 40),
        (1, "GenuineIntel", 10),
        (100, "AuthenticAMD", 2048),
        (50, "AuthenticAMD", 80),
        (0, "GenuineIntel", None),
        (101, "AuthenticAMD", None),
    ],
)
def test_mba_values(percent, vendor, value):
    assert mba_value(percent, vendor) == value


def test_schemata_round_trip():
    schemata = parse_schemata("    L3:0=7ff;1=7ff\n    MB:0=100;1=100\nSMBA:0=100\n")
    assert schemata.l3 == {0: 0x7FF, 1: 0x7FF}
    assert schemata.mb == {0: 100, 1: 100}
    assert schemata.other == ["SMBA:0=100"]
    assert schemata.l3_line() == "L3:0=7ff;1=7ff"
    assert schemata.mb_line() == "MB:0=100;1=100"
    assert parse_schemata("L3:0=f;\n").l3 == {0: 0xF}


@pytest.mark.parametrize("text", ["L3:0=xyz\n", "L3 0=f\n", "MB:a=10\n", "L3:0\n"])
def test_schemata_refuses_garbage(text):
    with pytest.raises(SchemataError):
        parse_schemata(text)


def test_detection_on_a_mounted_tree(fake_host_v1):
    fake_host_v1.add_resctrl("7ff", (0, 1))
    info = Resctrl(fake_host_v1.paths).detect()
    assert info.mounted
    assert info.l3_cat
    assert info.mba
    assert info.cmt
    assert info.mbm
    assert info.cbm_mask == "7ff"
    assert info.num_closids == 16


def test_not_mounted_when_root_schemata_is_invalid(fake_host_v1):
    fake_host_v1.add_resctrl("7ff", (0,))
    fake_host_v1.write("sys/fs/resctrl/schemata", "L3:0=0\n")
    info = Resctrl(fake_host_v1.paths).detect()
    assert not info.mounted
    assert not info.l3_cat


def test_groups_schemata_and_tasks(fake_host_v1):
    fake_host_v1.add_resctrl("7ff", (0, 1))
    resctrl = Resctrl(fake_host_v1.paths)
    assert resctrl.create_group("BE")
    assert not resctrl.create_group("BE")
    fake_host_v1.populate_resctrl_group("BE", mon={0: {"llc_occupancy": 4096, "mbm_total_bytes": 10}})
    resctrl.write_schemata_line("BE", "L3:0=f;1=f")
    assert resctrl.read_schemata("BE").l3 == {0: 0xF, 1: 0xF}
    with pytest.raises(InvalidValueError):
        resctrl.write_schemata_line("BE", "CPU:0=1")
    assert resctrl.add_tasks("BE", [100, 101, 100, 0]) == [100, 101]
    assert resctrl.read_tasks("BE") == [100, 101]
    assert resctrl.add_tasks("BE", [101, 102]) == [102]
    mon = resctrl.mon_data("BE")
    assert mon[0].llc_occupancy == 4096
    assert mon[0].mbm_total_bytes == 10
    assert mon[0].mbm_local_bytes is None
    assert resctrl.groups() == ["BE"]
    with pytest.raises(InvalidValueError):
        resctrl.group_dir("../etc")


def test_delete_group(fake_host_v1):
    fake_host_v1.add_resctrl()
    resctrl = Resctrl(fake_host_v1.paths)
    resctrl.create_group("koordlet-abc")
    assert resctrl.delete_group("koordlet-abc")
    assert not resctrl.delete_group("koordlet-abc")
