"""The scheduler's cluster view keeps every placed pod counted whatever order the informers
deliver in: a pod bound to a node not seen yet, a node that goes away and comes back, a
pod deleted after its node returned."""

from __future__ import annotations

import dataclasses
from typing import Any

from controlplane.scheduler.cluster import Cluster
from controlplane.scheduler.podinfo import pod_info

GI = 1 << 30


def node(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "10"}},
    }


def bound(name: str, node_name: str, cpu: str = "1", port: int | None = None) -> Any:
    container: dict[str, Any] = {"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}
    if port:
        container["ports"] = [{"containerPort": port, "hostPort": port}]
    return pod_info(
        {
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"nodeName": node_name, "containers": [container]},
        }
    )


def used(cluster: Cluster, node_name: str) -> tuple[int, int, int]:
    """(milli-CPU, memory bytes, pods) accounted on the node's row."""
    row, width = cluster.nodes[node_name].row, cluster.table.width
    return cluster.table.req[row * width], cluster.table.req[row * width + 1], cluster.table.pods[row]


def test_a_pod_seen_before_its_node_is_counted_when_the_node_arrives():
    cluster = Cluster()
    cluster.place(bound("early", "n1", port=8080), "n1")
    cluster.set_node(node("n1"))
    assert used(cluster, "n1") == (1000, GI, 1)
    assert cluster.rows_using_port("TCP", 8080, "0.0.0.0") == 1 << cluster.nodes["n1"].row


def test_a_node_that_goes_and_comes_back_keeps_its_pods():
    cluster = Cluster()
    cluster.set_node(node("other"))
    cluster.set_node(node("n1"))
    cluster.place(bound("a", "n1", port=53), "n1")
    cluster.place(bound("b", "n1", cpu="2"), "n1")
    cluster.remove_node("n1")
    assert cluster.rows_using_port("TCP", 53, "0.0.0.0") == 0  # nothing counted on a row that is gone
    cluster.set_node(node("n2"))  # takes the free row
    assert used(cluster, "n2") == (0, 0, 0)
    cluster.set_node(node("n1"))
    assert used(cluster, "n1") == (3000, 2 * GI, 2)
    cluster.unplace("ns/a")
    cluster.unplace("ns/b")
    assert used(cluster, "n1") == (0, 0, 0)
    assert cluster.ports == {}
    assert cluster.on_node == {}


def test_placing_again_moves_the_pod():
    cluster = Cluster()
    cluster.set_node(node("n1"))
    cluster.set_node(node("n2"))
    pod = bound("p", "n1")
    cluster.place(pod, "n1")
    cluster.place(pod, "n2")
    assert used(cluster, "n1") == (0, 0, 0)
    assert used(cluster, "n2") == (1000, GI, 1)


def test_a_binding_echo_swaps_the_record_and_a_changed_footprint_is_placed_again():
    """The bound pod's record (nodeName, PodScheduled set) replaces the assumed one in place:
    the node's counts stay and the plug-ins following placed pods hear nothing; a record
    whose requests or labels changed is taken off and placed again, and they hear both."""
    cluster = Cluster()
    cluster.set_node(node("n1"))
    heard: list[tuple[str | None, int]] = []

    def listener(name: str | None, pod: object = None, sign: int = 0) -> None:
        heard.append((name, sign))

    cluster.subscribe(listener)
    assumed = bound("p", "")
    cluster.place(assumed, "n1")
    heard.clear()
    echo = dataclasses.replace(assumed, node_name="n1", scheduled_at="2026-01-01T00:00:00Z")
    cluster.place(echo, "n1")
    assert cluster.placed["ns/p"][2] is echo
    assert used(cluster, "n1") == (1000, GI, 1)
    assert heard == []
    relabelled = dataclasses.replace(echo, labels={"app": "x"})
    cluster.place(relabelled, "n1")
    assert heard == [("n1", -1), ("n1", 1)]
    assert cluster.pod_index.by_label["ns"]["app"]["x"] == {"ns/p"}
    resized = bound("p", "n1", cpu="2")
    cluster.place(resized, "n1")
    assert used(cluster, "n1") == (2000, GI, 1)
