"""The Prometheus text exposition format for the koordlet's and koord-manager's /metrics.

Upstream's components are Go programs, and dashboards built for Koordinator query the
names Go's client writes. Python's client differs in two ways: it appends ``_total`` to
every counter and adds a ``_created`` series to counters and histograms. Both renderers
here read the registry through the client's public API (``collect()``, ``Metric.samples``)
and write one family at a time with :func:`write_family`, which writes a counter under
its plain name and drops ``_created``:

* :func:`render` and :func:`render_async` (the koordlet): every family that way. Values
  are written by :func:`format_value`: an integral value without a fractional part
  (``1``, ``34359738368``), any other as Python's shortest ``repr`` (``0.25``,
  ``1e+20``). Go's client writes ``strconv.FormatFloat(v, 'g', -1, 64)`` instead
  (``3.4359738368e+10``); Prometheus parses both to the same number.
  :func:`render_async` writes on the event loop in slices of :data:`RENDER_SLICE` series,
  so a scrape of thousands of series never stalls the loop.
* :func:`render_python_client` (koord-manager): the Python client's own format, except
  :class:`GoCounterFamily` families, written under their plain names. The manager's
  Python-client counters are named so that ``_total`` makes upstream's name
  (``workqueue_adds_total``), and keep their ``_created`` series.

:class:`ScrapeRefreshers` is a collector without metrics of its own that brings lazily
kept gauges up to date before a scrape reads them; :func:`render_async` runs it in slices
too.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import cast

from prometheus_client import CollectorRegistry, Gauge, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

__all__ = [
    "RENDER_SLICE",
    "GoCounterFamily",
    "Refresher",
    "ScrapeRefreshers",
    "format_value",
    "render",
    "render_async",
    "render_python_client",
    "write_family",
]

log = logging.getLogger(__name__)

#: series written between two yields of :func:`render_async` (about a millisecond of work)
RENDER_SLICE = 500

#: brings some gauges up to date before a scrape reads them; a generator that yields
#: between slices of its work, so a scrape on the event loop never stalls it
Refresher = Callable[[], Iterator[None]]


class ScrapeRefreshers:
    """A collector without metrics of its own: the refreshers of lazily kept gauges.

    Registered on the registry before the gauges it keeps, so each scrape runs the
    refreshers before it reads them. A refresher that fails is logged; the scrape goes on
    with what the gauges hold.
    """

    def __init__(self) -> None:
        self._refreshers: list[Refresher] = []
        self._lock = threading.Lock()

    def add(self, refresher: Refresher) -> None:
        with self._lock:
            self._refreshers.append(refresher)

    def refresh(self) -> Iterator[None]:
        """Run every refresher, yielding whenever one does."""
        with self._lock:
            refreshers = list(self._refreshers)
        for refresher in refreshers:
            try:
                yield from refresher()
            except Exception:
                log.exception("refreshing metrics before a scrape failed")

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> list[Metric]:
        for _ in self.refresh():
            pass
        return []


class GoCounterFamily(Metric):
    """A counter family that :func:`render_python_client` writes under its plain name."""


def format_value(value: float) -> str:
    """A sample value: integral values without a fractional part, others as ``repr``."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _escape_help(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n")


def write_family(
    family: Metric,
    out: list[str],
    value_format: Callable[[float], str] = format_value,
    keep_empty: bool = False,
) -> None:
    """Write ``family`` as Go's client names it: a counter's samples under the family's
    plain name, no ``_created`` samples, ``unknown`` typed ``untyped``, each series' labels
    sorted by name. A family without samples is left out unless ``keep_empty``."""
    name, kind = family.name, family.type
    if kind == "unknown":
        kind = "untyped"
    samples = [s for s in family.samples if not s.name.endswith("_created")]
    if not samples and not keep_empty:
        return
    out.append(f"# HELP {name} {_escape_help(family.documentation)}\n# TYPE {name} {kind}\n")
    for sample in samples:
        sample_name = name if kind == "counter" else sample.name
        if sample.labels:
            labels = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(sample.labels.items()))
            out.append(f"{sample_name}{{{labels}}} {value_format(sample.value)}\n")
        else:
            out.append(f"{sample_name} {value_format(sample.value)}\n")


class _Single:
    """One family as a collector, for the Python client's renderer."""

    def __init__(self, family: Metric) -> None:
        self.family = family

    def collect(self) -> Iterator[Metric]:
        yield self.family


