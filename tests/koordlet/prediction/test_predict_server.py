"""The peak predict server on a real metric cache and injected wall and monotonic clocks:
training from the last interval's p90 (pods, node, priority classes, system), model expiry,
checkpoints on disk (upstream's JSON, at most twelve a step, every ten minutes), and a
restart that restores the same percentiles, skipping (and removing) corrupt and foreign
checkpoints. Steps of the wall clock: expiry and checkpoints go by the monotonic clock, a
restored model's age by its checkpoint's wall time, and samples by the monotonic time since
start, so a sample taken while the wall clock is ahead neither outweighs the others nor
stops the model learning; a checkpoint whose history starts in the future is skipped."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from koordinator.kube.timeutil import format_time
from koordlet.metriccache import MetricCache, MetricKind, kinds
from koordlet.metriccache.query import AggregateResult
from koordlet.prediction.config import PredictionConfig, checkpoint_dir_under
from koordlet.prediction.histogram import parse_go_time
from koordlet.prediction.server import NODE_UID, SYSTEM_UID, PeakPredictServer, Usage, node_item_uid
from tests.fakes.pods import make_pod

GI = 1 << 30
MI = 1 << 20
T0 = parse_go_time("2024-01-01T05:00:00Z")
#: the monotonic clock's reading at T0 (seconds since boot: any origin but the wall's)
BOOT = 12_345.0
MINUTE = 60.0
HOUR = 60 * MINUTE
DAY = 24 * HOUR
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
    """A metric cache fed as the collectors would, the pods the informer lists, a wall clock
    (``clock``) and a monotonic one (``monotonic``)."""

    def __init__(self, tmp_path: Path, **config: Any) -> None:
        self.cache = MetricCache(retention_seconds=7200)
        self.pods: list[dict[str, Any]] = []
        self.clock = Clock(T0)
        self.monotonic = Clock(BOOT)
        self.dir = checkpoint_dir_under(tmp_path / "var" / "run", "/prediction-checkpoints")
        self.config = PredictionConfig(checkpoint_dir=self.dir, **config)

    def server(self) -> PeakPredictServer:
        return PeakPredictServer(
            self.config, self.cache.query, lambda: self.pods, clock=self.clock, monotonic=self.monotonic
        )

    def advance(self, seconds: float) -> None:
        """Time passes: both clocks move."""
        self.clock.now += seconds
        self.monotonic.now += seconds

    def reboot(self) -> None:
        """The host restarts: the monotonic clock starts again from near 0."""
        self.monotonic.now = 5.0

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
    node.advance(20 * MINUTE)
    node.usage(None, 2.0, 2 * GI)
    server.train()
    node.advance(11 * MINUTE)  # 31 minutes since the pod's last sample, 11 since the node's
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
        node.advance(MINUTE)
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
    node.advance(MINUTE)
    server.checkpoint()  # the one left: never checkpointed, so the oldest
    assert len(list(node.dir.iterdir())) == 13
    written = {p.name: p.stat().st_mtime_ns for p in node.dir.iterdir()}
    node.advance(8 * MINUTE)
    server.checkpoint()  # nine minutes since the first twelve: not yet
    assert {p.name: p.stat().st_mtime_ns for p in node.dir.iterdir()} == written
    node.advance(MINUTE)
    assert len(server.due_checkpoints()) == 12  # ten minutes: the first twelve are due again


def test_nothing_is_collected_or_written_before_the_first_training(tmp_path):
    node = Node(tmp_path)
    server = node.server()
    server.checkpoint()
    server.gc()
    assert not node.dir.exists()


# --- steps of the wall clock ---------------------------------------------------------------


def train_once(node: Node, server: PeakPredictServer, uid: str, cpu: float = 1.0) -> None:
    node.usage(uid, cpu, GI)
    node.usage(None, cpu + 1, 2 * GI)
    server.train()


def test_a_wall_clock_step_forward_expires_no_model(tmp_path):
    """Upstream times expiry on Go's monotonic reading: NTP stepping the wall clock 6 h
    forward must not drop a day of history (and every checkpoint) as idle."""
    node = Node(tmp_path)
    node.pods = [prod_pod("web")]
    server = node.server()
    train_once(node, server, node.pods[0]["metadata"]["uid"])
    server.checkpoint()
    models = set(server.models)
    before = {uid: server.get_prediction(uid) for uid in models}
    node.clock.now += 6 * HOUR  # NTP steps the wall clock forward
    node.advance(MINUTE)
    server.gc()
    assert {uid: server.get_prediction(uid) for uid in server.models} == before
    assert {p.name for p in node.dir.iterdir()} == models
    # idle models still go, after thirty minutes without training on the monotonic clock
    node.advance(29 * MINUTE)
    server.gc()
    assert set(server.models) == models
    node.advance(MINUTE)
    server.gc()
    assert server.models == {}
    assert list(node.dir.iterdir()) == []


def test_checkpoints_go_on_after_a_wall_clock_step_back(tmp_path):
    """A wall clock stepped 6 h back must not stop the checkpoints for 6 h; the files'
    ``LastUpdated`` is the wall clock's time, as upstream writes it."""
    node = Node(tmp_path)
    node.pods = [prod_pod("web")]
    server = node.server()
    train_once(node, server, node.pods[0]["metadata"]["uid"])
    server.checkpoint()
    assert len(list(node.dir.iterdir())) == len(server.models)
    node.clock.now -= 6 * HOUR  # NTP steps the wall clock back
    node.advance(9 * MINUTE)
    assert server.due_checkpoints() == []
    node.advance(MINUTE)  # ten minutes since the last checkpoints
    server.checkpoint()
    written = {p.name: orjson.loads(p.read_bytes())["LastUpdated"] for p in node.dir.iterdir()}
    assert written == dict.fromkeys(server.models, "2023-12-31T23:10:00Z")
    assert format_time(node.clock.now) == "2023-12-31T23:10:00Z"


