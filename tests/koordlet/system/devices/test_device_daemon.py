"""koord-device-daemon: its configuration (flags over ``KDD_*`` environment over the config
file, upstream's names and defaults) and its records of the fake driver's GPUs, written
atomically for the koordlet (run as the console script, the fake libnvidia-ml.so.1 found
through ``LD_LIBRARY_PATH``)."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import testsupport.nvml as fake
from koordlet.devicedaemon.daemon import DEFAULT_OUTPUT, DaemonConfig, DaemonError, load_config
from koordlet.system.devices.xpu import read_dir

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
