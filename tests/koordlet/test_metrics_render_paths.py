"""/metrics rendering: the labelled-gauge fast path writes what the general path writes,
and the event-loop renderer gives the same bytes while letting other tasks run."""

from __future__ import annotations

import asyncio

from prometheus_client import CollectorRegistry, Counter, Gauge

from koordinator.metrics import exposition
from koordlet.metrics import RENDER_SLICE, KoordletMetrics, render, render_async


def _general(registry: CollectorRegistry) -> bytes:
    """Every family through ``registry.collect()`` (the path for non-gauge families)."""
    out: list[str] = []
    for family in registry.collect():
        exposition.write_family(family, out)
    return "".join(out).encode()


def _registry(containers: int = 3) -> CollectorRegistry:
    registry = CollectorRegistry()
    metrics = KoordletMetrics(registry, 'node"1')
    metrics.pod_eviction.labels("n", "evictPodByNodeMemoryUsage").inc()
    metrics.node_used_cpu_cores.labels('n"1\\x\n').set(2)
    metrics.node_used_memory_bytes.labels("n").set(float("nan"))
    metrics.be_suppress_cpu_cores.labels("n", "cfsQuota").set(float("inf"))
    metrics.be_suppress_cpu_cores.labels("n", "cpuset").set(float("-inf"))
    metrics.cpuset_share_pool_cpu_cores.labels("n").set(1e20)
    metrics.resource_update_duration_milliseconds.labels("cpu.shares", "succeeded").observe(3)
    for i in range(containers):
        for degree in ("some", "full"):
            metrics.container_psi.labels(
                "n",
                f"containerd://{i:064x}",
                "main",
                f"uid-{i}",
                f"pod-{i}",
                "default",
                "cpu",
                "10",
                degree,
                "1",
            ).set(0.25 * i)
    unsorted = Gauge("plain", "doc with \\ and\nnewline", ["zeta", "alpha", "mid"], registry=registry)
    unsorted.labels("1", '"quoted"', "back\\slash").set(1.5)
    unsorted.labels("2", "a", "b").set(-2)
    function = Gauge("function_gauge", "reads a function", ["b", "a"], registry=registry)
    function.labels("x", "y").set(1)
    function.labels("z", "w").set_function(lambda: 5)
    Gauge("unlabelled", "no labels", registry=registry).set(4)
    Gauge("empty", "no series yet", ["a"], registry=registry)
    Gauge("sized", "with a unit", ["a"], unit="bytes", registry=registry).labels("1").set(1)
    Counter("events", "a counter", ["a"], registry=registry).labels("q").inc(2)
    return registry


def test_fast_path_writes_what_the_general_path_writes():
    registry = _registry()
    text = render(registry)
    assert text == _general(registry)
    assert b'plain{alpha="\\"quoted\\"",mid="back\\\\slash",zeta="1"} 1.5\n' in text
    assert b'function_gauge{a="w",b="z"} 5\n' in text
    assert b"# HELP empty" not in text


def test_registry_with_target_info_takes_the_general_path():
    registry = CollectorRegistry(target_info={"service": "koordlet"})
    Gauge("g", "d", ["a"], registry=registry).labels("1").set(1)
    assert render(registry) == _general(registry)
    assert b'target_info{service="koordlet"} 1\n' in render(registry)


async def test_render_async_gives_the_same_bytes_and_yields_to_the_loop():
    registry = _registry(containers=2 * RENDER_SLICE)
    ticks = 0
    stop = asyncio.Event()

    async def ticker() -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    before = ticks
    body = await render_async(registry)
    during = ticks - before
    stop.set()
    await task
    assert body == render(registry)
    assert during >= 4  # at least one slice of each gauge let the ticker run
