"""The collector runner: collectors due together run as one batch in the worker thread,
in registration order, and only then are the listeners told; each keeps its own interval
(read again after each of its ticks); a failing tick is counted and the others go on."""

from __future__ import annotations

import threading

from koordlet.metricsadvisor.framework import CollectorRunner
from tests.polling import eventually

Journal = list[tuple[str, str]]


class Recording:
    """A collector that logs its ticks (and their thread) into a shared journal."""

    def __init__(
        self, name: str, interval: float, journal: list[tuple[str, str]], fail: bool = False
    ) -> None:
        self.NAME = name
        self.interval = interval
        self.started = False
        self.closed = False
        self.ticks = 0
        self.threads: set[int] = set()
        self._journal = journal
        self._fail = fail

    def enabled(self) -> bool:
        return True

    def collect(self, now: float) -> None:
        self.ticks += 1
        self.threads.add(threading.get_ident())
        self._journal.append(("tick", self.NAME))
        self.started = True
        if self._fail:
            raise RuntimeError("broken host file")

    def close(self) -> None:
        self.closed = True


def _batches(journal: list[tuple[str, str]]) -> list[tuple[str, ...]]:
    """The journal cut into batches: the ticks before each run of listener calls."""
    batches: list[tuple[str, ...]] = []
    ticks: list[str] = []
    for event, name in journal:
        if event == "tick":
            ticks.append(name)
        elif ticks:
            batches.append(tuple(ticks))
            ticks = []
    return batches


async def test_collectors_due_together_run_as_one_batch_then_the_listeners_hear_of_each():
    journal: list[tuple[str, str]] = []
    node, pods, psi = (
        Recording("node", 0.3, journal),
        Recording("pods", 0.3, journal),
        Recording("psi", 0.6, journal),
    )
    broken = Recording("broken", 0.3, journal, fail=True)
    runner = CollectorRunner([node, pods, broken, psi], clock=lambda: 1000.0)
    runner.listeners.append(lambda name: journal.append(("listen", name)))
    runner.start()
    try:
        await runner.wait_started()
        await eventually(lambda: psi.ticks >= 3, within=20)
    finally:
        await runner.stop()
    batches = _batches(journal)
    assert batches[0] == ("node", "pods", "broken", "psi")  # everything is due at start
    # every batch: the 0.3 s collectors in registration order, the 0.6 s one every other time
    assert set(batches) <= {("node", "pods", "broken", "psi"), ("node", "pods", "broken")}
    assert batches.count(("node", "pods", "broken", "psi")) >= 3
    # listeners hear of each collector of a batch, in order, after the whole batch ran
    first_listens = [name for event, name in journal[4:8]]
    assert journal[4:8] == [("listen", name) for name in first_listens]
    assert first_listens == ["node", "pods", "broken", "psi"]
    assert runner.failures == {"node": 0, "pods": 0, "broken": broken.ticks, "psi": 0}
    assert broken.ticks >= 5  # a failing tick stops neither it nor the others
    assert len(node.threads | pods.threads | psi.threads) == 1  # the one worker thread
    assert threading.get_ident() not in node.threads
    assert all(c.closed for c in (node, pods, broken, psi))


async def test_a_collector_that_changes_its_interval_is_run_on_the_new_one():
    journal: list[tuple[str, str]] = []
    steady = Recording("steady", 0.2, journal)
    changing = Recording("cpi", 5.0, journal)  # as the CPI collector: a long wait, then a short window

    def collect(now: float, original=changing.collect) -> None:
        original(now)
        changing.interval = 0.2 if changing.ticks == 1 else 5.0

    changing.collect = collect  # type: ignore[method-assign]
    runner = CollectorRunner([steady, changing])
    runner.start()
    try:
        await eventually(lambda: changing.ticks >= 2, within=20)
        await eventually(lambda: steady.ticks >= changing.ticks + 4, within=20)
    finally:
        await runner.stop()
    assert changing.ticks == 2  # the start, then 0.2 s later; then its 5 s wait


async def test_collectors_a_tick_hastens_run_right_after_its_batch():
    """A probe's request brings the named collectors forward, with the others of the same
    interval (they stay one batch, next due an interval later); one of another interval
    keeps its schedule."""
    journal: list[tuple[str, str]] = []
    usage = Recording("usage", 600.0, journal)
    same = Recording("same-interval", 600.0, journal)
    other = Recording("other", 900.0, journal)
    probe = Recording("probe", 0.1, journal)
    runner = CollectorRunner([usage, same, other, probe])

    def collect(now: float, original=probe.collect) -> None:
        original(now)
        if probe.ticks == 3:
            runner.hastening.request(["usage"])

    probe.collect = collect  # type: ignore[method-assign]
    runner.listeners.append(lambda name: journal.append(("listen", name)))
    runner.start()
    try:
        await eventually(lambda: probe.ticks >= 6, within=20)
    finally:
        await runner.stop()
    ticks = [name for event, name in journal if event == "tick"]
    # the third probe tick asked: usage ran before the probe's next (in its batch or alone)
    assert ticks[:7] == ["usage", "same-interval", "other", "probe", "probe", "probe", "usage"]
    assert ticks[7] == "same-interval"
    # long intervals: only the request ran usage and its companion again
    assert (usage.ticks, same.ticks, other.ticks) == (2, 2, 1)
