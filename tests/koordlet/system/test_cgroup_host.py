"""Host tier: real cgroup v1 directories under a test-owned parent.

A pod-like hierarchy (parent/pod/container) is made in every v1 controller this host
has; every knob the kernel offers is written through the registry and read back;
invalid values are refused before the kernel sees them; a cgroup removed between listing
and reading is reported as vanished without breaking the batch; everything made is
removed by the fixture (which fails the test if anything is left).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from koordlet.system.cgroup import io
from koordlet.system.cgroup.cgroupfs import CgroupFS
from koordlet.system.cgroup.registry import RESOURCES, Support
from koordlet.system.cgroup.stats import ALL_USAGE, Stat, StatsReader
from koordlet.system.errors import CgroupVanishedError, InvalidValueError, UnsupportedResourceError
from koordlet.system.paths import HostPaths

pytestmark = pytest.mark.host

SUBSYSTEMS = ("cpu", "cpuacct", "cpuset", "memory", "blkio", "pids")


def _block_device() -> str | None:
    for dev in sorted(Path("/sys/block").glob("*/dev")):
        if not dev.parent.name.startswith(("loop", "zram", "ram")):
            return dev.read_text().strip()
    return None


def _samples() -> dict[str, int | str]:
    """A valid value for each writable v1 knob (v1 semantics)."""
    device = _block_device() or "0:0"
    return {
        "cpu.shares": 512,
        "cpu.cfs_quota_us": 50000,
        "cpu.cfs_period_us": 200000,
        "cpu.cfs_burst_us": 10000,
        "cpu.idle": 1,
        "cpu.bvt_warp_ns": 2,
        "cpuset.cpus": "0",
        "cpuset.mems": "0",
        "memory.limit_in_bytes": 256 << 20,
        "memory.min": 1 << 20,
        "memory.low": 2 << 20,
        "memory.high": 128 << 20,
        "memory.wmark_ratio": 95,
        "memory.wmark_scale_factor": 20,
        "memory.wmark_min_adj": -25,
        "memory.priority": 3,
        "memory.use_priority_oom": 1,
        "memory.oom.group": 1,
        "memory.pagecache_limit.enable": 1,
        "memory.pagecache_limit.size": 64 << 20,
        "memory.pagecache_limit.sync": 0,
        "blkio.weight": 500,
        "blkio.throttle.read_bps_device": f"{device} 1048576",
        "blkio.throttle.write_bps_device": f"{device} 2097152",
        "blkio.throttle.read_iops_device": f"{device} 1000",
        "blkio.throttle.write_iops_device": f"{device} 2000",
        "blkio.cost.weight": f"{device} 100",
        "pids.max": 64,
        "net_cls.classid": 0x10002,
    }


@pytest.fixture
def pod_hierarchy(host_cgroup_parent):
    """(cgroups, parent, pod, container) made in every controller this host mounts on v1."""
    made = []
    for subsystem in SUBSYSTEMS:
        try:
            made.append(host_cgroup_parent(subsystem))
        except pytest.skip.Exception:
            continue
    if not made:
        pytest.skip("no cgroup v1 controllers on this host")
    parent = made[0].name
    cgroups = CgroupFS(HostPaths.host(), 1)
    if (cgroups.directory("cpuset", parent)).is_dir():
        # a v1 cpuset child starts empty: give the parent the root's CPUs and memory nodes
        cgroups.write("cpuset.cpus", parent, str(cgroups.read("cpuset.cpus")))
        cgroups.write("cpuset.mems", parent, str(cgroups.read("cpuset.mems")))
    pod, container = f"{parent}/pod-test", f"{parent}/pod-test/container-test"
    for directory in made:
        (directory / "pod-test" / "container-test").mkdir(parents=True)
    if (cgroups.directory("cpuset", parent)).is_dir():
        for rel in (pod, container):
            cgroups.write("cpuset.cpus", rel, str(cgroups.read("cpuset.cpus", parent)))
            cgroups.write("cpuset.mems", rel, str(cgroups.read("cpuset.mems", parent)))
    return cgroups, parent, pod, container


def test_every_supported_knob_round_trips(pod_hierarchy):
    cgroups, _, _, leaf = pod_hierarchy  # a leaf: shrinking a cpuset above a child is EBUSY
    samples = _samples()
    written = []
    for resource in RESOURCES:
        if not resource.writable_v1 or resource.key not in samples:
            continue
        path = cgroups.path(resource.key, leaf, for_write=True)
        if not path.is_file():
            if resource.support is Support.IF_EXISTS:
                continue  # an optional knob this kernel lacks
            if not path.parent.is_dir():
                continue  # its controller is not mounted here
        if "device" in resource.key and _block_device() is None:
            continue
        value = samples[resource.key]
        cgroups.write(resource.key, leaf, value)
        read = cgroups.read(resource.key, leaf)
        expected = resource.validate(value)
        assert read == expected, resource.key
        written.append(resource.key)
    # the knobs every v1 host with these controllers has must all have been exercised
    assert {"cpu.shares", "cpu.cfs_quota_us", "memory.limit_in_bytes", "pids.max"} <= set(written)


def test_invalid_values_are_refused_before_the_kernel_sees_them(pod_hierarchy):
    cgroups, _, pod, _ = pod_hierarchy
    for key, value in [
        ("cpu.shares", 1),
        ("cpu.cfs_quota_us", 10),
        ("memory.limit_in_bytes", -7),
        ("pids.max", -3),
    ]:
        before = cgroups.path(key, pod).read_text()
        with pytest.raises(InvalidValueError, match="must be in"):
            cgroups.write(key, pod, value)
        assert cgroups.path(key, pod).read_text() == before, key


def test_kernel_refusals_are_domain_errors(pod_hierarchy):
    cgroups, parent, _, _ = pod_hierarchy
    directory = cgroups.directory("cpu", parent)
    with pytest.raises(InvalidValueError):
        io.write_file(directory, "cpu.cfs_quota_us", "not-a-number")
    with pytest.raises(UnsupportedResourceError):
        io.write_file(directory, "cpu.no_such_knob", "1")


def test_a_cgroup_removed_between_listing_and_reading_is_vanished(pod_hierarchy, backend):
    cgroups, parent, pod, container = pod_hierarchy
    siblings = [f"{parent}/sibling-{i}" for i in range(3)]
    for rel in siblings:
        for subsystem in ("cpu", "cpuacct", "memory"):
            cgroups.directory(subsystem, rel).mkdir()
    reader = StatsReader(cgroups)
    listed = [*siblings, pod, container]
    first = reader.read(listed, ALL_USAGE)  # keeps descriptors of every file
    assert all(not s.errors for s in first), [s.errors for s in first]
    for subsystem in ("cpu", "cpuacct", "memory"):
        os.rmdir(cgroups.directory(subsystem, siblings[1]))
    samples = reader.read(listed, ALL_USAGE)
    assert samples[1].vanished
    assert all(isinstance(e, CgroupVanishedError) for e in samples[1].errors.values())
    for i in (0, 2, 3, 4):
        assert not samples[i].errors, samples[i].errors
        assert samples[i].cpu_usage_ns is not None
        assert samples[i].memory is not None
    rows = io.read_many([cgroups.directory("cpu", r) for r in siblings], ["cpu.shares"])
    assert isinstance(rows[1][0], CgroupVanishedError)
    assert rows[0][0] == b"1024\n"
    reader.close()
    for rel in (siblings[0], siblings[2]):
        for subsystem in ("cpu", "cpuacct", "memory"):
            os.rmdir(cgroups.directory(subsystem, rel))


def test_a_pods_memory_by_numa_node_includes_its_containers(pod_hierarchy, backend):
    """A process in the container cgroup touches 32 MiB: the pod's NUMA memory counts it
    (upstream's reading of the pod cgroup's own ``total`` line would not)."""
    cgroups, _, pod, container = pod_hierarchy
    numa_stat = cgroups.directory("memory", pod) / "memory.numa_stat"
    if not numa_stat.is_file():
        pytest.skip("this kernel has no memory.numa_stat")
    script = "import sys; sys.stdin.readline(); b = b'x' * (32 << 20); print('ready', flush=True); input()"
    child = subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert child.stdin is not None
    assert child.stdout is not None
    try:
        (cgroups.directory("memory", container) / "cgroup.procs").write_text(f"{child.pid}\n")
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "ready"
        sample = StatsReader(cgroups).read([pod], frozenset({Stat.MEMORY_NUMA}))[0]
        assert not sample.errors, sample.errors
        assert sample.memory_numa is not None
        assert sum(sample.memory_numa.values()) >= 30 << 20
        own_pages = int(numa_stat.read_text().split()[0].partition("=")[2])  # upstream's "total"
        assert own_pages * os.sysconf("SC_PAGE_SIZE") < 8 << 20
    finally:
        child.kill()
        child.wait()
