"""`koordlet probe` on fake v1 and v2 trees: rows and reasons follow the tree."""

from __future__ import annotations

import shutil

from koordlet.system.probe import Capability, as_json, as_table, probe
from tests.fakes.host import FakeHost


def rows_by_name(host: FakeHost) -> dict[str, Capability]:
    return {row.name: row for row in probe(host.paths)}


def test_v1_tree_with_systemd_kubepods(fake_host_v1):
    host = fake_host_v1
    host.mkdir_cgroup("cpu", "kubepods.slice")
    host.write_cgroup("cpu", "", "cpu.cfs_burst_us", "0\n")
    host.write("proc/pressure/cpu", "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
    host.write("proc/pressure/memory", "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
    host.write("proc/pressure/io", "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
    rows = rows_by_name(host)
    assert rows["kernel"] == Capability("kernel", True, "6.1.0-fake")
    assert rows["cgroup mode"].reason == "v1"
    assert rows["cgroup cpu"].supported
    assert rows["cgroup cpu"].reason == f"v1 at {host.paths.cgroup_root / 'cpu'}"
    assert not rows["cgroup net_cls"].supported
    assert rows["cgroup driver"].reason == "systemd (from kubepods.slice)"
    assert rows["kubepods root"].supported
    assert rows["psi"].supported
    assert "no cpu 'full' line" in rows["psi"].reason
    assert not rows["psi (cgroup)"].supported
    assert rows["cpu burst"].supported
    assert not rows["cpu.idle"].supported
    assert not rows["memory.min"].supported
    assert not rows["resctrl"].supported
    assert not rows["NRI socket"].supported


def test_v2_tree_knobs_live_below_the_root(tmp_path):
    host = FakeHost(tmp_path, "v2", driver="cgroupfs")
    pods = host.mkdir_cgroup("cpu", "kubepods")
    for knob in ("cpu.idle", "cpu.max.burst", "memory.min", "memory.low", "memory.high", "cpu.pressure"):
        (pods / knob).write_text("0\n")
    rows = rows_by_name(host)
    assert rows["cgroup mode"].reason == f"v2 (unified) at {host.paths.cgroup_root}"
    assert rows["cgroup cpu"].reason == f"v2 at {host.paths.cgroup_root}"
    assert rows["cgroup cpuacct"].supported  # accounted by the v2 cpu controller
    assert rows["cgroup blkio"].reason.startswith("v2: served by the io controller")
    assert rows["cgroup perf_event"].supported
    assert not rows["cgroup net_cls"].supported
    assert rows["cgroup driver"].reason == "cgroupfs (from kubepods)"
    for knob in ("cpu.idle", "cpu burst", "memory.min", "memory.low", "memory.high", "psi (cgroup)"):
        assert rows[knob].supported, knob
    assert not rows["memory wmark"].supported


def test_kubelet_config_names_the_driver_when_no_kubepods_yet(tmp_path):
    host = FakeHost(tmp_path, "v1", kubepods=False)
    host.write("var/lib/kubelet/config.yaml", "kind: KubeletConfiguration\ncgroupDriver: cgroupfs\n")
    rows = rows_by_name(host)
    assert rows["cgroup driver"].supported
    assert rows["cgroup driver"].reason.startswith("cgroupfs (kubelet configuration")
    assert not rows["kubepods root"].supported


def test_kind_style_custom_cgroup_root(tmp_path):
    host = FakeHost(tmp_path, "v1", kubelet_cgroup_root="/kubelet")
    rows = rows_by_name(host)
    assert rows["kubepods root"].reason.endswith("kubelet.slice/kubelet-kubepods.slice")
    assert rows["cgroup driver"].reason.startswith("systemd")


def test_mounted_resctrl_reports_features_from_info(fake_host_v1):
    host = fake_host_v1
    host.add_resctrl("7ff", (0, 1), mba=False)
    rows = rows_by_name(host)
    assert rows["resctrl"].supported
    assert rows["resctrl L3 CAT"].supported
    assert not rows["resctrl MBA"].supported
    assert rows["resctrl CMT"].supported
    assert rows["resctrl MBM"].supported


def test_empty_root_says_no_hierarchy(tmp_path):
    host = FakeHost(tmp_path, "v1")
    shutil.rmtree(host.paths.cgroup_root)
    host.paths.cgroup_root.mkdir()
    rows = rows_by_name(host)
    assert not rows["cgroup mode"].supported


def test_renderings(fake_host_v1):
    rows = probe(fake_host_v1.paths)
    table = as_table(rows).splitlines()
    assert table[0].split() == ["CAPABILITY", "SUPPORTED", "REASON"]
    assert len(table) == len(rows) + 1
    data = as_json(rows)
    assert data["capabilities"][0] == {"name": "kernel", "supported": True, "reason": "6.1.0-fake"}
