"""koord-device-daemon: its configuration (flags over ``KDD_*`` environment over the config
file, upstream's names and defaults) and its records of the fake driver's GPUs, written
atomically for the koordlet (run as the console script, the fake libnvidia-ml.so.1 found
through ``LD_LIBRARY_PATH``): a failing GPU written unhealthy while the others stay, the last
file kept when NVML fails as a whole, and Xid faults written as soon as they are seen."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import testsupport.nvml as fake
from koordlet.devicedaemon.daemon import DEFAULT_OUTPUT, DaemonConfig, DaemonError, load_config
from koordlet.statesinformer.device import build_device_spec
from koordlet.system.devices.xpu import read_dir
from tests.koordlet.system.devices import nvml_events

GIB = 1024**3
CONFIG = fake.FakeNVML(
    gpus=(
        fake.FakeGPU("NVIDIA A100-SXM4-80GB", "GPU-aaaa", 0, "0000:3B:00.0"),
        fake.FakeGPU("NVIDIA A100-SXM4-80GB", "GPU-bbbb", 1, "0000:86:00.0", memory_total=40 * GIB),
    ),
    driver_version="535.104.05",
)


def wait_until(predicate: Callable[[], bool], within: float) -> None:
    deadline = time.monotonic() + within
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def daemon() -> str:
    found = shutil.which("koord-device-daemon", path=str(Path(sys.executable).parent))
    assert found, "koord-device-daemon is not installed next to the interpreter"
    return found


def test_defaults_are_upstreams() -> None:
    assert load_config({}, {}) == DaemonConfig(False, 900.0, DEFAULT_OUTPUT, False)
    assert DEFAULT_OUTPUT == "/var/run/koordlet/xpu-device-infos/ic-device"


def test_flags_win_over_the_environment_which_wins_over_the_file(tmp_path: Path) -> None:
    config = tmp_path / "kdd.yaml"
    config.write_text(
        "version: v1\nflags:\n  kdd:\n    oneshot: true\n    sleepInterval: 30s\n"
        "    printsOutputFile: /tmp/from-file\n"
    )
    from_file = load_config({}, {}, str(config))
    assert from_file == DaemonConfig(True, 30.0, "/tmp/from-file", False)
    env = {"KDD_SLEEP_INTERVAL": "1m", "KDD_ONESHOT": "false", "PRINTS_OUTPUT_FILE": "/tmp/from-env"}
    assert load_config({}, env, str(config)) == DaemonConfig(False, 60.0, "/tmp/from-env", False)
    flags = {"sleep_interval": "5s", "oneshot": True}
    assert load_config(flags, env, str(config)) == DaemonConfig(True, 5.0, "/tmp/from-env", False)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("version: v2\n", "want {version: v1"),
        ("flags: {kdd: {sleepInterval: soon}}\n", "sleepInterval: 'soon'"),
        ("a: [\n", "not YAML or JSON"),
    ],
)
def test_a_bad_config_file_is_refused(tmp_path: Path, text: str, message: str) -> None:
    config = tmp_path / "kdd.yaml"
    config.write_text(text)
    with pytest.raises(DaemonError, match=message.replace("{", r"\{").replace("[", r"\[")):
        load_config({}, {}, str(config))


def test_oneshot_writes_the_gpus_for_the_koordlet(fake_nvml: Path, tmp_path: Path) -> None:
    pytest.importorskip("pynvml")
    config = fake.write_config(CONFIG, tmp_path / "fake.conf")
    out = tmp_path / "infos" / "ic-device"
    done = subprocess.run(
        [daemon(), "--oneshot", f"--prints-output-file={out}", f"--sys-root-dir={tmp_path / 'sys'}"],
        env=fake.environ(fake_nvml, config),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    records = json.loads(out.read_text())
    assert [r["uuid"] for r in records] == ["GPU-aaaa", "GPU-bbbb"]
    first = records[0]
    assert (first["vendor"], first["model"], first["minor"]) == ("nvidia", "A100-SXM4-80GB", "0")
    assert first["resources"] == {
        "koordinator.sh/gpu-core": "100",
        "koordinator.sh/gpu-memory": str(80 * GIB),
    }
    assert first["topology"]["busID"] == "0000:3b:00.0"
    assert first["status"]["healthy"] is True
    # what the koordlet reads back
    assert [(r.uuid, r.resources["koordinator.sh/gpu-memory"]) for r in read_dir(out.parent)] == [
        ("GPU-aaaa", str(80 * GIB)),
        ("GPU-bbbb", str(40 * GIB)),
    ]


def test_without_a_driver_it_writes_no_gpus_and_says_why(fake_nvml: Path, tmp_path: Path) -> None:
    pytest.importorskip("pynvml")
    config = fake.write_config(fake.FakeNVML(init_error=9), tmp_path / "fake.conf")
    done = subprocess.run(
        [daemon(), "--oneshot", "--prints-output-file="],
        env=fake.environ(fake_nvml, config),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []
    assert "Driver Not Loaded" in done.stderr


def test_the_daemon_repeats_and_removes_its_file_when_stopped(fake_nvml: Path, tmp_path: Path) -> None:
    pytest.importorskip("pynvml")
    config = fake.write_config(CONFIG, tmp_path / "fake.conf")
    out = tmp_path / "ic-device"
    process = subprocess.Popen(
        [daemon(), f"--prints-output-file={out}", "--sleep-interval=100ms", f"--sys-root-dir={tmp_path}"],
        env=fake.environ(fake_nvml, config),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until(out.exists, 30)
        first = out.stat().st_mtime_ns
        wait_until(lambda: out.exists() and out.stat().st_mtime_ns != first, 30)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(30)
    assert process.returncode == 0
    assert not out.exists()


def test_a_bad_flag_value_exits_2_in_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [daemon(), "--sleep-interval=never"], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1
    assert "--sleep-interval: 'never'" in done.stderr


# --- one failing GPU, NVML failing, Xid events -------------------------------------------------

GPU_IS_LOST = 15
NOT_SUPPORTED = 3


def _records(path: Path) -> dict[str, dict[str, Any]]:
    try:
        return {r["uuid"]: r for r in json.loads(path.read_text())}
    except (OSError, ValueError):
        return {}


def test_a_failing_gpu_is_written_unhealthy_and_the_others_kept(fake_nvml: Path, tmp_path: Path) -> None:
    pytest.importorskip("pynvml")
    third = fake.FakeGPU("NVIDIA A100-SXM4-80GB", "GPU-cccc", 2, "0000:D8:00.0")
    broken = fake.FakeNVML(
        gpus=(*CONFIG.gpus, third),
        driver_version=CONFIG.driver_version,
        errors=(
            fake.FakeError("nvmlDeviceGetMemoryInfo", GPU_IS_LOST, 1),  # GPU-bbbb: known, unhealthy
            fake.FakeError("nvmlDeviceGetUUID", GPU_IS_LOST, 2),  # GPU-cccc: cannot be named
        ),
    )
    config = fake.write_config(broken, tmp_path / "fake.conf")
    out = tmp_path / "infos" / "ic-device"
    done = subprocess.run(
        [daemon(), "--oneshot", f"--prints-output-file={out}", f"--sys-root-dir={tmp_path / 'sys'}"],
        env=fake.environ(fake_nvml, config),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    records = _records(out)
    assert list(records) == ["GPU-aaaa", "GPU-bbbb"]
    assert records["GPU-aaaa"]["status"] == {"healthy": True}
    assert records["GPU-bbbb"]["status"] == {
        "healthy": False,
        "errCode": "GpuIsLost",
        "errMessage": "NVML memory info query failed: GPU is lost",
    }
    assert records["GPU-bbbb"]["resources"] == {"koordinator.sh/gpu-core": "100"}  # its memory is unknown
    assert "GPU 2 left out: NVML cannot identify it: GPU is lost" in done.stderr
    # what the koordlet reports from it
    spec = build_device_spec(None, [], read_dir(out.parent))
    assert [(d["id"], d["health"]) for d in spec.devices] == [("GPU-aaaa", True), ("GPU-bbbb", False)]


def _start(command: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[str]:
    with log.open("w") as stderr:
        return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=stderr, text=True)


def _stop(process: subprocess.Popen[str]) -> None:
    process.send_signal(signal.SIGTERM)
    process.wait(30)
    assert process.returncode == 0


def test_when_nvml_fails_after_a_good_round_the_last_file_is_kept(fake_nvml: Path, tmp_path: Path) -> None:
    pytest.importorskip("pynvml")
    config = fake.write_config(CONFIG, tmp_path / "fake.conf")
    out = tmp_path / "ic-device"
    log = tmp_path / "daemon.log"
    command = [daemon(), f"--prints-output-file={out}", "--sleep-interval=50ms", f"--sys-root-dir={tmp_path}"]
    process = _start(command, fake.environ(fake_nvml, config), log)
    try:
        wait_until(lambda: len(_records(out)) == 2, 30)
        written = out.read_text()
        fake.write_config(fake.FakeNVML(init_error=9), config)  # the driver goes away
        wait_until(lambda: "the last device-info file is kept" in log.read_text(), 30)
        assert out.read_text() == written
    finally:
        _stop(process)


def test_xid_faults_are_written_at_once(fake_nvml_with_events: Path, tmp_path: Path) -> None:
    pytest.importorskip("pynvml")
    unwatchable = fake.FakeError("nvmlDeviceRegisterEvents", NOT_SUPPORTED, 0)
    config = fake.write_config(
        fake.FakeNVML(gpus=CONFIG.gpus, driver_version=CONFIG.driver_version, errors=(unwatchable,)),
        tmp_path / "fake.conf",
    )
    events = tmp_path / "events"
    events.touch()
    env = {**fake.environ(fake_nvml_with_events, config), nvml_events.EVENTS_ENV: str(events)}
    out = tmp_path / "ic-device"
    # a round an hour: only the watcher can make the daemon write again
    command = [daemon(), f"--prints-output-file={out}", "--sleep-interval=1h", f"--sys-root-dir={tmp_path}"]
    process = _start(command, env, tmp_path / "daemon.log")
    try:
        wait_until(lambda: not _records(out).get("GPU-aaaa", {}).get("status", {}).get("healthy", True), 30)
        assert _records(out)["GPU-aaaa"]["status"] == {
            "healthy": False,
            "errCode": "DeviceHealthCheckNotSupported",
            "errMessage": "device does not support health checking",
        }
        assert _records(out)["GPU-bbbb"]["status"] == {"healthy": True}
        nvml_events.xid(events, 1, 31)  # an application's error: the GPU stays healthy
        nvml_events.xid(events, 1, 79)
        wait_until(lambda: not _records(out)["GPU-bbbb"]["status"]["healthy"], 30)
        assert _records(out)["GPU-bbbb"]["status"] == {
            "healthy": False,
            "errCode": "Xid79",
            "errMessage": "Xid error detected on device, error code: 79",
        }
    finally:
        _stop(process)