def render_python_client(registry: CollectorRegistry) -> bytes:
    """The Python client's text format (``generate_latest``), with :class:`GoCounterFamily`
    families under their plain names (values as the Python client writes them)."""
    out: list[str] = []
    for family in registry.collect():
        if isinstance(family, GoCounterFamily):
            write_family(family, out, floatToGoString, keep_empty=True)
        else:
            out.append(generate_latest(_Single(family)).decode())
    return "".join(out).encode()


# The labelled-gauge fast path. Nearly all of a busy node's series are labelled gauges
# (PSI, requests and limits per container); building a Sample and a label dict for each
# through ``collect()`` costs about twice the K3 render budget at 5000 series
# (benchmarks/metrics_render.py). So the koordlet's renderer writes those gauges from
# their children directly, reading private attributes of prometheus_client (0.26):
#
# * CollectorRegistry: ``_collector_to_names`` (the collectors, in registration order),
#   ``_lock``, ``_target_info``;
# * Gauge (the parent): ``_name``, ``_documentation``, ``_labelnames``, ``_labelvalues``,
#   ``_unit``, ``_lock``, ``_metrics`` (label values to child);
# * Gauge (a child): ``_value.get()``, and ``_child_samples`` in its ``__dict__`` when
#   ``set_function`` replaced its samples.
#
# tests/koordinator/test_metrics_exposition.py fails when any of them changes; every other
# collector, and any registry this path cannot list, goes through ``collect()``.


def _gauge_children(collector: Collector) -> list[tuple[Sequence[str], Gauge]] | None:
    """The children of a labelled gauge whose children all hold a value (none reads a
    function), or None for any other collector."""
    if type(collector) is not Gauge or not collector._labelnames or collector._labelvalues or collector._unit:
        return None
    with collector._lock:
        children = cast(list[tuple[Sequence[str], Gauge]], list(collector._metrics.items()))
    if any("_child_samples" in vars(child) for _, child in children):
        return None
    return children


def _write_gauge(gauge: Gauge, children: list[tuple[Sequence[str], Gauge]], out: list[str]) -> Iterator[None]:
    """Write a labelled gauge straight from its children: what :func:`write_family`
    writes for it, without building a Sample and a label dict per series. Yields every
    :data:`RENDER_SLICE` series."""
    if not children:
        return
    names = gauge._labelnames
    # labels sorted by name; "{i}" is the i-th label value, escaped
    order = sorted(range(len(names)), key=names.__getitem__)
    template = gauge._name + "{{" + ",".join(f'{names[i]}="{{{i}}}"' for i in order) + "}} {value}\n"
    fmt = template.format
    out.append(f"# HELP {gauge._name} {_escape_help(gauge._documentation)}\n# TYPE {gauge._name} gauge\n")
    for first in range(0, len(children), RENDER_SLICE):
        for values, child in children[first : first + RENDER_SLICE]:
            joined = "".join(values)
            if "\\" in joined or "\n" in joined or '"' in joined:
                values = tuple(map(_escape, values))
            out.append(fmt(*values, value=format_value(child._value.get())))
        yield


def _collectors(registry: CollectorRegistry) -> list[Collector] | None:
    """The registry's collectors in the order ``registry.collect()`` visits them, or None
    when they cannot be listed (a registry with target info or of another kind)."""
    collectors = getattr(registry, "_collector_to_names", None)
    if type(registry) is not CollectorRegistry or not isinstance(collectors, dict) or registry._target_info:
        return None
    with registry._lock:
        return list(collectors)


def _render(registry: CollectorRegistry, out: list[str]) -> Iterator[None]:
    """Write the registry into ``out``, yielding after each family or slice of series.

    Labelled gauges are written from their children directly (the fast path above);
    every other family goes through ``collect()``. Both paths write the same text.
    """
    collectors = _collectors(registry)
    if collectors is None:
        for family in registry.collect():
            write_family(family, out)
            yield
        return
    for collector in collectors:
        if isinstance(collector, ScrapeRefreshers):
            yield from collector.refresh()
            continue
        children = _gauge_children(collector)
        if children is not None:
            yield from _write_gauge(cast(Gauge, collector), children, out)
            continue
        for family in collector.collect():
            write_family(family, out)
        yield


def render(registry: CollectorRegistry) -> bytes:
    """The registry in the text format with Go's names (see :func:`write_family`)."""
    out: list[str] = []
    for _ in _render(registry, out):
        pass
    return "".join(out).encode()


async def render_async(registry: CollectorRegistry) -> bytes:
    """:func:`render` on the event loop, in slices: other tasks run between two slices,
    so a scrape never holds the loop for more than about a millisecond at a time (a
    worker thread would, through the GIL, hold it for whole switch intervals)."""
    out: list[str] = []
    for _ in _render(registry, out):
        await asyncio.sleep(0)
    return "".join(out).encode()
