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
    if "skipped" in data["params"]:  # a Go binary it needs is missing: no figures, and why
        assert not data["results"]
        assert result.headline
        pytest.skip(f"{name}: {data['params']['skipped']}")
    assert data["results"], "a benchmark must report at least one figure"
    assert all(UNIT_SUFFIX.search(k) for k in (*data["results"], *data["ratios"]))
    assert result.headline


@pytest.mark.perf
def test_webhook_benchmark_refuses_to_run_without_its_load_generator(monkeypatch):
    from benchmarks import webhook_admission

    monkeypatch.setenv("KOORD_VEGETA", "/nonexistent/vegeta")
    with pytest.raises(RuntimeError, match="KOORD_VEGETA=/nonexistent/vegeta is not an executable"):
        webhook_admission.run(quick=True)


@pytest.mark.perf
def test_scheduler_e2e_is_skipped_with_its_reason_without_envtest_binaries(monkeypatch):
    from benchmarks import scheduler_e2e

    monkeypatch.setenv("KOORD_ENVTEST_BIN", "")
    result = scheduler_e2e.run(quick=True)
    assert result.results == {}
    assert result.ratios == {}
    assert "KOORD_ENVTEST_BIN is empty" in str(result.params["skipped"])
    assert result.headline.startswith("scheduler_e2e: skipped: ")


@pytest.mark.perf
def test_scheduler_e2e_finds_no_kube_scheduler_where_none_was_built(monkeypatch, tmp_path):
    from benchmarks import scheduler_e2e

    monkeypatch.delenv("KOORD_KUBE_SCHEDULER", raising=False)
    monkeypatch.setenv("KOORD_ENVTEST_CACHE", str(tmp_path))
    with pytest.raises(scheduler_e2e.SkipError, match="kube-scheduler is not built"):
        scheduler_e2e.kube_scheduler_binary(build=False)
    monkeypatch.setenv("KOORD_KUBE_SCHEDULER", str(tmp_path / "kube-scheduler"))
    with pytest.raises(scheduler_e2e.SkipError, match="is not an executable"):
        scheduler_e2e.kube_scheduler_binary(build=True)
