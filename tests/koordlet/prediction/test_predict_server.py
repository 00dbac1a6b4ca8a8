"""The peak predict server on a real metric cache and an injected clock: training from the
last interval's p90 (pods, node, priority classes, system), model expiry, checkpoints on
disk (upstream's JSON, at most twelve a step, every ten minutes), and a restart that
restores the same percentiles, skipping (and removing) corrupt and foreign checkpoints."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import orjson
import pytest

from koordlet.metriccache import MetricCache, kinds
from koordlet.prediction.config import PredictionConfig, checkpoint_dir_under
from koordlet.prediction.histogram import parse_go_time
from koordlet.prediction.server import NODE_UID, SYSTEM_UID, PeakPredictServer, Usage, node_item_uid
from tests.fakes.pods import make_pod

GI = 1 << 30
MI = 1 << 20
T0 = parse_go_time("2024-01-01T05:00:00Z")
MINUTE = 60.0
PRIORITY_UIDS = [node_item_uid(p) for p in ("koord-prod", "koord-mid", "koord-batch", "koord-free", "")]


def cpu_end(bucket: int) -> int:
    """Milli-cores of the end of CPU bucket ``bucket``, truncated as a prediction is."""
    return int(0.025 * (1.05 ** (bucket + 1) - 1) / 0.05 * 1000)


def memory_end(bucket: int) -> int:
    return int((5 << 20) * (1.05 ** (bucket + 1) - 1) / 0.05)


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Node:
    """A metric cache fed as the collectors would, the pods the informer lists, a clock."""

    def __init__(self, tmp_path: Path, **config: Any) -> None:
        self.cache = MetricCache(retention_seconds=7200)
        self.pods: list[dict[str, Any]] = []
        self.clock = Clock(T0)
        self.dir = checkpoint_dir_under(tmp_path / "var" / "run", "/prediction-checkpoints")
        self.config = PredictionConfig(checkpoint_dir=self.dir, **config)

    def server(self) -> PeakPredictServer:
        return PeakPredictServer(self.config, self.cache.query, lambda: self.pods, clock=self.clock)

    def usage(self, uid: str | None, cpu: float, memory: float) -> None:
        """Samples over the minute before now: the p90 (lower nearest rank of 10) is the value."""
        now = self.clock.now
        if uid is None:
            kinds_labels = ((kinds.NODE_CPU_USAGE, cpu), (kinds.NODE_MEMORY_USAGE, memory))
            self.cache.append(k.sample(v, now - i) for k, v in kinds_labels for i in range(10))
        else:
            self.cache.append(kinds.POD_CPU_USAGE.sample(cpu, now - i, pod_uid=uid) for i in range(10))
            self.cache.append(kinds.POD_MEMORY_USAGE.sample(memory, now - i, pod_uid=uid) for i in range(10))


def prod_pod(name: str) -> dict[str, Any]:
    return make_pod(name).priority(9500).build()


def test_training_builds_pod_node_priority_and_system_models(tmp_path):
    node = Node(tmp_path)
    web, batch = prod_pod("web"), make_pod("job").priority(5500).build()
    node.pods = [web, batch]
    node.usage(web["metadata"]["uid"], 1.0, GI)
    node.usage(batch["metadata"]["uid"], 0.5, 512 * MI)
    node.usage(None, 2.0, 2 * GI)
    server = node.server()
    server.train()
    assert set(server.models) == {
        web["metadata"]["uid"],
        batch["metadata"]["uid"],
        NODE_UID,
        SYSTEM_UID,
        *PRIORITY_UIDS,
    }
    # one sample each: every percentile is the end of the sample's bucket
    web_prediction = server.get_prediction(web["metadata"]["uid"])
    assert web_prediction is not None
    assert web_prediction["p95"] == Usage(cpu_end(22), memory_end(49))  # 1 core, 1 GiB
    assert set(web_prediction) == {"p60", "p90", "p95", "p98", "max"}
    prod = server.get_prediction(node_item_uid("koord-prod"))
    assert prod is not None
    assert prod["max"] == web_prediction["max"]
    # a class without pods trains a zero: its percentiles are the first bucket's end
    mid = server.get_prediction(node_item_uid("koord-mid"))
    assert mid is not None
    assert mid["p98"] == Usage(cpu_end(0), memory_end(0))
    # system = node - all pods = (0.5 cores, 512 MiB)
    assert server.get_prediction(SYSTEM_UID) == server.get_prediction(batch["metadata"]["uid"])
    assert server.get_prediction("no-such-pod") is None


def test_a_pod_without_usage_gets_no_model(tmp_path):
    node = Node(tmp_path)
    quiet = prod_pod("quiet")
    node.pods = [quiet]
    node.usage(None, 1.0, GI)
    server = node.server()
    server.train()
    assert quiet["metadata"]["uid"] not in server.models
    # with no pod usage the system is the whole node
    assert server.get_prediction(SYSTEM_UID) == server.get_prediction(NODE_UID)


def test_a_pods_memory_before_its_first_cpu_rate_stays_out_of_the_system(tmp_path):
    """A pod's first collection has its memory but no CPU rate: it gets no model yet, and
    its memory is not counted as the system's (upstream counts it, a spike at every start)."""
    node = Node(tmp_path)
    web, batch = prod_pod("web"), make_pod("job").priority(5500).build()
    node.pods = [web, batch]
    node.cache.append(
        kinds.POD_MEMORY_USAGE.sample(1.5 * GI, node.clock.now - i, pod_uid=web["metadata"]["uid"])
        for i in range(10)
    )
    node.usage(batch["metadata"]["uid"], 0.5, 512 * MI)
    node.usage(None, 1.0, 2 * GI + 512 * MI)
    server = node.server()
    server.train()
    assert web["metadata"]["uid"] not in server.models
    # system = node - the batch pod - web's memory = (0.5 cores, 512 MiB), as the batch pod
    assert server.get_prediction(SYSTEM_UID) == server.get_prediction(batch["metadata"]["uid"])


