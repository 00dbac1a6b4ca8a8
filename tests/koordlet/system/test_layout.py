"""Kubepods layout: QoS, pod and container directories per driver and cgroup root, and
how the driver is found (tree, kubelet flags, kubelet config, default)."""

from __future__ import annotations

import pytest

from koordinator.api.kubeqos import KubeQOSClass
from koordlet.system.cgroup.cgroupfs import CgroupFS
from koordlet.system.cgroup.layout import (
    CgroupDriver,
    ContainerIDError,
    KubepodsLayout,
    detect_layout,
    kubelet_cgroup_config,
    qos_of_dir,
)
from tests.fakes.host import FakeHost

UID = "6c1a2b3c-0000-4d5e-8f90-123456789abc"
G, BU, BE = KubeQOSClass.GUARANTEED, KubeQOSClass.BURSTABLE, KubeQOSClass.BEST_EFFORT
SYSTEMD = KubepodsLayout.default(CgroupDriver.SYSTEMD)
CGROUPFS = KubepodsLayout.default(CgroupDriver.CGROUPFS)
KIND = KubepodsLayout.default(CgroupDriver.SYSTEMD, "/kubelet")


@pytest.mark.parametrize(
    ("layout", "qos", "expected"),
    [
        (SYSTEMD, G, "kubepods.slice/kubepods-pod6c1a2b3c_0000_4d5e_8f90_123456789abc.slice"),
        (
            SYSTEMD,
            BU,
            "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod6c1a2b3c_0000_4d5e_8f90_123456789abc.slice",
        ),
        (
            SYSTEMD,
            BE,
            "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod6c1a2b3c_0000_4d5e_8f90_123456789abc.slice",
        ),
        (CGROUPFS, G, f"kubepods/pod{UID}"),
        (CGROUPFS, BE, f"kubepods/besteffort/pod{UID}"),
        (
            KIND,
            BU,
            "kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice/"
            "kubelet-kubepods-burstable-pod6c1a2b3c_0000_4d5e_8f90_123456789abc.slice",
        ),
        (
            KubepodsLayout.default(CgroupDriver.CGROUPFS, "/kubelet"),
            BU,
            f"kubelet/kubepods/burstable/pod{UID}",
        ),
    ],
    ids=[
        "systemd-guaranteed",
        "systemd-burstable",
        "systemd-besteffort",
        "cgroupfs-guaranteed",
        "cgroupfs-besteffort",
        "kind-systemd",
        "kind-cgroupfs",
    ],
)
def test_pod_dirs(layout, qos, expected):
    assert layout.pod_dir(qos, UID) == expected
    assert layout.parse_pod_uid(expected.rsplit("/", 1)[1]) == UID
    assert qos_of_dir(expected) is qos


@pytest.mark.parametrize(
    ("container_id", "systemd", "cgroupfs"),
    [
        ("containerd://abc123def456", "cri-containerd-abc123def456.scope", "abc123def456"),
        ("docker://abc123def456", "docker-abc123def456.scope", "abc123def456"),
        ("cri-o://abc123def456", "crio-abc123def456.scope", "abc123def456"),
        ("pouch://abc123def456", "pouch-abc123def456.scope", "abc123def456"),
    ],
)
def test_container_dirs(container_id, systemd, cgroupfs):
    assert SYSTEMD.container_dir_name(container_id) == systemd
    assert CGROUPFS.container_dir_name(container_id) == cgroupfs
    assert SYSTEMD.parse_container_id(systemd) == "abc123def456"


@pytest.mark.parametrize("container_id", ["abc123", "://abc", "containerd://", "rkt://abc"])
def test_bad_container_ids(container_id):
    with pytest.raises(ContainerIDError):
        SYSTEMD.container_dir_name(container_id)


def test_qos_dirs():
    assert SYSTEMD.qos_dir(G) == "kubepods.slice"
    assert SYSTEMD.qos_dir(BE) == "kubepods.slice/kubepods-besteffort.slice"
    assert CGROUPFS.qos_dir(BU) == "kubepods/burstable"
    assert KIND.qos_dir(BE) == "kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice"


@pytest.mark.parametrize(
    ("driver", "root", "expected"),
    [
        ("systemd", "/", SYSTEMD),
        ("cgroupfs", "/", CGROUPFS),
        ("systemd", "/kubelet", KIND),
        ("cgroupfs", "/kubelet", KubepodsLayout(CgroupDriver.CGROUPFS, "kubelet/kubepods")),
    ],
)
def test_detected_from_the_tree(tmp_path, driver, root, expected):
    host = FakeHost(tmp_path, "v1", driver=driver, kubelet_cgroup_root=root)
    layout, how = detect_layout(host.paths, host.cgroups.controller_root("cpu"))
    assert layout == expected
    assert expected.root in how


def test_kubelet_flags_win_over_its_config_file(tmp_path):
    host = FakeHost(tmp_path, "v1", kubepods=False)
    host.write("proc/4242/comm", "kubelet\n")
    host.write(
        "proc/4242/cmdline",
        "\0".join(["/usr/bin/kubelet", "--config=/etc/kubelet.yaml", "--cgroup-driver", "cgroupfs", ""]),
    )
    host.write("proc/4242/root/etc/kubelet.yaml", "cgroupDriver: systemd\ncgroupRoot: /kubelet\n")
    config = kubelet_cgroup_config(host.paths)
    assert config is not None
    assert config.driver is CgroupDriver.CGROUPFS
    assert config.cgroup_root == "/kubelet"
    layout, how = detect_layout(host.paths, host.cgroups.controller_root("cpu"))
    assert layout == KubepodsLayout(CgroupDriver.CGROUPFS, "kubelet/kubepods")
    assert "kubelet pid 4242" in how


def test_relative_kubelet_config_resolves_against_its_working_directory(tmp_path):
    host = FakeHost(tmp_path, "v1", kubepods=False)
    host.write("proc/77/comm", "kubelet\n")
    host.write("proc/77/cmdline", "kubelet\0--config=conf/k.yaml\0")
    host.write("proc/77/cwd/conf/k.yaml", 'cgroupDriver: "cgroupfs"\n')
    config = kubelet_cgroup_config(host.paths)
    assert config is not None
    assert config.driver is CgroupDriver.CGROUPFS


def test_no_kubepods_and_no_kubelet_defaults_to_systemd(tmp_path):
    host = FakeHost(tmp_path, "v2", kubepods=False)
    layout, how = detect_layout(host.paths, host.cgroups.controller_root("cpu"))
    assert layout == SYSTEMD
    assert how.startswith("default")


@pytest.mark.parametrize(
    ("kube_dir", "expected"),
    [
        ("kubepods/", CGROUPFS),
        ("/koord-node-1/kubepods", KubepodsLayout(CgroupDriver.CGROUPFS, "koord-node-1/kubepods")),
        ("kubepods.slice", SYSTEMD),
        ("kubelet.slice/kubelet-kubepods.slice/", KIND),
    ],
)
def test_cgroup_kube_dir_pins_the_layout(tmp_path, kube_dir, expected):
    """``--cgroup-kube-dir`` wins over what the tree and the kubelet say."""
    host = FakeHost(tmp_path, "v1", driver="systemd")
    cgroups = CgroupFS.detect(host.paths, kube_dir)
    assert cgroups.layout == expected
    assert KubepodsLayout.from_kube_dir(kube_dir) == expected


def test_an_empty_cgroup_kube_dir_is_refused():
    with pytest.raises(ValueError, match="empty"):
        KubepodsLayout.from_kube_dir("/")
