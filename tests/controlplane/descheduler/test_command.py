"""The ``koord-descheduler`` command: ``explain`` over files (the same plug-ins as the
process), and one-line exit-2 errors for configurations and input it cannot use."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from controlplane.descheduler.__main__ import main

NODES = """
apiVersion: v1
kind: List
items:
{items}
"""
NODE = """
- apiVersion: v1
  kind: Node
  metadata: {{name: {name}}}
  status:
    allocatable: {{cpu: "10", memory: 10Gi, pods: "110"}}
    conditions: [{{type: Ready, status: "True"}}]
"""
POD = """
- apiVersion: v1
  kind: Pod
  metadata:
    name: {name}
    namespace: default
    uid: uid-{name}
    labels: {{koordinator.sh/qosClass: {qos}}}
    ownerReferences: [{{apiVersion: apps/v1, kind: ReplicaSet, name: {rs}, uid: {rs}-uid, controller: true}}]
  spec:
    nodeName: hot
    schedulerName: koord-scheduler
    priority: {priority}
    containers: [{{name: c, resources: {{requests: {{cpu: "1", memory: 1Gi}}}}}}]
  status: {{phase: Running, conditions: [{{type: Ready, status: "True"}}]}}
"""
METRIC = """
- apiVersion: slo.koordinator.sh/v1alpha1
  kind: NodeMetric
  metadata: {{name: {name}}}
  status:
    updateTime: "2026-11-27T11:59:30Z"
    nodeMetric:
      nodeUsage: {{resources: {{cpu: "{cpu}", memory: 1Gi}}}}
      systemUsage: {{resources: {{cpu: "{system}", memory: 1Gi}}}}
    podsMetric: {pods}
"""
CONFIG = """
apiVersion: descheduler/v1alpha2
kind: DeschedulerConfiguration
profiles:
- name: koord-descheduler
  plugins:
    balance:
      enabled: [{name: LowNodeLoad}]
  pluginConfig:
  - name: LowNodeLoad
    args:
      lowThresholds: {cpu: 45, memory: 55}
      highThresholds: {cpu: 75, memory: 80}
"""
REPLICA_SET = """
apiVersion: apps/v1
kind: ReplicaSet
metadata: {name: web, namespace: default, uid: web-uid}
spec: {replicas: 2}
"""


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    pods_usage = (
        "[{namespace: default, name: be-1, podUsage: {resources: {cpu: '3', memory: 1Gi}}},"
        " {namespace: default, name: be-2, podUsage: {resources: {cpu: '2', memory: 1Gi}}},"
        " {namespace: default, name: solo, podUsage: {resources: {cpu: '2', memory: 1Gi}}}]"
    )
    written = {
        "nodes": NODES.format(items="".join(NODE.format(name=n) for n in ("hot", "cool", "mid"))),
        "pods": NODES.format(
            items=POD.format(name="be-1", qos="BE", rs="web", priority=5500)
            + POD.format(name="be-2", qos="BE", rs="web", priority=5500)
            + POD.format(name="solo", qos="BE", rs="solo", priority=5500)
        ),
        "metrics": NODES.format(
            items=METRIC.format(name="hot", cpu=8, system=1, pods=pods_usage)
            + METRIC.format(name="cool", cpu=1, system=1, pods="[]")
            + METRIC.format(name="mid", cpu=5, system=5, pods="[]")
        ),
        "config": CONFIG,
        "objects": REPLICA_SET,
    }
    paths = {}
    for name, text in written.items():
        paths[name] = tmp_path / f"{name}.yaml"
        paths[name].write_text(text)
    return paths


def explain(files: dict[str, Path], *extra: str) -> list[str]:
    return [
        "explain",
        "--nodes",
        str(files["nodes"]),
        "--pods",
        str(files["pods"]),
        "--node-metrics",
        str(files["metrics"]),
        "--config",
        str(files["config"]),
        "--objects",
        str(files["objects"]),
        "--now",
        "2026-11-27T12:00:00Z",
        *extra,
    ]


def test_explain_says_which_nodes_and_pods(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(explain(files, "--output", "json")) == 0
    report = json.loads(capsys.readouterr().out)
    (profile,) = report["profiles"]
    # the default anomaly condition (5 consecutive abnormalities) needs 6 rounds
    assert profile["rounds"] == 6
    (pool,) = profile["nodePools"]
    assert (pool["lowNodes"], pool["highNodes"], pool["anomalousNodes"]) == (["cool"], ["hot"], ["hot"])
    hot = next(n for n in pool["nodes"] if n["name"] == "hot")
    assert hot["anomaly"] == {"state": "Anomaly", "consecutiveAbnormalities": 0}
    assert pool["budget"]["cpu"] == 6500
    # solo's ReplicaSet is not known: its one pod is all it has, and one replica never migrates
    assert {"pod": "default/solo", "reason": "workload ReplicaSet default/solo expects 1 replica"} in profile[
        "refusedByMigrationController"
    ]
    assert profile["migrations"] == [
        {
            "pod": "default/be-2",
            "node": "hot",
            "plugin": "LowNodeLoad",
            "reason": "node is overutilized, cpu usage(80.00%)>threshold(75.00%)",
        }
    ]


def test_explain_rounds_and_text(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(explain(files, "--rounds", "1")) == 0
    out = capsys.readouterr().out
    assert "none of the nodes were detected as anomalous" in out
    assert "hot: high (over cpu)" in out


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"config": "profiles: 3\n"}, "profiles: must be a list"),
        (
            {
                "metrics": "kind: NodeMetric\nmetadata: {name: x}\n"
                "status: {nodeMetric: {nodeUsage: {resources: {cpu: lots}}}}\n"
            },
            "NodeMetric x",
        ),
        ({"pods": "a: [b\n"}, "not valid YAML/JSON"),
    ],
)
def test_explain_refuses_bad_input_in_one_line(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str], change: dict[str, str], message: str
) -> None:
    for name, text in change.items():
        files[name].write_text(text)
    with pytest.raises(SystemExit) as exit_:
        main(explain(files))
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith("koord-descheduler explain: error:")
    assert message in err[0]


def test_a_configuration_upstream_refuses_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("apiVersion: descheduler/v1alpha2\nkind: DeschedulerConfiguration\nbogus: 1\n")
    with pytest.raises(SystemExit) as exit_:
        main(["--config", str(config)])
    assert exit_.value.code == 2
    assert "unknown field(s) ['bogus']" in capsys.readouterr().err
