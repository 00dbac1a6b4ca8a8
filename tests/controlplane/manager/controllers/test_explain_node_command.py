"""``koord-manager explain-node``: live against an apiserver, from files, text and JSON, usage errors."""

from __future__ import annotations

import asyncio
import copy
import io
import json
import os
import subprocess
import sys
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import pytest
import yaml

from controlplane.manager.__main__ import main as koord_manager
from koordinator.kube import resources as res
from koordinator.kube.timeutil import format_time
from tests.controlplane.manager.controllers.golden import CASES, NODE
from tests.controlplane.manager.controllers.harness import ROOT, seed, started_fake
from tests.controlplane.manager.controllers.objects import config_map
from tests.controlplane.manager.controllers.test_golden_formulas import write_inputs
from tests.fakes.kubeconfig import write_kubeconfig

DEFAULTS = CASES[0]
MAX_USAGE_REQUEST = next(c for c in CASES if c.id == "max-usage-request-counts-unreported-pods")


def run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = koord_manager(argv)
        except SystemExit as exc:
            code = int(exc.code or 0)
    return code, out.getvalue(), err.getvalue()


def kubeconfig(tmp_path: Path, url: str) -> str:
    return str(write_kubeconfig(tmp_path / "kubeconfig", url))


async def test_live_explanation_matches_the_files(tmp_path):
    case = copy.deepcopy(MAX_USAGE_REQUEST)
    assert case.metric is not None
    # live explanations run at the current time: the report must be recent
    reported = format_time(time.time() - 30)
    case.metric["status"]["updateTime"] = reported
    config = case.config()
    assert config is not None
    fake = await started_fake()
    try:
        seed(fake, [case.node, *case.pods, case.metric, config])
        argv = ["explain-node", NODE, "--kubeconfig", kubeconfig(tmp_path, fake.url), "--output", "json"]
        code, out, err = await asyncio.to_thread(run, argv)
        assert (code, err) == (0, "")
        live = json.loads(out)
        files = write_inputs(case, tmp_path)
        files[files.index("--now") + 1] = format_time(time.time())
        code, out, _ = await asyncio.to_thread(run, files)
        offline = json.loads(out)
        assert (live["batch"], live["mid"]) == (offline["batch"], offline["mid"])
        assert live["batch"] == {"kubernetes.io/batch-cpu": "2k", "kubernetes.io/batch-memory": "33Gi"}
        code, out, err = await asyncio.to_thread(
            run, ["explain-node", "missing", "--kubeconfig", kubeconfig(tmp_path, fake.url)]
        )
        assert code == 1
        assert err == "koord-manager explain-node: node missing not found\n"
    finally:
        await fake.stop()


def test_text_output_walks_through_the_calculation(tmp_path):
    argv = write_inputs(DEFAULTS, tmp_path)
    argv[argv.index("--output") + 1] = "text"
    code, out, _ = run(argv)
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == ("node node-1: batch-cpu=4600, batch-memory=28561532519, mid-cpu=0, mid-memory=0")
    text = "\n".join(lines)
    for expected in (
        "batch.safetyMargin",
        "cpu     6400m",
        "batch.systemUsedOrReserved",
        "request for 1 pod(s) not reported yet",
        "batch.result",
        "kubernetes.io/batch-cpu: absent -> 4600",
    ):
        assert expected in text


def test_a_degraded_node_says_why(tmp_path):
    case = next(c for c in CASES if c.id == "stale-nodemetric-degrades")
    code, out, _ = run(write_inputs(case, tmp_path))
    result = json.loads(out)
    assert code == 0
    assert (result["batch"], result["mid"]) == (None, None)
    nodemetric = next(s for s in result["steps"] if s["name"] == "nodemetric")
    assert nodemetric["detail"] == (
        "degraded: NodeMetric last updated 2025-12-31T23:45:59Z (901s ago), "
        "more than degradeTimeMinutes=15 ago"
    )


