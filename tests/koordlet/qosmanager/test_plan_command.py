"""``koordlet plan`` as a user runs it: a scenario file and a host tree in, the exact
writes and evictions out (and nothing changed on the host)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from koordlet.__main__ import main
from tests.fakes.host import FakeHost
from tests.fakes.pods import make_pod

BE_CID = "containerd://" + "e" * 64


def _roots(host: FakeHost) -> list[str]:
    p = host.paths
    return [
        "--cgroup-root-dir",
        str(p.cgroup_root),
        "--proc-root-dir",
        str(p.proc_root),
        "--sys-root-dir",
        str(p.sys_root),
    ]


def _run(capsys: Any, host: FakeHost, scenario: dict[str, Any], *extra: str) -> dict[str, Any]:
    path = host.root / "scenario.yaml"
    path.write_text(yaml.safe_dump(scenario))
    assert main(["plan", "--scenario", str(path), "-o", "json", *_roots(host), *extra]) == 0
    result: dict[str, Any] = json.loads(capsys.readouterr().out)
    return result


@pytest.fixture
def host(tmp_path: Path) -> FakeHost:
    host = FakeHost(tmp_path / "host", "v1", driver="cgroupfs")
    host.set_cpu_topology(sockets=1, cores_per_socket=4, threads_per_core=2)
    host.set("cpuset.cpus", "", "0-7")
    return host


def _scenario(host: FakeHost, **usage: Any) -> dict[str, Any]:
    be = make_pod("batch", "jobs").qos("BE").kube_qos("BestEffort").container("main", cid=BE_CID).build()
    web = make_pod("web", "prod").qos("LS").kube_qos("Burstable").build()
    host.add_pod("BestEffort", be["metadata"]["uid"], [BE_CID])
    return {
        "now": 1000,
        "featureGates": "BEMemoryEvict=true",
        "node": {
            "status": {
                "capacity": {"cpu": "8", "memory": "16Gi"},
                "allocatable": {"cpu": "8", "memory": "16Gi"},
            }
        },
        "nodeSLO": {"resourceUsedThresholdWithBE": {"enable": True, "cpuSuppressThresholdPercent": 65}},
        "pods": [be, web],
        "usage": usage,
    }


def test_cpu_suppress_scenario(capsys, host):
    scenario = _scenario(
        host,
        node={"cpu": 4, "memory": "8Gi"},
        pods={"prod/web": {"cpu": 2}, "jobs/batch": {"cpu": "1500m"}},
    )
    uid = scenario["pods"][0]["metadata"]["uid"]
    before = (host.cgroups.directory("cpuset", "kubepods/besteffort") / "cpuset.cpus").read_text()
    result = _run(capsys, host, scenario, "--strategy", "CPUSuppress")
    cg = host.paths.cgroup_root
    assert result == {
        "CPUSuppress": {
            "writes": [
                {"file": f"{cg}/cpu/kubepods/besteffort/cpu.cfs_quota_us", "value": "-1"},
                {
                    "file": f"{cg}/cpuset/kubepods/besteffort/pod{uid}/{'e' * 64}/cpuset.cpus",
                    "value": "0-1,4",
                },
                {"file": f"{cg}/cpuset/kubepods/besteffort/pod{uid}/cpuset.cpus", "value": "0-1,4"},
                {"file": f"{cg}/cpuset/kubepods/besteffort/cpuset.cpus", "value": "0-1,4"},
            ],
            "evictions": [],
            "notes": [],
        }
    }
    # a dry run: nothing was written
    assert (host.cgroups.directory("cpuset", "kubepods/besteffort") / "cpuset.cpus").read_text() == before


def test_memory_evict_scenario(capsys, host):
    scenario = _scenario(
        host, node={"memory": "12Gi"}, pods={"jobs/batch": {"memory": "3Gi"}, "prod/web": {"memory": "6Gi"}}
    )
    result = _run(capsys, host, scenario, "--strategy", "MemoryEvict")
    assert result["MemoryEvict"]["writes"] == []
    assert result["MemoryEvict"]["evictions"] == [
        {
            "pod": "jobs/batch",
            "feature": "BEMemoryEvict",
            "reason": "evictPodByNodeMemoryUsage",
            "message": "node memory usage 75% >= 70%, releasing 1202590843 bytes to reach 68%; "
            "koordlet feature BEMemoryEvict",
        }
    ]


def test_table_output(capsys, host):
    scenario = _scenario(host, node={"memory": "12Gi"}, pods={"jobs/batch": {"memory": "3Gi"}})
    path = host.root / "s.yaml"
    path.write_text(yaml.safe_dump(scenario))
    assert main(["plan", "--scenario", str(path), *_roots(host)]) == 0
    out = capsys.readouterr().out
    assert "MemoryEvict:\n  evict  jobs/batch  [evictPodByNodeMemoryUsage]" in out
    assert "CPUSuppress:\n  note   no node CPU usage" in out


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not yaml", "not YAML"),
        ("pods: 3", "pods: expected a list"),
        (
            "nodeSLO: {resourceUsedThresholdWithBE: {enable: maybe}}",
            "nodeSLO.resourceUsedThresholdWithBE.enable",
        ),
        ("featureGates: NoSuchGate=true", "featureGates"),
        ("usage: {pods: {default/ghost: {cpu: 1}}}", "no such pod"),
        ("usage: {node: {cpu: lots}}", "usage.node.cpu"),
    ],
)
def test_bad_scenarios_exit_2_with_one_line(capsys, host, content, message):
    path = host.root / "bad.yaml"
    path.write_text(content)
    with pytest.raises(SystemExit) as exit_info:
        main(["plan", "--scenario", str(path), *_roots(host)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert message in err[0]


def test_unknown_strategy(capsys, host):
    path = host.root / "s.yaml"
    path.write_text("{}")
    with pytest.raises(SystemExit):
        main(["plan", "--scenario", str(path), "--strategy", "Nope", *_roots(host)])
    assert "unknown strategies: Nope" in capsys.readouterr().err


def test_every_kind_of_update_is_described(host):
    from koordlet.executor import FileUpdate, ResctrlGroupUpdate, ResctrlSchemataUpdate, ResctrlTasksUpdate
    from koordlet.qosmanager.framework import Plan
    from koordlet.qosmanager.scenario import describe

    plan = Plan(
        "Any",
        updates=[
            ResctrlGroupUpdate("BE"),
            ResctrlSchemataUpdate("BE", "L3:0=f"),
            ResctrlTasksUpdate("BE", (7, 8)),
            FileUpdate(host.paths.proc("sys/vm/min_free_kbytes"), "65536"),
        ],
    )
    writes = describe(plan, host.cgroups)["writes"]
    assert writes == [
        {"file": "resctrl/BE/", "value": "(mkdir)"},
        {"file": "resctrl/BE/schemata", "value": "L3:0=f"},
        {"file": "resctrl/BE/tasks", "value": "7 8"},
        {"file": str(host.paths.proc("sys/vm/min_free_kbytes")), "value": "65536"},
    ]
