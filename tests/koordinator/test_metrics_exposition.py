"""koordinator.metrics.exposition: the private prometheus_client attributes its labelled-gauge
fast path reads, that path against the public one, and the two formats it writes."""

from __future__ import annotations

import threading

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from koordinator.metrics import exposition
from koordinator.metrics.exposition import (
    GoCounterFamily,
    ScrapeRefreshers,
    format_value,
    render,
    render_python_client,
    write_family,
)


def test_the_private_attributes_of_the_fast_path_are_still_there():
    """The fast path reads these; a prometheus_client that renames or retypes one fails here."""
    registry = CollectorRegistry()
    gauge = Gauge("g", "help", ["b", "a"], registry=registry)
    child = gauge.labels("1", "2")
    assert isinstance(registry._collector_to_names, dict)
    assert list(registry._collector_to_names) == [gauge]
    assert isinstance(registry._lock, type(threading.Lock()))
    assert registry._target_info is None
    assert gauge._name == "g"
    assert gauge._documentation == "help"
    assert gauge._labelnames == ("b", "a")
    assert gauge._labelvalues == ()
    assert gauge._unit == ""
    assert isinstance(gauge._lock, type(threading.Lock()))
    assert gauge._metrics == {("1", "2"): child}
    child.set(2.5)
    assert child._value.get() == 2.5
    assert "_child_samples" not in vars(child)
    child.set_function(lambda: 1.0)
    assert "_child_samples" in vars(child)


def _registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    gauge = Gauge("node_used", "cores\\used\nnow", ["node", "a_kind"], registry=registry)
    gauge.labels('n"1\\x\n', "cpu").set(2)
    gauge.labels("n", "nan").set(float("nan"))
    gauge.labels("n", "inf").set(float("inf"))
    gauge.labels("n", "-inf").set(float("-inf"))
    gauge.labels("n", "big").set(1e20)
    gauge.labels("n", "frac").set(0.25)
    Gauge("empty", "no series", ["x"], registry=registry)
    Counter("evictions", "evictions", ["reason"], registry=registry).labels("memory").inc()
    Histogram("latency", "latency", buckets=(1, 5), registry=registry).observe(3)
    return registry


def test_the_fast_path_writes_what_the_public_path_writes():
    registry = _registry()
    out: list[str] = []
    for family in registry.collect():
        write_family(family, out)
    assert render(registry) == "".join(out).encode()
    assert exposition._gauge_children(next(iter(registry._collector_to_names))) is not None


def test_render_writes_go_names_and_integral_values_without_a_fraction():
    text = render(_registry()).decode()
    assert '# TYPE evictions counter\nevictions{reason="memory"} 1\n' in text
    assert "_total" not in text
    assert "_created" not in text
    assert "empty" not in text
    assert "# HELP node_used cores\\\\used\\nnow\n" in text
    assert 'node_used{a_kind="cpu",node="n\\"1\\\\x\\n"} 2\n' in text
    assert 'latency_bucket{le="1.0"} 0\n' in text


def test_render_runs_the_scrape_refreshers_before_the_gauges():
    registry = CollectorRegistry()
    refreshers = ScrapeRefreshers()
    registry.register(refreshers)
    gauge = Gauge("psi", "psi", ["pod"], registry=registry)

    def refresh():
        gauge.labels("p").set(3)
        yield

    refreshers.add(refresh)
    assert render(registry) == b'# HELP psi psi\n# TYPE psi gauge\npsi{pod="p"} 3\n'


def test_format_value():
    assert [format_value(v) for v in (1.0, -2.0, 0.25, 1e15, 34359738368.0, 1e20)] == [
        "1",
        "-2",
        "0.25",
        "1000000000000000.0",
        "34359738368",
        "1e+20",
    ]


class _Plain:
    def collect(self):
        family = GoCounterFamily("reconcile_count", "reconciles", "counter")
        family.add_sample("reconcile_count", {"status": "ok", "reason": ""}, 2.0)
        yield family
        yield GoCounterFamily("never", "no series yet", "counter")


def test_render_python_client_writes_go_counters_under_their_plain_names():
    registry = CollectorRegistry()
    registry.register(_Plain())
    counter = Counter("workqueue_adds", "adds", ["name"], registry=registry)
    counter.labels("q").inc()
    text = render_python_client(registry).decode()
    assert text.startswith(
        "# HELP reconcile_count reconciles\n# TYPE reconcile_count counter\n"
        'reconcile_count{reason="",status="ok"} 2.0\n'
        "# HELP never no series yet\n# TYPE never counter\n"
    )
    python_client = CollectorRegistry()
    python_client.register(counter)
    assert text.endswith(generate_latest(python_client).decode())
    assert "workqueue_adds_total" in text
    assert "workqueue_adds_created" in text
