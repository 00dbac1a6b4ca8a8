"""The cgroup resource registry: v1/v2 files, conversions and validation before any write."""

from __future__ import annotations

import pytest

from koordlet.system.cgroup import convert
from koordlet.system.cgroup.registry import RESOURCES, Registry, Resource, Subsystem
from koordlet.system.errors import InvalidValueError, UnsupportedResourceError


@pytest.mark.parametrize(
    ("shares", "weight"),
    [(2, 1), (1024, 39), (262144, 10000), (1, 1), (10**9, 10000)],
    ids=["min", "default", "max", "below-min-clamped", "above-max-clamped"],
)
def test_shares_to_weight(shares, weight):
    assert convert.shares_to_weight(shares) == weight


@pytest.mark.parametrize(("weight", "shares"), [(1, 2), (100, 2597), (10000, 262144)])
def test_weight_to_shares(weight, shares):
    assert convert.weight_to_shares(weight) == shares


def test_cpu_max_parsing():
    assert convert.parse_cpu_max("max 100000\n") == (-1, 100000)
    assert convert.parse_cpu_max("50000 100000") == (50000, 100000)
    assert convert.parse_cpu_max("20000") == (20000, 100000)
    with pytest.raises(ValueError, match=r"cpu\.max must be"):
        convert.parse_cpu_max("")


@pytest.mark.parametrize(
    ("key", "value", "v1", "v2"),
    [
        ("cpu.shares", 1024, "1024", "39"),
        ("cpu.cfs_quota_us", -1, "-1", "max"),
        ("cpu.cfs_quota_us", 200000, "200000", "200000"),
        ("cpu.cfs_burst_us", 100000, "100000", "100000"),
        ("cpu.idle", 1, "1", "1"),
        ("cpuset.cpus", "3,0-1,2", "0-3", "0-3"),
        ("memory.limit_in_bytes", -1, "-1", "max"),
        ("memory.limit_in_bytes", 1 << 30, str(1 << 30), str(1 << 30)),
        ("memory.high", convert.MAX_INT64, str(convert.MAX_INT64), "max"),
        ("memory.min", 4096, "4096", "4096"),
        ("pids.max", -1, "max", "max"),
        ("blkio.weight", 500, "500", "default 4950"),
        ("blkio.throttle.read_bps_device", "8:0 1048576", "8:0 1048576", "8:0 rbps=1048576"),
        ("blkio.throttle.write_iops_device", "8:0 0", "8:0 0", "8:0 wiops=max"),
        ("blkio.cost.weight", "8:0 100", "8:0 100", "8:0 100"),
    ],
)
def test_render_per_version(key, value, v1, v2):
    resource = RESOURCES[key]
    assert resource.render(1, value) == v1
    assert resource.render(2, value) == v2


@pytest.mark.parametrize(
    ("key", "v1_text", "v2_text", "value"),
    [
        ("cpu.shares", "1024\n", "39\n", None),
        ("cpu.cfs_quota_us", "-1\n", "max 100000\n", -1),
        ("cpu.cfs_period_us", "100000\n", "max 100000\n", 100000),
        ("memory.limit_in_bytes", "9223372036854771712\n", "max\n", -1),
        ("cpuacct.usage", "1500\n", "usage_usec 3\nuser_usec 1\n", None),
        ("cpuset.cpus", "0-3\n", "0-3\n", "0-3"),
        ("memory.high", "max\n", "max\n", -1),
    ],
)
def test_parse_per_version(key, v1_text, v2_text, value):
    resource = RESOURCES[key]
    if key == "cpu.shares":
        assert resource.parse(1, v1_text) == 1024
        assert resource.parse(2, v2_text) == convert.weight_to_shares(39)
    elif key == "cpuacct.usage":
        assert resource.parse(1, v1_text) == 1500
        assert resource.parse(2, v2_text) == 3000
    else:
        assert resource.parse(1, v1_text) == value
        assert resource.parse(2, v2_text) == value


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("cpu.shares", 1),
        ("cpu.shares", 262145),
        ("cpu.shares", "lots"),
        ("cpu.cfs_quota_us", 999),
        ("cpu.cfs_quota_us", -2),
        ("cpu.bvt_warp_ns", 3),
        ("cpu.idle", 2),
        ("cpuset.cpus", "0-"),
        ("cpuset.cpus", "3-1"),
        ("memory.limit_in_bytes", -5),
        ("memory.wmark_ratio", 101),
        ("memory.wmark_min_adj", -26),
        ("memory.priority", 13),
        ("blkio.weight", 5),
        ("blkio.throttle.read_bps_device", "sda 100"),
        ("blkio.cost.qos", "8:0 enable"),
        ("blkio.cost.weight", "8:0 0"),
        ("net_cls.classid", -1),
        ("cpu.shares", True),
    ],
)
def test_invalid_values_are_refused_before_the_kernel(key, value):
    with pytest.raises(InvalidValueError) as info:
        RESOURCES[key].render(1, value)
    assert key in str(info.value)


@pytest.mark.parametrize(
    ("key", "version"),
    [("cpuacct.usage", 1), ("memory.stat", 2), ("cpu.cfs_period_us", 2), ("net_cls.classid", 2)],
)
def test_read_only_or_missing_files_refuse_writes(key, version):
    with pytest.raises(UnsupportedResourceError):
        RESOURCES[key].render(version, 1)


def test_files_and_subsystems():
    assert RESOURCES["cpuset.cpus"].file(2) == "cpuset.cpus.effective"
    assert RESOURCES["cpuset.cpus"].file(2, for_write=True) == "cpuset.cpus"
    assert RESOURCES["cpuacct.usage"].subsystem is Subsystem.CPUACCT
    assert RESOURCES["tasks"].file(2) == "cgroup.threads"
    assert RESOURCES["memory.usage_in_bytes"].file(2) == "memory.current"
    with pytest.raises(UnsupportedResourceError):
        RESOURCES["memory.idle_page_stats"].file(2)
    with pytest.raises(UnsupportedResourceError):
        RESOURCES["no.such.knob"]


def test_registry_refuses_duplicate_keys():
    resource = Resource("cpu.shares", Subsystem.CPU, "cpu.shares", "cpu.weight")
    with pytest.raises(ValueError, match="registered twice"):
        Registry([resource, resource])


def test_only_the_registry_names_cgroup_files():
    """The architecture rule: cgroup file names appear in the registry (and the host-tree
    fakes and parsers' key lists), nowhere else in the agent."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[3] / "koordlet"
    allowed = {"system/cgroup/registry.py", "system/cgroup/stats.py", "system/probe.py"}
    pattern = re.compile(r"[\"'](cpu\.shares|cpu\.cfs_quota_us|memory\.limit_in_bytes|cpuset\.cpus)[\"']")
    offenders = [
        str(p.relative_to(root))
        for p in root.rglob("*.py")
        if str(p.relative_to(root)) not in allowed and pattern.search(p.read_text())
    ]
    assert not offenders, offenders