async def test_live_a_broken_key_takes_the_persisted_last_good_value_as_the_controller_does(tmp_path):
    """With colocation-config broken, the leader keeps its last good value from the persisted copy;
    explain-node reads the same copy, so it explains the batch resources the node really gets."""
    case = copy.deepcopy(MAX_USAGE_REQUEST)
    assert case.metric is not None
    case.metric["status"]["updateTime"] = format_time(time.time() - 30)
    config = case.config()
    assert config is not None
    good = config["data"]["colocation-config"]
    fake = await started_fake()
    try:
        seed(fake, [case.node, *case.pods, case.metric, config])
        stored = fake.get(res.CONFIG_MAPS, config["metadata"]["name"], config["metadata"]["namespace"])
        stored["data"]["colocation-config"] = "{broken"
        fake.update(res.CONFIG_MAPS, stored)
        owner = {"apiVersion": "v1", "kind": "ConfigMap", "name": stored["metadata"]["name"]}
        copy_of: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": stored["metadata"]["name"] + "-last-good",
                "namespace": stored["metadata"]["namespace"],
                "ownerReferences": [{**owner, "uid": stored["metadata"]["uid"]}],
            },
            "data": {"colocation-config": good},
        }
        seed(fake, [copy_of])
        argv = ["explain-node", NODE, "--kubeconfig", kubeconfig(tmp_path, fake.url), "--output", "json"]
        code, out, err = await asyncio.to_thread(run, argv)
        assert (code, err) == (0, "")
        live = json.loads(out)
        assert live["batch"] == {"kubernetes.io/batch-cpu": "2k", "kubernetes.io/batch-memory": "33Gi"}
        notes = [s["detail"] for s in live["steps"] if s["name"] == "config"]
        assert notes[0].startswith(
            "colocation-config does not parse, its persisted last good value is used, as in the running "
            "controller"
        )

        # a copy written for another ConfigMap (another uid) is not this one's
        other = fake.get(res.CONFIG_MAPS, copy_of["metadata"]["name"], stored["metadata"]["namespace"])
        other["metadata"]["ownerReferences"] = [{**owner, "uid": "another"}]
        fake.update(res.CONFIG_MAPS, other)
        code, out, _ = await asyncio.to_thread(run, argv)
        assert json.loads(out)["batch"] is None, "the defaults turn colocation off"
    finally:
        await fake.stop()


def test_a_broken_config_key_is_reported_and_the_defaults_used(tmp_path):
    argv = write_inputs(DEFAULTS, tmp_path)
    broken = config_map({"enable": True})
    broken["data"]["resource-threshold-config"] = "{not json"
    broken["data"]["colocation-config"] = json.dumps({"enable": True, "cpuReclaimThresholdPercent": -1})
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(broken))
    code, out, _ = run(argv)
    result = json.loads(out)
    assert code == 0
    notes = [s["detail"] for s in result["steps"] if s["name"] == "config"]
    assert len(notes) == 2
    assert notes[0].startswith("colocation-config does not parse, the defaults are used here")
    assert "resource-threshold-config" in notes[1]
    assert result["batch"] is None, "the defaults turn colocation off"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param(["--node", "n.yaml"], "--node needs --from-files", id="file-flag-without-from-files"),
        pytest.param(["--from-files"], "--from-files needs --node FILE", id="from-files-without-node"),
        pytest.param(
            ["--from-files", "--node", "/nonexistent.yaml"], "cannot read /nonexistent.yaml", id="missing"
        ),
        pytest.param(["--now", "2026-01-01T00:00:00Z"], "--now needs --from-files", id="now-live"),
    ],
)
def test_usage_errors_exit_2_with_one_line(argv, message):
    code, _, err = run(["explain-node", NODE, *argv])
    assert code == 2
    assert message in err
    assert err.count("\n") == 1


def test_a_node_file_for_another_node_or_a_bad_time_is_refused(tmp_path):
    argv = write_inputs(DEFAULTS, tmp_path)
    argv[argv.index(NODE)] = "other-node"
    code, _, err = run(argv)
    assert code == 2
    assert "the Node is 'node-1', not 'other-node'" in err
    argv = write_inputs(DEFAULTS, tmp_path)
    argv[argv.index("--now") + 1] = "yesterday"
    code, _, err = run(argv)
    assert code == 2
    assert "--now: 'yesterday' is not an RFC 3339 time" in err


def test_pods_of_other_nodes_and_list_files_are_handled(tmp_path):
    argv = write_inputs(DEFAULTS, tmp_path)
    pods: list[Any] = list(yaml.safe_load_all((tmp_path / "pods.yaml").read_text()))
    stranger = copy.deepcopy(pods[0])
    stranger["metadata"]["name"] = "elsewhere"
    stranger["spec"]["nodeName"] = "node-2"
    (tmp_path / "pods.yaml").write_text(
        yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [*pods, stranger]})
    )
    code, out, _ = run(argv)
    assert code == 0
    assert json.loads(out)["batch"] == {
        "kubernetes.io/batch-cpu": "4600",
        "kubernetes.io/batch-memory": "28561532519",
    }


def test_a_reader_that_goes_away_is_not_an_error(tmp_path):
    """``koord-manager explain-node ... | head -1``: the rest of the output is dropped quietly."""
    argv = write_inputs(DEFAULTS, tmp_path)
    argv[argv.index("--output") + 1] = "text"
    reader, writer = os.pipe()
    os.close(reader)  # the reader is gone before the first line is written
    try:
        result = subprocess.run(
            [sys.executable, "-m", "controlplane.manager", *argv],
            stdout=writer,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            check=False,
            cwd=ROOT,
        )
    finally:
        os.close(writer)
    assert (result.returncode, result.stderr) == (0, "")


