"""Result format and runner shared by every benchmark (see performance.md in the specs).

A benchmark module exposes ``NAME`` and ``run(quick: bool) -> Result``. Every figure's
key ends with its unit; the JSON goes to ``benchmarks/out/<name>.json`` and the
headline is printed as the last line.
"""

from __future__ import annotations

import json
import re
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

OUT_DIR = Path(__file__).resolve().parent / "out"
UNIT_SUFFIX = re.compile(r"_(ms|s|us|ns|mib|rps|pods_per_s|ratio|count|bytes|cores)$")


@dataclass
class Result:
    name: str
    params: dict[str, object] = field(default_factory=dict)
    results: dict[str, float] = field(default_factory=dict)
    ratios: dict[str, float] = field(default_factory=dict)
    headline: str = ""

    def validate(self) -> None:
        for key in (*self.results, *self.ratios):
            if not UNIT_SUFFIX.search(key):
                raise ValueError(f"{self.name}: figure key {key!r} does not end with a unit suffix")
        for key in self.ratios:
            if not key.endswith("_ratio"):
                raise ValueError(f"{self.name}: ratio key {key!r} must end with _ratio")

    def as_dict(self) -> dict[str, object]:
        return {"name": self.name, "params": self.params, "results": self.results, "ratios": self.ratios}

    def write(self, out_dir: Path = OUT_DIR) -> Path:
        self.validate()
        out_dir.mkdir(parents=True, exist_ok=True)
        path = out_dir / f"{self.name}.json"
        path.write_text(json.dumps(self.as_dict(), indent=2, sort_keys=False) + "\n")
        return path


def cpu_seconds() -> float:
    """CPU time (user + system) of this process so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def median(values: list[float]) -> float:
    ordered = sorted(values)
    n = len(ordered)
    if n == 0:
        raise ValueError("median of no values")
    mid = n // 2
    return ordered[mid] if n % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def repeat_cpu_ms(fn: Callable[[], object], runs: int) -> list[float]:
    """CPU milliseconds of each of ``runs`` calls of ``fn``."""
    samples = []
    for _ in range(runs):
        start = time.process_time()
        fn()
        samples.append((time.process_time() - start) * 1000.0)
    return samples
