"""``koordlet plan`` as a user runs it: a scenario file and a host tree in, the exact
writes and evictions out (and nothing changed on the host)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from koordinator.api.extension.constants import LABEL_POD_EVICT_ENABLE
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
    host.set("cpuset.cpus", "kubepods/besteffort", "0-7")
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
            "message": "node memory usage 75% >= 70%, releasing 1202590842 bytes to reach 68%; "
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


def _errors(capsys: Any, host: FakeHost, content: str) -> list[str]:
    """The problems ``koordlet plan`` reports for a scenario, without the common prefix."""
    path = host.root / "bad.yaml"
    path.write_text(content)
    with pytest.raises(SystemExit) as exit_info:
        main(["plan", "--scenario", str(path), *_roots(host)])
    assert exit_info.value.code == 2
    prefix = f"koordlet: error: scenario {path}: "
    lines = capsys.readouterr().err.splitlines()
    assert all(line.startswith(prefix) for line in lines), lines
    return [line.removeprefix(prefix) for line in lines]


POD = "{metadata: {name: web, namespace: prod, uid: u1}}"


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        pytest.param(
            "featureGate: BEMemoryEvict=true",
            "featureGate: unknown key (did you mean featureGates?)",
            id="top-level-typo",
        ),
        pytest.param(
            "usage: {node: {cpu: eight}}",
            "usage.node.cpu: 'eight' is not a quantity (a number, or a string like 1500m or 8Gi)",
            id="cpu-eight",
        ),
        pytest.param("usage: {node: {cpu: -2}}", "usage.node.cpu: -2 is negative", id="negative-usage"),
        pytest.param(
            "usage: {node: {memroy: 1Gi}}",
            "usage.node.memroy: unknown key (did you mean memory?)",
            id="usage-typo",
        ),
        pytest.param(
            "usage: {nodes: {}}",
            "usage.nodes: unknown key (did you mean node?)",
            id="usage-level-typo",
        ),
        pytest.param(
            f"pods: [{POD}]\nusage: {{pods: {{prod/web: {{cpus: 1}}}}}}",
            "usage.pods.prod/web.cpus: unknown key (did you mean cpu?)",
            id="pod-usage-typo",
        ),
        pytest.param(
            "usage: {hostApplications: {nginx: {cpu: 1}}}",
            "usage.hostApplications.nginx: no such host application nginx in nodeSLO.hostApplications",
            id="unknown-host-application",
        ),
        pytest.param(
            "nodeSLO: {resourceUsedThresholdWithBE: {cpuSuppressThresholdPercent: 250}}",
            "nodeSLO.resourceUsedThresholdWithBE.cpuSuppressThresholdPercent: "
            "Invalid value: 250: should be less than or equal to 100",
            id="percent-out-of-range",
        ),
        pytest.param(
            "nodeSLO: {resourceUsedThresholdWithBE: {cpuSupressPolicy: cpuset}}",
            "nodeSLO.resourceUsedThresholdWithBE.cpuSupressPolicy: "
            "unknown key (did you mean cpuSuppressPolicy?)",
            id="node-slo-typo",
        ),
        pytest.param(
            "nodeSLO: {resourceUsedThresholdWithBE: {enable: maybe}}",
            "nodeSLO.resourceUsedThresholdWithBE.enable: expected a boolean, got 'maybe'",
            id="node-slo-type",
        ),
        pytest.param(
            "nodeSLO: {resourceUsedThresholdWithBE: "
            "{memoryEvictThresholdPercent: 60, memoryEvictLowerPercent: 65}}",
            "nodeSLO.resourceUsedThresholdWithBE: memoryEvictThresholdPercent must be greater than "
            "memoryEvictLowerPercent",
            id="node-slo-rule",
        ),
        pytest.param(
            "nodeSLO: {spec: {}}",
            "nodeSLO.spec: unknown key (nodeSLO is the NodeSLO's spec: move its keys up)",
            id="node-slo-object-given",
        ),
        pytest.param(
            "node: {status: {capacity: {cpu: eight}}}",
            "node.status.capacity.cpu: 'eight' is not a quantity (a number, or a string like 1500m or 8Gi)",
            id="node-capacity",
        ),
        pytest.param(
            "node: {stauts: {}}",
            "node.stauts: unknown key (did you mean status?)",
            id="node-typo",
        ),
        pytest.param(
            "pods: [{metadata: {name: web, uid: u1}, spec: {prority: 5}}]",
            "pods[0].spec.prority: unknown key (did you mean priority?)",
            id="pod-spec-typo",
        ),
        pytest.param(
            "pods: [{metadata: {name: web, uid: u1}, "
            "spec: {containers: [{name: c, resources: {requests: {cpu: x}}}]}}]",
            "pods[0].spec.containers[0].resources.requests.cpu: 'x' is not a quantity "
            "(a number, or a string like 1500m or 8Gi)",
            id="container-request",
        ),
        pytest.param(
            "pods: [{metadata: {name: web, uid: u1, labels: {tier: 2}}}]",
            "pods[0].metadata.labels.tier: expected a string, got a number (quote it)",
            id="label-not-a-string",
        ),
        pytest.param(
            "pods: [{metadata: {name: web}}]",
            "pods[0].metadata.uid: required (the pod's cgroup is named after it)",
            id="pod-without-uid",
        ),
        pytest.param(
            f"pods: [{POD}, {POD}]",
            "pods[1]: prod/web is already pods[0]",
            id="pod-twice",
        ),
        pytest.param(
            "pods: [{metadata: {name: web, uid: u1}, status: {phase: Runing}}]",
            "pods[0].status.phase: 'Runing' is not one of Pending, Running, Succeeded, Failed, Unknown",
            id="pod-phase",
        ),
        pytest.param(
            "now: yesterday",
            "now: 'yesterday' is neither seconds since the epoch "
            "nor an RFC 3339 time such as 2024-01-01T00:00:00Z",
            id="now-unparsable",
        ),
        pytest.param(
            "collectInterval: 0",
            "collectInterval: 0 is not a positive number of seconds or a duration such as 1s",
            id="interval-zero",
        ),
        pytest.param(
            "kubeletCPUPolicy: Static",
            "kubeletCPUPolicy: 'Static' is not one of none, static",
            id="cpu-policy",
        ),
        pytest.param(
            "featureGates: {BEMemoryEvict: yes please}",
            "featureGates.BEMemoryEvict: expected true or false, got a string",
            id="gate-value",
        ),
        pytest.param(
            "pods: []\npods: []", "not YAML: line 2, column 1: duplicate key 'pods'", id="duplicate-key"
        ),
        pytest.param(
            "- now",
            "a scenario is a mapping of now, collectInterval, featureGates, kubeletCPUPolicy, node, nodeSLO, "
            "pods, usage; got a list",
            id="not-a-mapping",
        ),
    ],
)
def test_every_problem_is_named_with_its_path(capsys, host, content, problem):
    assert _errors(capsys, host, content) == [problem]


def test_all_problems_are_reported_one_line_each(capsys, host):
    content = "nodeSlo: {}\nnow: never\nusage: {node: {cpu: eight}}\n"
    assert _errors(capsys, host, content) == [
        "nodeSlo: unknown key (did you mean nodeSLO?)",
        "now: 'never' is neither seconds since the epoch nor an RFC 3339 time such as 2024-01-01T00:00:00Z",
        "usage.node.cpu: 'eight' is not a quantity (a number, or a string like 1500m or 8Gi)",
    ]


@pytest.mark.parametrize(
    "now",
    [
        pytest.param("1000", id="seconds"),
        pytest.param("1970-01-01T00:16:40Z", id="yaml-timestamp"),
        pytest.param("'1970-01-01T00:16:40Z'", id="rfc3339-string"),
    ],
)
def test_now_as_seconds_or_a_time(capsys, host, now):
    path = host.root / "s.yaml"
    path.write_text(f"now: {now}\nfeatureGates: {{BEMemoryEvict: true}}\ncollectInterval: 2s\n")
    from koordlet.qosmanager.scenario import Scenario

    scenario = Scenario.parse(path.read_text())
    assert scenario.now == 1000.0
    assert scenario.collect_interval == 2.0
    assert scenario.gates.enabled("BEMemoryEvict")


def test_pods_default_to_the_default_namespace(capsys, host):
    scenario = _scenario(host, node={"memory": "12Gi"}, pods={"batch": {"memory": "3Gi"}})
    del scenario["pods"][0]["metadata"]["namespace"]
    result = _run(capsys, host, scenario, "--strategy", "MemoryEvict")
    assert [e["pod"] for e in result["MemoryEvict"]["evictions"]] == ["default/batch"]


def _enabled_pod(name: str, qos: str, priority: int) -> dict[str, Any]:
    return make_pod(name, "apps").qos(qos).label(LABEL_POD_EVICT_ENABLE, "true").priority(priority).build()


def test_the_plan_lists_only_pods_the_evictor_evicts(capsys, host):
    """An eviction-enabled LS pod would come first, but the evictor never evicts LS pods:
    the plan shows the BE pod taken in its place, and why the LS pod is not."""
    scenario = _scenario(host, node={"memory": "12Gi"})
    scenario["featureGates"] = "MemoryEvict=true"
    scenario["nodeSLO"] = {
        "resourceUsedThresholdWithBE": {"enable": True, "evictEnabledPriorityThreshold": 1000}
    }
    scenario["pods"] = [_enabled_pod("web", "LS", 10), _enabled_pod("batch", "BE", 100)]
    scenario["usage"]["pods"] = {"apps/web": {"memory": "4Gi"}, "apps/batch": {"memory": "2Gi"}}
    result = _run(capsys, host, scenario, "--strategy", "MemoryEvict")["MemoryEvict"]
    assert [e["pod"] for e in result["evictions"]] == ["apps/batch"]
    assert result["notes"] == [
        "MemoryEvict: passed over apps/web (LS): LSE, LSR and LS pods are never evicted",
    ]


def test_the_plan_says_which_evictions_wait_for_the_evictors_rate_limit(capsys, host):
    scenario = _scenario(host, node={"memory": "15Gi"})
    scenario["pods"] = [make_pod(f"be-{i}", "jobs").qos("BE").build() for i in range(7)]
    scenario["usage"]["pods"] = {f"jobs/be-{i}": {"memory": f"{100 - i}Mi"} for i in range(7)}
    result = _run(capsys, host, scenario, "--strategy", "MemoryEvict")["MemoryEvict"]
    assert len(result["evictions"]) == 7
    assert (
        "the evictor asks for at most 5 evictions at once, then 1 a second: jobs/be-5, jobs/be-6 would wait"
        in result["notes"]
    )


def test_unknown_strategy(capsys, host):
    path = host.root / "s.yaml"
    path.write_text("{}")
    with pytest.raises(SystemExit):
        main(["plan", "--scenario", str(path), "--strategy", "Nope", *_roots(host)])
    assert "unknown strategies: Nope" in capsys.readouterr().err


def test_every_kind_of_update_is_described(host):
    from koordlet.executor import (
        FileUpdate,
        Host,
        ResctrlGroupUpdate,
        ResctrlSchemataUpdate,
        ResctrlTasksUpdate,
    )
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
    writes = describe(plan, Host.of(host.cgroups))["writes"]
    assert writes == [
        {"file": "resctrl/BE/", "value": "(mkdir)"},
        {"file": "resctrl/BE/schemata", "value": "L3:0=f"},
        {"file": "resctrl/BE/tasks", "value": "7 8"},
        {"file": str(host.paths.proc("sys/vm/min_free_kbytes")), "value": "65536"},
    ]


def test_the_documented_example_is_a_valid_scenario(capsys, host):
    """docs/plan-scenario.md's example plans (the page documents the format)."""
    page = Path(__file__).parents[3] / "docs" / "plan-scenario.md"
    example = page.read_text().split("```yaml\n", 1)[1].split("```", 1)[0]
    path = host.root / "example.yaml"
    path.write_text(example)
    assert (
        main(["plan", "--scenario", str(path), "-o", "json", *_roots(host), "--strategy", "MemoryEvict"]) == 0
    )
    result = json.loads(capsys.readouterr().out)
    assert [e["pod"] for e in result["MemoryEvict"]["evictions"]] == ["jobs/batch"]
