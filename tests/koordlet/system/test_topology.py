"""CPU topology from sysfs and cpuinfo, numbered as lscpu numbers it."""

from __future__ import annotations

from koordlet.system.topology import read_cpu_basic_info, read_cpu_topology


def test_two_sockets_with_smt(fake_host_v1):
    cpus = fake_host_v1.set_cpu_topology(sockets=2, cores_per_socket=2, threads_per_core=2)
    topo = read_cpu_topology(fake_host_v1.paths)
    assert topo.number_cpus == len(cpus) == 8
    # Linux numbering: cpu0-3 are first threads of cores 0-3, cpu4-7 their siblings
    assert topo.cpus_by_core() == {0: [0, 4], 1: [1, 5], 2: [2, 6], 3: [3, 7]}
    assert topo.cpus_by_socket() == {0: [0, 1, 4, 5], 1: [2, 3, 6, 7]}
    assert topo.cpus_by_node() == {0: [0, 1, 4, 5], 1: [2, 3, 6, 7]}
    assert topo.siblings(5) == [1, 5]
    ordered = [(p.node, p.socket, p.core, p.cpu) for p in topo.processors]
    assert ordered == sorted(ordered)
    assert topo.cpus_by_l3() == {0: [0, 1, 4, 5], 1: [2, 3, 6, 7]}


def test_basic_info(fake_host_v1):
    fake_host_v1.set_cpu_topology(threads_per_core=2, flags="fpu cat_l3 mba")
    info = read_cpu_basic_info(fake_host_v1.paths)
    assert info.model_name == "Fake CPU @ 2.50GHz"
    assert info.vendor_id == "GenuineIntel"
    assert info.hyper_threading
    assert not info.turbo  # no intel_pstate
    assert {"cat_l3", "mba"} <= info.flags
    fake_host_v1.write("sys/devices/system/cpu/intel_pstate/no_turbo", "0\n")
    assert read_cpu_basic_info(fake_host_v1.paths).turbo


def test_without_smt_file_ht_comes_from_the_topology(fake_host_v1):
    fake_host_v1.set_cpu_topology(threads_per_core=1)
    (fake_host_v1.root / "sys/devices/system/cpu/smt/active").unlink()
    assert not read_cpu_basic_info(fake_host_v1.paths).hyper_threading


def test_this_machine(tmp_path):
    from koordlet.system.paths import HostPaths

    topo = read_cpu_topology(HostPaths.host())
    assert topo.number_cpus >= 1
    assert sorted(topo.cpus()) == topo.cpus()
