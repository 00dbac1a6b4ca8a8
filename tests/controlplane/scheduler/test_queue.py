"""The scheduling queue against upstream's PriorityQueue rules, on a clock the test moves."""

from __future__ import annotations

import dataclasses

from controlplane.scheduler.plugins.schedulinggates import SchedulingGates
from controlplane.scheduler.podinfo import PodInfo
from controlplane.scheduler.queue import (
    ACTIVE,
    ASSIGNED_POD_DELETE,
    BACKOFF,
    GATED,
    NODE_ADD,
    NODE_LABEL,
    NODE_TAINT,
    UNSCHEDULABLE,
    SchedulingQueue,
)
from controlplane.scheduler.registry import plugin_events


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def pod(name: str, priority: int = 0, cpu: int = 100) -> PodInfo:
    return PodInfo("default", name, name, "koord-scheduler", "", priority, "", {"cpu": cpu}, ())


def queue(clock: Clock) -> SchedulingQueue:
    return SchedulingQueue(plugin_events(), clock=clock)


def test_active_queue_is_priority_then_arrival():
    clock = Clock()
    q = queue(clock)
    for name, priority in (("low", 0), ("high-first", 10), ("mid", 5), ("high-second", 10)):
        q.add(pod(name, priority))
        clock.now += 1
    order = []
    while (qp := q.pop()) is not None:
        order.append(qp.key)
    # highest priority first; within a priority, the one queued first
    assert order == ["default/high-first", "default/high-second", "default/mid", "default/low"]


def test_backoff_doubles_from_one_second_to_ten():
    q = queue(Clock())
    assert [q.backoff_duration(n) for n in range(1, 7)] == [1, 2, 4, 8, 10, 10]


def test_an_unschedulable_pod_moves_only_on_an_event_its_plugins_registered():
    clock = Clock()
    q = queue(clock)
    q.add(pod("p"))
    qp = q.pop()
    assert qp is not None
    q.failed(qp, {"NodeResourcesFit"}, q.cycle)
    assert qp.where == UNSCHEDULABLE
    # a label change does not help a pod that did not fit by resources
    assert q.on_event(NODE_LABEL) == 0
    assert q.pending() == {ACTIVE: 0, BACKOFF: 0, UNSCHEDULABLE: 1, GATED: 0}
    # an assigned pod deleted frees resources: back, to backoffQ while its 1 s backoff runs
    assert q.on_event(ASSIGNED_POD_DELETE) == 1
    assert qp.where == BACKOFF
    assert q.pop() is None
    clock.now += 1
    again = q.pop()
    assert again is qp
    assert again.attempts == 2


def test_an_event_during_the_cycle_sends_the_failed_pod_to_backoff():
    clock = Clock()
    q = queue(clock)
    q.add(pod("p"))
    qp = q.pop()
    assert qp is not None
    cycle = q.cycle
    q.on_event(NODE_ADD)  # a node arrives while the pod is being scheduled
    q.failed(qp, {"NodeResourcesFit"}, cycle)
    assert qp.where == BACKOFF  # not unschedulable: the new node may fit it


def test_leftover_unschedulable_pods_are_retried_after_five_minutes():
    clock = Clock()
    q = queue(clock)
    q.add(pod("p"))
    qp = q.pop()
    assert qp is not None
    q.failed(qp, {"TaintToleration"}, q.cycle)
    clock.now += 299
    assert q.flush_unschedulable_leftover() == 0
    clock.now += 2
    assert q.flush_unschedulable_leftover() == 1
    assert q.pop() is qp
    q.failed(qp, {"TaintToleration"}, q.cycle)
    assert q.on_event(NODE_TAINT) == 1  # a taint change is TaintToleration's event


def test_updates_deletes_and_errors():
    clock = Clock()
    q = queue(clock)
    q.add(pod("p", priority=0))
    q.add(pod("other", priority=5))
    q.update(pod("p", priority=9))  # the higher priority reorders it
    first = q.pop()
    assert first is not None
    assert first.key == "default/p"
    q.delete("default/other")
    assert q.pop() is None
    # an error (not "unschedulable") always backs off
    q.failed(first, (), q.cycle, unschedulable=False)
    assert first.where == BACKOFF
    # an update to an unschedulable pod gives it another try
    clock.now += 5
    again = q.pop()
    assert again is first
    q.failed(again, {"NodeResourcesFit"}, q.cycle)
    q.update(pod("p", priority=9, cpu=50))
    assert first.where == BACKOFF  # its 2 s backoff is still running
    clock.now += 2
    assert q.pop() is first
    q.done("default/p")
    assert q.pending() == {ACTIVE: 0, BACKOFF: 0, UNSCHEDULABLE: 0, GATED: 0}


def test_a_gated_pod_waits_until_its_last_gate_is_removed_then_goes_straight_to_active():
    gates = SchedulingGates()
    q = SchedulingQueue(
        plugin_events(),
        clock=Clock(),
        gate=lambda p: (gates.NAME, why) if (why := gates.pre_enqueue(p)) else None,
    )
    gated = dataclasses.replace(pod("g"), scheduling_gates=("example.com/quota", "example.com/team"))
    q.add(gated)
    assert q.pop() is None
    assert q.pending() == {ACTIVE: 0, BACKOFF: 0, UNSCHEDULABLE: 0, GATED: 1}
    assert gates.pre_enqueue(gated) == "waiting for scheduling gates: [example.com/quota example.com/team]"
    # events, even the five-minute flush, ask the gate again: still held
    q.on_event(NODE_ADD)
    q.clock.now += 600  # type: ignore[attr-defined]
    q.flush_unschedulable_leftover()
    assert q.pop() is None
    q.update(dataclasses.replace(gated, scheduling_gates=("example.com/team",)))
    assert q.pop() is None
    q.update(dataclasses.replace(gated, scheduling_gates=()))
    released = q.pop()
    assert released is not None
    assert released.key == "default/g"
    assert released.attempts == 1
    assert q.pending() == {ACTIVE: 0, BACKOFF: 0, UNSCHEDULABLE: 0, GATED: 0}


def test_an_event_moves_only_parked_pods_and_never_brings_back_a_deleted_one():
    clock = Clock()
    q = queue(clock)
    for name in ("parked", "deleted", "active"):
        q.add(pod(name))
    parked, deleted = q.pop(), q.pop()
    assert parked is not None
    assert deleted is not None
    q.failed(parked, {"NodeResourcesFit"}, q.cycle)
    q.failed(deleted, {"NodeResourcesFit"}, q.cycle)
    q.delete("default/deleted")
    # a node added: the parked pod (no attempt failed long ago: its backoff ran out) goes
    # back; the deleted one stays gone and the active one is untouched
    clock.now += 10
    assert q.on_event(NODE_ADD) == 1
    assert q.pending() == {ACTIVE: 2, BACKOFF: 0, UNSCHEDULABLE: 0, GATED: 0}
    popped = [q.pop(), q.pop()]
    assert {qp.key for qp in popped if qp is not None} == {"default/parked", "default/active"}
    assert q.on_event(NODE_ADD) == 0