@pytest.mark.parametrize(
    ("wall_step", "minutes_left"),
    [
        pytest.param(20 * MINUTE, 10, id="written-20-minutes-ago"),
        pytest.param(-2 * HOUR, 30, id="written-ahead-of-the-wall-clock-counts-as-now"),
    ],
)
def test_a_restored_models_age_is_its_checkpoints_age_on_the_wall_clock(tmp_path, wall_step, minutes_left):
    """After a restart the monotonic clock has a new origin: a checkpoint's ``LastUpdated``
    (wall) becomes now less its age, a future one counting as now."""
    node = Node(tmp_path)
    web = prod_pod("web")
    uid = web["metadata"]["uid"]
    node.pods = [web]
    server = node.server()
    train_once(node, server, uid)
    server.checkpoint()
    node.reboot()
    node.clock.now += wall_step
    restarted = node.server()
    restarted.restore()
    assert uid in restarted.models
    restarted.train()  # no usage of the pod yet: its model is not trained
    node.advance((minutes_left - 1) * MINUTE)
    restarted.gc()
    assert uid in restarted.models
    node.advance(2 * MINUTE)
    restarted.gc()
    assert uid not in restarted.models
    assert not (node.dir / uid).exists()


class LastMinute:
    """The collectors' last minute whatever the wall clock says (they stamp their samples
    with the same clock): a query over a window ending at the wall clock's now answers the
    usage set last. How the metric cache takes a clock step is its own matter."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.values: dict[tuple[str, str | None], float] = {}

    def set(self, uid: str, cpu: float, memory: float) -> None:
        self.values[(kinds.POD_CPU_USAGE.name, uid)] = cpu
        self.values[(kinds.POD_MEMORY_USAGE.name, uid)] = memory
        self.values[(kinds.NODE_CPU_USAGE.name, None)] = cpu + 1
        self.values[(kinds.NODE_MEMORY_USAGE.name, None)] = memory + GI

    def query(self, kind: MetricKind, start: float, end: float, **labels: str) -> AggregateResult:
        assert end == self.clock.now, "the query window ends at the wall clock's now"
        value = self.values.get((kind.name, labels.get("pod_uid")))
        return AggregateResult((end,), (value,)) if value is not None else AggregateResult((), ())


def glitched_predictions(node: Node, wall_ahead: float) -> dict[str, dict[str, Usage] | None]:
    """30 minutes at 3 cores, one training with the wall clock ``wall_ahead`` ahead (at 0.2
    cores), then an hour at 1 core; every model's prediction."""
    web = node.pods[0]["metadata"]["uid"]
    usage = LastMinute(node.clock)
    server = PeakPredictServer(
        node.config, usage.query, lambda: node.pods, clock=node.clock, monotonic=node.monotonic
    )

    def train(cpu: float, minutes: int) -> None:
        for _ in range(minutes):
            usage.set(web, cpu, GI)
            server.train()
            node.advance(MINUTE)

    train(3.0, 30)
    node.clock.now += wall_ahead
    train(0.2, 1)
    node.clock.now -= wall_ahead  # NTP corrects the clock
    train(1.0, 60)
    return {uid: server.get_prediction(uid) for uid in server.models}