MODEL = "Intel(R) Xeon(R) Platinum 8269CY CPU @ 2.50GHz"


def _normalization_inputs(tmp_path: Path, node_annotations: dict[str, str]) -> list[str]:
    """The DEFAULTS case with CPU normalization and amplification configured, the node
    carrying ``node_annotations``."""
    case = copy.deepcopy(DEFAULTS)
    case.node["metadata"].setdefault("annotations", {}).update(node_annotations)
    argv = write_inputs(case, tmp_path)
    config = yaml.safe_load((tmp_path / "config.yaml").read_text())
    config["data"]["cpu-normalization-config"] = json.dumps(
        {"enable": True, "ratioModel": {MODEL: {"baseRatio": 1.1, "hyperThreadEnabledRatio": 1.25}}}
    )
    config["data"]["resource-amplification-config"] = json.dumps(
        {"enable": True, "resourceAmplificationRatio": {"memory": 1.5}}
    )
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    basic = {"cpuModel": MODEL, "hyperThreadEnabled": True, "turboEnabled": False}
    nrt = {
        "apiVersion": "topology.node.k8s.io/v1alpha1",
        "kind": "NodeResourceTopology",
        "metadata": {"name": NODE, "annotations": {"node.koordinator.sh/cpu-basic-info": json.dumps(basic)}},
        "zones": [],
    }
    (tmp_path / "nrt.yaml").write_text(yaml.safe_dump(nrt))
    return argv


def _details(out: str) -> dict[str, str]:
    return {step["name"]: step["detail"] for step in json.loads(out)["steps"] if step["name"] != "input"}


def test_the_normalization_and_amplification_annotations_are_explained(tmp_path):
    argv = _normalization_inputs(tmp_path, {})
    code, out, _ = run([*argv, "--nrt", str(tmp_path / "nrt.yaml")])
    assert code == 0
    details = _details(out)
    assert details["normalization"] == (
        f"cpu-normalization-ratio: the node has absent; computed 1.25 from CPU {MODEL!r} "
        "(hyper-threading on, turbo off): written"
    )
    assert details["amplification"] == (
        'resource-amplification-ratio: the node has absent; computed {"cpu":1.25,"memory":1.50}: written'
    )
    # the node already carries them: nothing to change
    argv = _normalization_inputs(
        tmp_path,
        {
            "node.koordinator.sh/cpu-normalization-ratio": "1.25",
            "node.koordinator.sh/resource-amplification-ratio": '{"cpu":1.25,"memory":1.50}',
        },
    )
    details = _details(run([*argv, "--nrt", str(tmp_path / "nrt.yaml")])[1])
    assert details["normalization"].endswith(": unchanged")
    assert details["amplification"].endswith(": unchanged")


def test_without_the_topology_the_nodes_ratio_is_shown(tmp_path):
    argv = _normalization_inputs(tmp_path, {"node.koordinator.sh/cpu-normalization-ratio": "1.10"})
    code, out, _ = run(argv)
    assert code == 0
    details = _details(out)
    assert details["normalization"] == (
        "cpu-normalization-ratio: the node has 1.10; not computed without the NodeResourceTopology"
    )
    assert 'computed {"cpu":1.10,"memory":1.50}' in details["amplification"]
    assert "no --nrt given" in out
    code, _, err = run([*argv[:2], "--nrt", str(tmp_path / "nrt.yaml")])
    assert code == 2
    assert "--nrt needs --from-files" in err


def test_batch_cpu_is_scaled_by_the_ratio_the_node_holds_after_the_sync(tmp_path):
    """As the controller: batch-cpu is scaled by the ratio it writes in the same reconcile,
    and unscaled when normalization is disabled (not by the ratio being replaced by 1.00)."""
    argv = _normalization_inputs(tmp_path, {})
    out = json.loads(run([*argv, "--nrt", str(tmp_path / "nrt.yaml")])[1])
    assert out["batch"]["kubernetes.io/batch-cpu"] == "5750"  # 4600 x 1.25
    argv = _normalization_inputs(tmp_path, {"node.koordinator.sh/cpu-normalization-ratio": "1.25"})
    config = yaml.safe_load((tmp_path / "config.yaml").read_text())
    config["data"]["cpu-normalization-config"] = json.dumps({"enable": False})
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    out = json.loads(run([*argv, "--nrt", str(tmp_path / "nrt.yaml")])[1])
    assert _details(json.dumps(out))["normalization"].endswith("normalization is disabled: 1.00 written")
    assert out["batch"]["kubernetes.io/batch-cpu"] == "4600"
