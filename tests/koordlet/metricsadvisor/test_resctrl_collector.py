"""resctrlCollector on fake resctrl trees: LLC occupancy, bandwidth rates from cumulative
counters (a reset counter primes again), a missing group, upstream's label bug fixed, and
the bandwidth gauge holding the raw counters as upstream's does."""

from __future__ import annotations

import shutil

import pytest

from koordlet.metriccache import MetricKind, kinds
from koordlet.metricsadvisor.collectors.resctrl import ResctrlCollector, resctrl_monitoring_supported
from koordlet.metricsadvisor.framework import CollectContext
from tests.koordlet.metricsadvisor.conftest import make_context

T0 = 1_000_000.0
FLAGS = "fpu cat_l3 mba cqm_mbm_total cqm_mbm_local cqm_llc cqm_occup_llc"
ON = {"ResctrlCollector": True}


def _last(ctx: CollectContext, kind: MetricKind, **labels: str) -> float | None:
    result = ctx.cache.query(kind, 0, 1e12, **labels)
    return result.value("last") if result.count() else None


def _mon(llc: int, local: int, total: int) -> dict[str, int]:
    return {"llc_occupancy": llc, "mbm_local_bytes": local, "mbm_total_bytes": total}


@pytest.mark.parametrize(
    ("flags", "vendor", "ok"),
    [
        pytest.param(FLAGS, "GenuineIntel", True, id="intel"),
        pytest.param(FLAGS, "AuthenticAMD", True, id="amd"),
        pytest.param(FLAGS, "HygonGenuine", False, id="other-vendor"),
        pytest.param("fpu cat_l3 mba cqm_llc", "GenuineIntel", False, id="no-mbm"),
    ],
)
def test_cpu_checks(flags, vendor, ok):
    assert resctrl_monitoring_supported(frozenset(flags.split()), vendor)[0] is ok


@pytest.mark.parametrize(
    ("gates", "flag", "cpu_flags", "enabled"),
    [
        pytest.param(ON, True, FLAGS, True, id="gate-flag-cpu"),
        pytest.param(ON, False, FLAGS, False, id="no-flag"),
        pytest.param({}, True, FLAGS, False, id="no-gate"),
        pytest.param(ON, True, "fpu cat_l3 mba", False, id="no-monitoring"),
    ],
)
def test_enabled_needs_gate_flag_and_cpu(fake_host, states, gates, flag, cpu_flags, enabled):
    fake_host.set_cpu_topology(flags=cpu_flags)
    ctx = make_context(fake_host, states, gates, enable_resctrl_collector=flag)
    assert ResctrlCollector(ctx).enabled() is enabled


