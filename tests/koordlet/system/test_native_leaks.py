"""The compiled modules leak nothing: memory and file descriptors stay flat over many calls of
every entry point of the cgroup reader (Cython) and the perf binding (cffi), on success and on
error paths (as psutil tests its C module).

Each check runs in a child process of its own, so nothing else allocates while it measures:
after a warm-up, ``CALLS`` calls may not grow the resident set by more than ``RSS_SLACK_KIB``
(a leak of 64 bytes a call would be 1.25 MiB) nor the number of open descriptors at all.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from koordlet.system import native

ROOT = Path(__file__).resolve().parents[3]
CALLS = 20_000
RSS_SLACK_KIB = 512

pytestmark = pytest.mark.skipif(
    native.load("_cgroupfs") is None or native.load("_perf") is None,
    reason="the compiled extensions are not built",
)

#: the perf binding through koordlet.system.perf (its cffi buffers and conversions included):
#: a software counter opens on any kernel; an event type no kernel has fails everywhere
PERF_SETUP = "from koordlet.system import perf as P\nassert type(P._backend()).__name__ == '_NativeBackend'"

#: name -> (setup, one call); the setup runs once in the child, with ``d`` a directory of files
CASES = {
    "read_dirs": ("dirs, names = [d], [b'cpu.stat', b'memory.stat']", "m.read_dirs(dirs, names)"),
    "read_dirs_missing": (
        "dirs, names = [d + b'/gone', d], [b'cpu.stat', b'absent']",
        "m.read_dirs(dirs, names)",
    ),
    "parse_int": ("", "m.parse_int(b'123456789\\n')"),
    "parse_int_malformed": ("", "expect(OSError, m.parse_int, b'12x')"),
    "parse_keys": ("keys = (b'nr_periods', b'nr_throttled', b'missing')", "m.parse_keys(STAT, keys)"),
    "parse_nodes": (
        "keys = (b'total', b'file')",
        "m.parse_nodes(b'total=10 N0=5 N1=5\\nfile=4 N0=2 N1=2\\n', keys)",
    ),
    "parse_psi": ("", "m.parse_psi(PSI)"),
    "parse_psi_malformed": ("", "expect(OSError, m.parse_psi, b'some nonsense')"),
    "file_cache_read": (
        "cache = m.FileCache(); reqs = [(d + b'/cpu.stat', m.KIND_KEYS, (b'nr_periods',)),"
        " (d + b'/value', m.KIND_INT, None), (d + b'/cpu.pressure', m.KIND_PSI, None)]",
        "cache.read(reqs)",
    ),
    "file_cache_read_failing": (
        "cache = m.FileCache(); failed = []; reqs = [(d + b'/absent', m.KIND_INT, None),"
        " (d + b'/garbage', m.KIND_INT, None)]",
        "cache.read(reqs, failed); failed.clear()",
    ),
    "batch_read": (
        "cache = m.FileCache(); batch = cache.batch([(d + b'/cpu.stat', m.KIND_KEYS, (b'nr_periods',)),"
        " (d + b'/memory.stat', m.KIND_RAW, None)])",
        "batch.read()",
    ),
    "file_cache_churn": (
        "cache = m.FileCache(max_open=1); reqs = [(d + b'/value', m.KIND_INT, None),"
        " (d + b'/cpu.stat', m.KIND_RAW, None)]",
        "cache.read(reqs); cache.retain([])",
    ),
    "columns": (
        "cells = [(1, 2, None), None, (2**70, 1, 3)] * 50; last = [(0, 1, 1), (1, 1, 1), None] * 50",
        "m.sum_column(cells, 2);"
        " m.growth_column([c and c[0] for c in cells], [p and p[0] for p in last], 1.0, 1e9);"
        " m.ratio_column(cells, last, 0, 1)",
    ),
    "columns_refusing": (
        "short = [(1,)]",
        "expect(IndexError, m.sum_column, short, 3); expect(ValueError, m.growth_column, [1], [], 1.0, 1.0)",
    ),
    "batch_read_values": (
        "cache = m.FileCache(); failed = []; batch = cache.batch([(d + b'/cpu.stat', m.KIND_KEYS,"
        " (b'nr_periods', b'absent')), (d + b'/cpu.pressure', m.KIND_PSI, None),"
        " (d + b'/gone', m.KIND_INT, None)])",
        "batch.read_values(failed); failed.clear()",
    ),
    "strided_columns": (
        "import array; values = array.array('q', range(300)); present = bytes([1, 0, 1]) * 100",
        "m.strided_column(values, present, 1, 3, 100.0); m.flag_column(present, 1, 3, 0);"
        " expect(ValueError, m.strided_column, values, present, 3, 3, 1.0)",
    ),
    "perf_open_read_close": (
        PERF_SETUP,
        "fd = P.open_counter(P.TASK_CLOCK); P.enable(fd); P.read(fd); os.close(fd)",
    ),
    "perf_open_failing": (
        PERF_SETUP + "\nbogus = P.Event('bogus', 0xFFFF, 0)",
        "expect(OSError, P.open_counter, bogus)",
    ),
    "perf_read_failing": (PERF_SETUP, "expect(OSError, P.read, -1)"),
}

CHILD = """
import gc, json, os, sys
import koordlet._native._cgroupfs as m
d = sys.argv[1].encode()
STAT = open(d + b'/cpu.stat', 'rb').read()
PSI = open(d + b'/cpu.pressure', 'rb').read()