@pytest.mark.parametrize(
    "wall_ahead",
    [
        # upstream's sample would weigh 2^28 of the others until real time catches up
        pytest.param(14 * DAY, id="14-days-ahead-would-outweigh-the-rest"),
        # past 100 half-lives upstream moves the reference there: later samples weigh ~0
        pytest.param(60 * DAY, id="60-days-ahead-would-stop-the-learning"),
    ],
)
def test_a_sample_taken_while_the_wall_clock_is_ahead_weighs_as_any_other(tmp_path, wall_ahead):
    """Samples are stamped with the wall clock at start plus the monotonic time since: the
    models of a run whose wall clock was days ahead for one training are those of a run
    whose clock was right, and they go on learning."""
    stepped, steady = Node(tmp_path / "stepped"), Node(tmp_path / "steady")
    stepped.pods = steady.pods = [prod_pod("web")]
    predictions = glitched_predictions(stepped, wall_ahead)
    assert predictions == glitched_predictions(steady, 0.0)
    web = predictions[stepped.pods[0]["metadata"]["uid"]]
    assert web is not None
    # 1 sample at 0.2 cores, 60 at 1 core (bucket 22), 30 at 3 (bucket 39: log(7)/log(1.05)
    # = 39.9), nearly equal in weight: p60 ends the 1-core bucket, p95 the 3-core one
    assert web["p60"].cpu_milli == cpu_end(22)
    assert web["p95"].cpu_milli == cpu_end(39)


@pytest.mark.parametrize(
    ("writer_ahead", "skipped"),
    [
        # the first sample at 07:00: the CPU reference rounds to 12:00, 5 h ahead, as it may
        pytest.param(0.0, None, id="reference-rounded-ahead-is-kept"),
        pytest.param(13 * HOUR, "2024-01-02T00:00:00Z, 17.0 h", id="13-hours-ahead"),
        pytest.param(30 * DAY, "2024-01-31T12:00:00Z, 725.0 h", id="30-days-ahead"),
    ],
)
def test_a_checkpoint_whose_history_starts_in_the_future_is_skipped(tmp_path, caplog, writer_ahead, skipped):
    """A checkpoint written while the clock ran ahead (the writer stamped its samples with
    it) would teach the restored models nothing until real time catches up: it is skipped
    and removed with one log line, and the next training starts the model afresh."""
    node = Node(tmp_path)
    web = prod_pod("web")
    uid = web["metadata"]["uid"]
    node.pods = [web]
    start = parse_go_time("2024-01-01T07:00:00Z")
    node.clock.now = start + writer_ahead
    writer = node.server()
    train_once(node, writer, uid)
    writer.checkpoint()
    node.reboot()
    node.clock.now = start + MINUTE  # the koordlet restarts, the clock right
    restarted = node.server()
    with caplog.at_level(logging.INFO, logger="koordlet.prediction"):
        restarted.restore()
        if skipped is None:
            assert set(restarted.models) == set(writer.models)
            return
        assert restarted.models == {}
        assert list(node.dir.iterdir()) == []
        for model in writer.models:
            assert caplog.text.count(f"skipping the checkpoint {node.dir / model} (") == 1
        assert (
            f"skipping the checkpoint {node.dir / uid} (its CPU history starts at {skipped} ahead of now: "
            "written while the clock ran ahead)"
        ) in caplog.text
        train_once(node, restarted, uid)
        restarted.checkpoint()
    assert restarted.get_prediction(uid) == writer.get_prediction(uid)
    assert caplog.text.count(f"skipping the checkpoint {node.dir / uid} (") == 1


def test_the_monotonic_clock_is_the_real_one_or_the_one_injected_clock(tmp_path):
    """The agent's server uses the real clocks; a simulation that injects one clock (a
    benchmark's) has it serve as both."""
    config = PredictionConfig(checkpoint_dir=tmp_path)
    real = PeakPredictServer(config, MetricCache().query, list)
    assert (real.clock, real.monotonic) == (time.time, time.monotonic)
    simulated = Clock(T0)
    assert PeakPredictServer(config, MetricCache().query, list, clock=simulated).monotonic is simulated


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
