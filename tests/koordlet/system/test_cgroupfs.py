"""CgroupFS on fake hosts: cgroup v1 and v2, systemd and cgroupfs drivers."""

from __future__ import annotations

import pytest

from koordinator.api.kubeqos import KubeQOSClass
from koordlet.system.cgroup.cgroupfs import CgroupFS
from koordlet.system.errors import (
    CgroupVanishedError,
    InvalidValueError,
    MalformedContentError,
    UnsupportedResourceError,
)
from tests.fakes.host import FakeHost

UID = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
CID = "containerd://" + "ab" * 32


@pytest.fixture(
    params=[("v1", "systemd"), ("v1", "cgroupfs"), ("v2", "systemd"), ("v2", "cgroupfs")], ids="-".join
)
def host(request, tmp_path) -> FakeHost:
    version, driver = request.param
    return FakeHost(tmp_path, version, driver=driver, features={"cpu.idle", "cfs_burst"})


def test_detects_version_and_layout(host):
    cgroups = CgroupFS.detect(host.paths)
    assert cgroups.version == host.cgroups.version
    assert cgroups.layout == host.layout


def test_write_then_read_back_in_v1_semantics(host):
    pod = host.add_pod(KubeQOSClass.BEST_EFFORT, UID, [CID])
    container = host.container_dir(KubeQOSClass.BEST_EFFORT, UID, CID)
    cgroups = CgroupFS.detect(host.paths)
    assert cgroups.write("cpu.shares", pod, 512) == ("512" if cgroups.version == 1 else "20")
    assert cgroups.read("cpu.shares", pod) == (512 if cgroups.version == 1 else 500)
    cgroups.write("cpu.cfs_quota_us", container, 50000)
    assert cgroups.read("cpu.cfs_quota_us", container) == 50000
    cgroups.write("cpu.cfs_quota_us", container, -1)
    assert cgroups.read("cpu.cfs_quota_us", container) == -1
    cgroups.write("memory.limit_in_bytes", pod, -1)
    assert cgroups.read("memory.limit_in_bytes", pod) == -1
    cgroups.write("cpuset.cpus", pod, "2,0-1")
    assert cgroups.path("cpuset.cpus", pod, for_write=True).read_text() == "0-2"
    cgroups.write("cpu.idle", pod, 1)
    assert cgroups.read("cpu.idle", pod) == 1


def test_file_content_is_exactly_the_rendered_value(host):
    pod = host.add_pod(KubeQOSClass.BURSTABLE, UID)
    cgroups = CgroupFS.detect(host.paths)
    cgroups.write("cpu.cfs_quota_us", pod, 200000)
    text = cgroups.path("cpu.cfs_quota_us", pod, for_write=True).read_text()
    assert text == "200000"


def test_invalid_value_never_reaches_the_file(host):
    pod = host.add_pod(KubeQOSClass.BURSTABLE, UID)
    cgroups = CgroupFS.detect(host.paths)
    path = cgroups.path("cpu.shares", pod, for_write=True)
    before = path.read_text()
    with pytest.raises(InvalidValueError):
        cgroups.write("cpu.shares", pod, 1)
    assert path.read_text() == before


def test_optional_knob_the_kernel_lacks(host):
    cgroups = CgroupFS.detect(host.paths)
    assert cgroups.supported("cpu.idle")[0]
    assert cgroups.supported("cpu.cfs_burst_us")[0]
    ok, why = cgroups.supported("cpu.bvt_warp_ns")
    assert not ok
    assert "not provided" in why
    with pytest.raises(UnsupportedResourceError):
        cgroups.write("cpu.bvt_warp_ns", host.layout.root, 2)
    assert not cgroups.path("cpu.bvt_warp_ns", host.layout.root).exists()


def test_vanished_cgroup(host):
    pod = host.add_pod(KubeQOSClass.BURSTABLE, UID, [CID])
    host.remove_cgroup(pod)
    cgroups = CgroupFS.detect(host.paths)
    with pytest.raises(CgroupVanishedError):
        cgroups.read("cpu.shares", pod)
    with pytest.raises(CgroupVanishedError):
        cgroups.write("cpu.shares", pod, 2)


def test_malformed_content(host):
    pod = host.add_pod(KubeQOSClass.BURSTABLE, UID)
    cgroups = CgroupFS.detect(host.paths)
    cgroups.path("cpu.cfs_quota_us", pod).write_text("garbage\n")
    with pytest.raises(MalformedContentError):
        cgroups.read("cpu.cfs_quota_us", pod)


def test_children_and_descendants(host):
    for i in range(2):
        host.add_pod(KubeQOSClass.BEST_EFFORT, f"{UID[:-1]}{i}", [f"containerd://{i:064x}"])
    cgroups = CgroupFS.detect(host.paths)
    be = host.layout.qos_dir(KubeQOSClass.BEST_EFFORT)
    pods = cgroups.children("cpuset", be)
    assert len(pods) == 2
    deep = cgroups.descendants("cpuset", be, 2)
    assert len(deep) == 4
    assert deep[0].count("/") < deep[-1].count("/")
    assert cgroups.children("cpuset", "no/such/dir") == []