def test_models_idle_past_the_expiration_are_dropped_with_their_checkpoint(tmp_path):
    node = Node(tmp_path)
    web = prod_pod("web")
    uid = web["metadata"]["uid"]
    node.pods = [web]
    node.usage(uid, 1.0, GI)
    node.usage(None, 2.0, 2 * GI)
    server = node.server()
    server.train()
    server.checkpoint()
    assert (node.dir / uid).is_file()
    node.pods = []  # the pod is gone; training goes on for the node
    node.clock.now += 20 * MINUTE
    node.usage(None, 2.0, 2 * GI)
    server.train()
    node.clock.now += 11 * MINUTE  # 31 minutes since the pod's last sample, 11 since the node's
    server.gc()
    assert uid not in server.models
    assert not (node.dir / uid).exists()
    assert NODE_UID in server.models


def test_checkpoints_are_upstreams_json_and_a_restart_restores_the_same_percentiles(tmp_path):
    node = Node(tmp_path)
    web = prod_pod("web")
    uid = web["metadata"]["uid"]
    node.pods = [web]
    server = node.server()
    for cpu, memory in ((1.0, GI), (1.0, GI), (2.0, 3 * GI), (0.5, GI)):
        node.usage(uid, cpu, memory)
        node.usage(None, cpu + 1, memory + GI)
        server.train()
        node.clock.now += MINUTE
    server.checkpoint()
    data = orjson.loads((node.dir / uid).read_bytes())
    assert set(data) == {"UID", "CPU", "Memory", "LastUpdated"}
    assert data["UID"] == uid
    assert data["LastUpdated"] == "2024-01-01T05:04:00Z"
    assert data["CPU"]["referenceTimestamp"] == "2024-01-01T00:00:00Z"  # rounded to 12 h
    assert data["Memory"]["referenceTimestamp"] == "2024-01-01T00:00:00Z"  # rounded to 24 h
    assert set(data["CPU"]["bucketWeights"]) == {"14", "22", "32"}  # 0.5, 1 and 2 cores
    assert max(data["CPU"]["bucketWeights"].values()) == 10000
    assert data["CPU"]["totalWeight"] > 0
    before = {u: server.get_prediction(u) for u in server.models}
    # a new koordlet process: a new server on the same directory
    restarted = node.server()
    restarted.restore()
    assert {u: restarted.get_prediction(u) for u in restarted.models} == before
    assert restarted.get_prediction(uid) is not None