def expect(error, fn, *args):
    try:
        fn(*args)
    except error:
        return
    raise AssertionError(f"{{fn.__name__}} did not raise {{error.__name__}}")

def rss_kib():
    with open('/proc/self/statm') as f:
        return int(f.read().split()[1]) * os.sysconf('SC_PAGE_SIZE') // 1024

def fds():
    return len(os.listdir('/proc/self/fd'))

{setup}
def call():
    {call}

for _ in range(2000):
    call()
gc.collect()
before, fds_before = rss_kib(), fds()
for _ in range({calls}):
    call()
gc.collect()
print(json.dumps({{"rss_growth_kib": rss_kib() - before, "fd_growth": fds() - fds_before}}))
"""


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("cgroup")
    (d / "cpu.stat").write_text("nr_periods 10\nnr_throttled 2\nthrottled_time 300\n")
    (d / "memory.stat").write_text("cache 4096\nrss 8192\n" * 20)
    (d / "value").write_text("42\n")
    (d / "garbage").write_text("not a number\n")
    (d / "cpu.pressure").write_text(
        "some avg10=1.00 avg60=2.00 avg300=3.00 total=400\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
    )
    return d


def growth(files: Path, setup: str, call: str) -> dict[str, int]:
    """How much resident memory (KiB) and how many descriptors ``CALLS`` calls added, in a child."""
    script = CHILD.format(setup=textwrap.dedent(setup), call=call, calls=CALLS)
    done = subprocess.run(
        [sys.executable, "-c", script, str(files)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    measured: dict[str, int] = json.loads(done.stdout)
    return measured


@pytest.mark.parametrize("case", sorted(CASES))
def test_no_memory_or_descriptor_grows_over_many_calls(files: Path, case: str) -> None:
    grown = growth(files, *CASES[case])
    assert grown["fd_growth"] == 0, grown
    assert grown["rss_growth_kib"] <= RSS_SLACK_KIB, grown


def test_the_measurement_sees_a_leak_of_64_bytes_a_call_and_one_descriptor(files: Path) -> None:
    kept = growth(files, "kept = []", "kept.append(bytes(64))")
    assert kept["rss_growth_kib"] > RSS_SLACK_KIB, kept
    every_1000th = "n[0] += 1; kept.append(os.open(d + b'/value', os.O_RDONLY)) if n[0] % 1000 == 0 else None"
    opened = growth(files, "kept, n = [], [0]", every_1000th)
    assert opened["fd_growth"] == CALLS // 1000, opened