def test_llc_and_bandwidth_per_group_and_cache(fake_host, states):
    fake_host.set_cpu_topology(flags=FLAGS)
    fake_host.add_resctrl(cache_ids=(0, 1))
    fake_host.populate_resctrl_group("LS", {0: _mon(4096, 1000, 5000), 1: _mon(8192, 0, 0)})
    fake_host.populate_resctrl_group("BE", {0: _mon(1024, 2000, 2000)})
    # LSR has no group: skipped
    ctx = make_context(fake_host, states, ON, enable_resctrl_collector=True)
    collector = ResctrlCollector(ctx)
    assert collector.interval == 10.0
    collector.collect(T0)
    assert collector.started
    assert _last(ctx, kinds.RESCTRL_RESOURCE_LLC, qos="LS", cache_id="0") == 4096
    assert _last(ctx, kinds.RESCTRL_RESOURCE_LLC, qos="LS", cache_id="1") == 8192
    assert _last(ctx, kinds.RESCTRL_RESOURCE_LLC, qos="BE", cache_id="0") == 1024
    assert _last(ctx, kinds.RESCTRL_RESOURCE_LLC, qos="LSR", cache_id="0") is None
    assert _last(ctx, kinds.RESCTRL_RESOURCE_MB, qos="LS", cache_id="0", mb_type="mbm_total_bytes") is None
    # the gauge holds the raw counters from the first reading on (no rate yet in the cache)
    assert _bandwidth_gauge(ctx) == {
        ("0", "LS", "mbm_local_bytes"): 1000,
        ("0", "LS", "mbm_total_bytes"): 5000,
        ("1", "LS", "mbm_local_bytes"): 0,
        ("1", "LS", "mbm_total_bytes"): 0,
        ("0", "BE", "mbm_local_bytes"): 2000,
        ("0", "BE", "mbm_total_bytes"): 2000,
    }

    fake_host.populate_resctrl_group("LS", {0: _mon(4096, 3000, 15000), 1: _mon(8192, 100, 200)})
    # BE's group was re-created: its counters restarted below their last values
    fake_host.populate_resctrl_group("BE", {0: _mon(512, 10, 20)})
    collector.collect(T0 + 10)
    mb = kinds.RESCTRL_RESOURCE_MB
    assert _last(ctx, mb, qos="LS", cache_id="0", mb_type="mbm_local_bytes") == 200.0
    assert _last(ctx, mb, qos="LS", cache_id="0", mb_type="mbm_total_bytes") == 1000.0
    assert _last(ctx, mb, qos="LS", cache_id="1", mb_type="mbm_total_bytes") == 20.0
    assert _last(ctx, mb, qos="BE", cache_id="0", mb_type="mbm_total_bytes") is None  # primed again
    assert _last(ctx, kinds.RESCTRL_RESOURCE_LLC, qos="BE", cache_id="0") == 512
    # every sample carries exactly its kind's labels (upstream adds one its schema lacks)
    assert sorted(ctx.cache.label_values(mb)) == [
        ("LS", "0", "mbm_local_bytes"),
        ("LS", "0", "mbm_total_bytes"),
        ("LS", "1", "mbm_local_bytes"),
        ("LS", "1", "mbm_total_bytes"),
    ]
    gauges = ctx.metrics.registry
    labels = {"node": "node-1", "cache_id": "0", "qos": "BE"}
    assert gauges.get_sample_value("koordlet_resctrl_llc_occupancy", labels) == 512
    # upstream's gauge: the cumulative counters as read (a re-created group's too), not rates
    assert _bandwidth_gauge(ctx) == {
        ("0", "LS", "mbm_local_bytes"): 3000,
        ("0", "LS", "mbm_total_bytes"): 15000,
        ("1", "LS", "mbm_local_bytes"): 100,
        ("1", "LS", "mbm_total_bytes"): 200,
        ("0", "BE", "mbm_local_bytes"): 10,
        ("0", "BE", "mbm_total_bytes"): 20,
    }

    fake_host.populate_resctrl_group("BE", {0: _mon(512, 30, 70)})
    shutil.rmtree(fake_host.paths.resctrl_root / "LS")  # LS's group went away: its series go too
    collector.collect(T0 + 20)
    assert _last(ctx, mb, qos="BE", cache_id="0", mb_type="mbm_total_bytes") == 5.0
    assert _bandwidth_gauge(ctx) == {("0", "BE", "mbm_local_bytes"): 30, ("0", "BE", "mbm_total_bytes"): 70}


def _bandwidth_gauge(ctx: CollectContext) -> dict[tuple[str, str, str], float]:
    """``koordlet_resctrl_memory_bandwidth`` as scraped: (cache_id, qos, mb_type) -> value."""
    [family] = [m for m in ctx.metrics.registry.collect() if m.name == "koordlet_resctrl_memory_bandwidth"]
    return {
        (s.labels["cache_id"], s.labels["qos"], s.labels["mb_type"]): s.value
        for s in family.samples
        if s.labels["node"] == "node-1"
    }


def test_unmounted_resctrl_collects_nothing(fake_host, states, caplog):
    fake_host.set_cpu_topology(flags=FLAGS)
    ctx = make_context(fake_host, states, ON, enable_resctrl_collector=True)
    collector = ResctrlCollector(ctx)
    collector.collect(T0)
    collector.collect(T0 + 10)
    assert collector.started
    assert ctx.cache.label_values(kinds.RESCTRL_RESOURCE_LLC) == []
    assert sum("not mounted" in r.getMessage() for r in caplog.records) == 1