def test_corrupt_and_foreign_checkpoints_are_skipped_and_removed(tmp_path, caplog):
    node = Node(tmp_path)
    web = prod_pod("web")
    uid = web["metadata"]["uid"]
    node.pods = [web]
    node.dir.mkdir(parents=True)
    (node.dir / uid).write_text('{"UID": "x", "CPU": {"bucketWeigh')  # cut off mid-write
    (node.dir / NODE_UID).write_text(json.dumps({"UID": NODE_UID, "CPU": {"bucketWeights": {"9999": 1}}}))
    (node.dir / "gone-pod").write_text(json.dumps({"UID": "gone-pod", "LastUpdated": "2024-01-01T00:00:00Z"}))
    (node.dir / f"{SYSTEM_UID}.tmp").write_text("{}")
    server = node.server()
    with caplog.at_level(logging.INFO, logger="koordlet.prediction"):
        server.restore()
    assert server.models == {}
    assert sorted(p.name for p in node.dir.iterdir()) == []
    assert f"skipping the checkpoint {node.dir / uid} (not JSON" in caplog.text
    assert f"skipping the checkpoint {node.dir / NODE_UID} (bucket 9999 is outside" in caplog.text
    assert "removing the checkpoint of gone-pod, not on this node" in caplog.text


def test_at_most_twelve_checkpoints_a_step_every_ten_minutes(tmp_path):
    node = Node(tmp_path)
    node.pods = [prod_pod(f"p{i}") for i in range(6)]
    for p in node.pods:
        node.usage(p["metadata"]["uid"], 0.1, 100 * MI)
    node.usage(None, 1.0, GI)
    server = node.server()
    server.train()  # 6 pods + node + sys + 5 classes = 13 models
    assert len(server.models) == 13
    server.checkpoint()
    assert len(list(node.dir.iterdir())) == 12
    node.clock.now += MINUTE
    server.checkpoint()  # the one left: never checkpointed, so the oldest
    assert len(list(node.dir.iterdir())) == 13
    written = {p.name: p.stat().st_mtime_ns for p in node.dir.iterdir()}
    node.clock.now += 8 * MINUTE
    server.checkpoint()  # nine minutes since the first twelve: not yet
    assert {p.name: p.stat().st_mtime_ns for p in node.dir.iterdir()} == written
    node.clock.now += MINUTE
    assert len(server.due_checkpoints()) == 12  # ten minutes: the first twelve are due again


def test_nothing_is_collected_or_written_before_the_first_training(tmp_path):
    node = Node(tmp_path)
    server = node.server()
    server.checkpoint()
    server.gc()
    assert not node.dir.exists()


@pytest.mark.parametrize(
    ("field", "value"),
    [("cpu_half_life_seconds", 0), ("training_interval_seconds", -1), ("safety_margin_percent", -5)],
)
def test_invalid_settings_are_refused(field, value):
    with pytest.raises(ValueError, match="prediction"):
        PredictionConfig(**{field: value})


def test_checkpoint_dir_is_under_the_var_run_root(tmp_path):
    assert checkpoint_dir_under(tmp_path, "/prediction-checkpoints") == tmp_path / "prediction-checkpoints"
    with pytest.raises(ValueError, match="directory"):
        checkpoint_dir_under(tmp_path, "/")
