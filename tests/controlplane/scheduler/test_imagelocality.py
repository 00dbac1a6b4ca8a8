"""ImageLocality: upstream's image name normalization, the cluster's image index (size from
the first node listing a name, spread over the nodes listing it), the scores hand-computed
from upstream's thresholds, and the placements they lead to, in the framework, in
``koord-scheduler simulate`` and in the live scheduler against the fake apiserver."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from controlplane.scheduler import kernel
from controlplane.scheduler.__main__ import main
from controlplane.scheduler.cluster import Cluster
from controlplane.scheduler.config import parse
from controlplane.scheduler.framework import Framework
from controlplane.scheduler.kernel.twin import extra_raw
from controlplane.scheduler.plugins.imagelocality import (
    ImageLocality,
    calculate_priority,
    normalized_image_name,
)
from controlplane.scheduler.podinfo import pod_info
from koordinator.kube import resources as res
from tests.controlplane.scheduler.live import running
from tests.polling import eventually
from testsupport.fake import FakeApiServer

Obj = dict[str, Any]
MI = 1024 * 1024
BIG, SMALL, HUGE = "gcr.io/app/big:v1", "gcr.io/app/small:v1", "gcr.io/app/huge:v1"


def node(name: str, *images: tuple[list[str], int]) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
        "status": {
            "allocatable": {"cpu": "4", "memory": "32Gi", "pods": "110"},
            "images": [{"names": names, "sizeBytes": size} for names, size in images],
        },
    }


def pod(name: str, *images: str, init: tuple[str, ...] = ()) -> Obj:
    def container(i: int, image: str) -> Obj:
        return {"name": f"c{i}", "image": image, "resources": {"requests": {"cpu": "1", "memory": "2Gi"}}}

    spec: Obj = {
        "schedulerName": "koord-scheduler",
        "containers": [container(i, image) for i, image in enumerate(images)],
    }
    if init:
        spec["initContainers"] = [container(i, image) for i, image in enumerate(init)]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    }


#: BIG (600 MiB) on n1 and n2, SMALL (100 MiB) on n1 and n3, nothing on n4
NODES = [
    node("n1", ([BIG], 600 * MI), ([SMALL, "gcr.io/app/small@sha256:abc"], 100 * MI)),
    node("n2", ([BIG], 600 * MI)),
    node("n3", ([SMALL], 100 * MI)),
    node("n4"),
]


def cluster_of(nodes: list[Obj]) -> tuple[Cluster, Framework]:
    cluster = Cluster()
    for obj in nodes:
        cluster.set_node(obj)
    return cluster, Framework(parse(None).profiles[0], cluster, seed=1)


def scores(framework: Framework, obj: Obj) -> dict[str, int]:
    """Each node's ImageLocality score, from the plug-in's row parts (the kernel's input)
    and from simulate's explanation; both must agree."""
    info = pod_info(obj)
    cluster = framework.cluster
    plugin = next(p for p, _ in framework.scorers if p.NAME == "ImageLocality")
    extra = plugin.extra(info, cluster, 1)
    from_parts = {n.name: (extra_raw(extra, n.row) if extra else 0) for n in cluster.nodes.values()}
    explained = framework.explain(info)["scores"]
    assert {n: s.get("ImageLocality", 0) for n, s in explained.items()} == from_parts
    return from_parts


@pytest.mark.parametrize(
    ("name", "normalized"),
    [
        ("nginx", "nginx:latest"),
        ("nginx:1.27", "nginx:1.27"),
        ("registry:5000/team/app", "registry:5000/team/app:latest"),
        ("registry:5000/team/app:v2", "registry:5000/team/app:v2"),
        ("app@sha256:abc", "app@sha256:abc"),  # a digest has a colon after the last slash
        # upstream adds no registry: "nginx" never matches "docker.io/library/nginx:latest"
        ("library/nginx", "library/nginx:latest"),
    ],
)
def test_image_names_are_normalized_as_upstream(name: str, normalized: str):
    assert normalized_image_name(name) == normalized


def test_the_cluster_indexes_image_names_with_the_first_size_seen():
    cluster, _ = cluster_of(NODES)
    rows = {n: cluster.nodes[n].row for n in ("n1", "n2", "n3", "n4")}
    big = cluster.images[BIG]
    assert big.size == 600 * MI
    assert big.rows == 1 << rows["n1"] | 1 << rows["n2"]
    assert cluster.images["gcr.io/app/small@sha256:abc"].rows == 1 << rows["n1"]
    # another node reporting another size does not change it; the node's update drops what it lost
    cluster.set_node(node("n4", ([BIG], 900 * MI)))
    assert cluster.images[BIG].size == 600 * MI
    assert cluster.images[BIG].rows.bit_count() == 3
    cluster.set_node(node("n4"))
    assert cluster.images[BIG].rows.bit_count() == 2
    # the last node listing a name takes it with it; a name seen again starts over
    cluster.remove_node("n3")
    cluster.set_node(node("n1", ([BIG], 600 * MI)))
    assert SMALL not in cluster.images
    cluster.set_node(node("n3", ([SMALL], 120 * MI)))
    assert cluster.images[SMALL].size == 120 * MI


def test_scores_follow_upstreams_thresholds():
    _, framework = cluster_of(NODES)
    # two containers: [23 MiB, 2000 MiB]; BIG spreads over 2 of 4 nodes -> 300 MiB, SMALL -> 50 MiB
    # n1: 350 -> 100 * 327 / 1977 = 16; n2: 300 -> 100 * 277 / 1977 = 14;
    # n3: 50 -> 100 * 27 / 1977 = 1; n4: nothing, clamped to 23 MiB -> 0
    assert scores(framework, pod("p", BIG, SMALL)) == {"n1": 16, "n2": 14, "n3": 1, "n4": 0}
    # an init container counts, image and container alike
    assert scores(framework, pod("p", SMALL, init=(BIG,))) == {"n1": 16, "n2": 14, "n3": 1, "n4": 0}
    # one container: [23, 1000]: 300 -> 100 * 277 / 977 = 28
    assert scores(framework, pod("p", BIG)) == {"n1": 28, "n2": 28, "n3": 0, "n4": 0}
    # the same image twice counts twice: 600 of [23, 2000] -> 100 * 577 / 1977 = 29
    assert scores(framework, pod("p", BIG, BIG)) == {"n1": 29, "n2": 29, "n3": 0, "n4": 0}
    # an untagged name is :latest; a name no node lists scores nothing (the plug-in skips it)
    _, latest = cluster_of([node("n1", (["app:latest"], 500 * MI)), node("n2")])
    assert scores(latest, pod("p", "app")) == {"n1": 23, "n2": 0}  # 250 of [23, 1000]
    assert scores(framework, pod("p", "nginx")) == {"n1": 0, "n2": 0, "n3": 0, "n4": 0}
    # above the top threshold: 100
    _, everywhere = cluster_of([node(f"n{i}", ([HUGE], 3000 * MI)) for i in range(3)])
    assert scores(everywhere, pod("p", HUGE)) == {"n0": 100, "n1": 100, "n2": 100}
    assert calculate_priority(0, 1) == 0
    assert calculate_priority(23 * MI, 1) == 0


def test_the_node_holding_the_images_is_chosen(backend: str):
    _, framework = cluster_of(NODES)
    for _ in range(5):  # every other score ties: the images decide
        assert framework.schedule(pod_info(pod("p", BIG, SMALL))).node == "n1"


def test_the_kernel_adds_the_scores_as_they_are(backend: str):
    cluster, framework = cluster_of(NODES)
    info = pod_info(pod("p", BIG, SMALL))
    plugin = ImageLocality()
    extra = plugin.extra(info, cluster, 1)
    assert extra is not None
    vector = framework.pod_vector(info)
    cfg = framework.score_config()
    mask = bytes(cluster.table.live())
    chosen, _, _, best = kernel.find(cluster.table, vector, cfg, mask, 0, 4, framework.random, [extra])
    _, _, _, base = kernel.find(cluster.table, vector, cfg, mask, 0, 4, framework.random, [])
    assert cluster.table.names[chosen] == "n1"
    assert best == base + 16  # n1's 16, not normalized to 100


def test_simulate_reports_the_scores(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    paths = []
    for name, docs in (("n.yaml", NODES), ("p.yaml", [pod("web", BIG, SMALL)])):
        (tmp_path / name).write_text(yaml.safe_dump_all(docs))
        paths.append(str(tmp_path / name))
    assert main(["simulate", "--nodes", paths[0], "--pods", paths[1], "--seed", "1", "-o", "json"]) == 0
    (web,) = json.loads(capsys.readouterr().out)
    assert web["node"] == "n1"
    assert web["status"] == "Scheduled"
    got = {n: s["ImageLocality"] for n, s in web["scores"].items()}
    assert got == {"n1": 16, "n2": 14, "n3": 1, "n4": 0}
    # the nodes are alike otherwise: the totals differ by the image scores (weight 1)
    totals = {n: s["total"] - s["ImageLocality"] for n, s in web["scores"].items()}
    assert len(set(totals.values())) == 1


async def test_the_live_scheduler_places_pods_where_their_images_are():
    async with FakeApiServer() as fake:
        for obj in NODES:
            fake.create(res.NODES, obj)
        fake.create(res.PODS, pod("web", BIG, SMALL))
        async with running(fake):

            def bound() -> str | None:
                return (fake.get(res.PODS, "web", "default").get("spec") or {}).get("nodeName")

            await eventually(lambda: bound() is not None)
            assert bound() == "n1"
