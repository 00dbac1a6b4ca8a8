"""Golden batch and mid cases, computed by hand, through ``explain-node --from-files`` and the controller.

The same cases (:mod:`.golden`) go through both paths and must give the same numbers: the
offline explanation and the controller share one calculation.
"""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import pytest
import yaml

from controlplane.manager.__main__ import main as koord_manager
from koordinator.api.quantity import Quantity
from koordinator.kube import resources as res
from tests.controlplane.manager.controllers.golden import CASES, NODE, Golden
from tests.controlplane.manager.controllers.harness import running

NAMES = (
    "kubernetes.io/batch-cpu",
    "kubernetes.io/batch-memory",
    "kubernetes.io/mid-cpu",
    "kubernetes.io/mid-memory",
)


def as_numbers(section: dict[str, str] | None) -> dict[str, int] | None:
    if section is None:
        return None
    return {name: Quantity.parse(value).value() for name, value in section.items()}


def write_inputs(case: Golden, directory: Path) -> list[str]:
    argv = ["explain-node", NODE, "--from-files", "--now", case.now, "--output", "json"]
    (directory / "node.yaml").write_text(yaml.safe_dump(case.node))
    argv += ["--node", str(directory / "node.yaml")]
    if case.metric is not None:
        (directory / "nodemetric.yaml").write_text(yaml.safe_dump(case.metric))
        argv += ["--node-metric", str(directory / "nodemetric.yaml")]
    (directory / "pods.yaml").write_text(yaml.safe_dump_all(case.pods))
    argv += ["--pods", str(directory / "pods.yaml")]
    config = case.config()
    if config is not None:
        (directory / "config.yaml").write_text(yaml.safe_dump(config))
        argv += ["--config", str(directory / "config.yaml")]
    return argv


def explain_json(argv: list[str]) -> dict[str, Any]:
    out = io.StringIO()
    with redirect_stdout(out):
        assert koord_manager(argv) == 0
    result: dict[str, Any] = json.loads(out.getvalue())
    return result


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_explain_node_from_files(case, tmp_path):
    result = explain_json(write_inputs(case, tmp_path))
    assert set(result) == {"batch", "mid", "steps"}
    assert {"batch": as_numbers(result["batch"]), "mid": as_numbers(result["mid"])} == case.expected()
    names = [step["name"] for step in result["steps"]]
    if case.batch is not None:
        assert names.index("batch.capacity") < names.index("batch.result") < names.index("mid.result")
        result_step = result["steps"][names.index("batch.result")]
        assert (result_step["cpu"], result_step["memory"]) == case.batch
    else:
        assert any("removed" in step["detail"] for step in result["steps"] if step["name"] == "result")


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
async def test_controller_writes_the_same_numbers(case):
    objects = [case.node, *case.pods]
    if case.metric is not None:
        objects.append(case.metric)
    config = case.config()
    if config is not None:
        objects.append(config)
    async with running(objects, case.now) as harness:
        await harness.settle("noderesource")
        status = harness.fake.get(res.NODES, NODE)["status"]
    for section, names in (("batch", NAMES[:2]), ("mid", NAMES[2:])):
        want = case.expected()[section]
        if want is None:
            assert not any(name in status["allocatable"] or name in status["capacity"] for name in names)
            continue
        assert {name: Quantity.parse(status["allocatable"][name]).value() for name in names} == want
        assert {name: status["capacity"][name] for name in names} == {
            name: status["allocatable"][name] for name in names
        }, "capacity and allocatable are written together"
