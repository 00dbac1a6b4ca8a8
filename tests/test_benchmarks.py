"""perf tier: every benchmark runs a short smoke pass and writes a well-formed result.

No wall-clock figure is asserted here; `make bench` produces the reported numbers.
"""

from __future__ import annotations

import importlib
import json

import pytest

from benchmarks.__main__ import available
from benchmarks.harness import UNIT_SUFFIX


@pytest.mark.perf
@pytest.mark.parametrize("name", available())
def test_benchmark_smoke(name, tmp_path):
    module = importlib.import_module(f"benchmarks.{name}")
    result = module.run(quick=True)
    path = result.write(tmp_path)
    data = json.loads(path.read_text())
    assert set(data) == {"name", "params", "results", "ratios"}
    assert data["results"], "a benchmark must report at least one figure"
    assert all(UNIT_SUFFIX.search(k) for k in (*data["results"], *data["ratios"]))
    assert result.headline


@pytest.mark.perf
def test_webhook_benchmark_refuses_to_run_without_its_load_generator(monkeypatch):
    from benchmarks import webhook_admission

    monkeypatch.setenv("KOORD_VEGETA", "/nonexistent/vegeta")
    with pytest.raises(RuntimeError, match="KOORD_VEGETA=/nonexistent/vegeta is not an executable"):
        webhook_admission.run(quick=True)
