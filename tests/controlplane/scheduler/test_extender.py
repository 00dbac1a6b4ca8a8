"""``koord-scheduler extender`` over loopback HTTP against the fake apiserver: kube-scheduler's
filter, prioritize, bind and preempt verbs answered by Koordinator's plug-ins (the shipped
extender profile), in the shapes kube-scheduler's Go types marshal."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp

from controlplane.reactor.serving import start_site
from controlplane.scheduler import config as schedconfig
from controlplane.scheduler.extender import Extender
from controlplane.scheduler.profiles import EXTENDER
from controlplane.scheduler.scheduler import Scheduler
from koordinator.kube import resources as res
from koordinator.kube.informer.factory import InformerFactory
from tests.controlplane.scheduler.numa.builders import TOPO_2S4N, make_nrt
from tests.controlplane.scheduler.quota.builders import cpu_quota
from tests.controlplane.scheduler.test_loadaware import metric
from testsupport.fake import FakeApiServer

Obj = dict[str, Any]
CRDS = Path(__file__).resolve().parents[3] / "crds"


def node(name: str, cpu: str = "4") -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
        "status": {"allocatable": {"cpu": cpu, "memory": "16Gi", "pods": "110"}},
    }


def pod(name: str, cpu: str, labels: Obj | None = None) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": labels or {}},
        "spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu}}}]},
    }


def serve_crds(fake: FakeApiServer) -> FakeApiServer:
    """The CRDs the extender profile's informers wait for."""
    for crd in (
        "slo.koordinator.sh_nodemetrics.yaml",
        "scheduling.sigs.k8s.io_elasticquotas.yaml",
        "scheduling.koordinator.sh_devices.yaml",
        "topology.node.k8s.io_noderesourcetopologies.yaml",
    ):
        fake.register_crd(CRDS / crd)
    return fake


@contextlib.asynccontextmanager
async def extender(fake: FakeApiServer) -> AsyncIterator[tuple[aiohttp.ClientSession, str]]:
    """The extender of the shipped profile, its informers synced, on a loopback port."""
    client = fake.client()
    factory = InformerFactory(client, freeze_after_sync=False)
    scheduler = Scheduler(client, schedconfig.load(str(EXTENDER)))
    scheduler.attach(factory)
    factory.start()
    await factory.wait_for_sync()
    site = await start_site(Extender(scheduler, client).app(), "127.0.0.1", 0)
    try:
        async with aiohttp.ClientSession() as session:
            yield session, f"http://127.0.0.1:{site.port}"
    finally:
        await site.stop()
        await factory.stop()
        await client.close()


async def call(session: aiohttp.ClientSession, url: str, verb: str, body: Any) -> Any:
    async with session.post(f"{url}/{verb}", data=json.dumps(body)) as reply:
        assert reply.status == 200
        return await reply.json()


async def report(fake: FakeApiServer, name: str, cpu: str) -> None:
    """A fresh NodeMetric as the koordlet writes it (the object, then its status)."""
    body = metric(name, cpu, "4Gi", updated=time.time())
    fake.create(res.NODE_METRICS, {k: v for k, v in body.items() if k != "status"})
    fake.update(
        res.NODE_METRICS, {**fake.get(res.NODE_METRICS, name), "status": body["status"]}, subresource="status"
    )


async def test_filter_and_prioritize_answer_with_loadaware_as_kube_scheduler_reads_them():
    async with FakeApiServer() as fake:
        serve_crds(fake)
        for name in ("hot", "cool", "unreported"):
            fake.create(res.NODES, node(name))
        await report(fake, "hot", "3500m")  # 88 % of 4 CPUs: over the 65 % threshold
        await report(fake, "cool", "1")
        async with extender(fake) as (session, url):
            args = {"Pod": pod("p", "500m"), "NodeNames": ["hot", "cool", "unreported"]}
            result = await call(session, url, "filter", args)
            assert result == {
                "NodeNames": ["cool", "unreported"],
                "FailedNodes": {"hot": "node(s) cpu usage exceed threshold"},
                "FailedAndUnresolvableNodes": {},
                "Error": "",
            }
            # LoadAwareScheduling's score (NodeNUMAResource and DeviceShare skip the pod): on
            # cool, cpu (4000 - 1000 used - 425 estimated: 85 % of 500m) * 100 / 4000 = 64,
            # memory (16 - 4) * 100 / 16 = 75 (the pod asks none): 69, 6 on kube-scheduler's
            # 0-10 scale; a node without a report scores 0
            priorities = await call(session, url, "prioritize", {**args, "NodeNames": ["cool", "unreported"]})
            assert priorities == [{"Host": "cool", "Score": 6}, {"Host": "unreported", "Score": 0}]
            # the NodeList form (nodeCacheCapable: false) is answered in kind
            listed = {"items": [node("hot"), node("cool")]}
            result = await call(session, url, "filter", {"pod": pod("p", "500m"), "nodes": listed})
            assert [n["metadata"]["name"] for n in result["Nodes"]["items"]] == ["cool"]


async def test_a_pod_over_its_quota_fails_every_node_and_bind_books_cpus_and_writes_them():
    async with FakeApiServer() as fake:
        serve_crds(fake)
        fake.create(res.NAMESPACES, {"metadata": {"name": "koordinator-system"}})
        fake.create(res.NODES, node("n1", cpu="32"))
        builder = make_nrt(TOPO_2S4N, "n1")
        for zone in range(4):
            builder.zone(zone, cpu="8", memory="16Gi")
        fake.create(res.NODE_RESOURCE_TOPOLOGIES, builder.build())
        fake.create(res.ELASTIC_QUOTAS, cpu_quota("team", "1", "1", namespace="default"))
        over = pod("over", "2", labels={"quota.scheduling.koordinator.sh/name": "team"})
        lsr = pod(
            "lsr",
            "4",
            labels={"koordinator.sh/qosClass": "LSR", "koordinator.sh/priority-class": "koord-prod"},
        )
        fake.create(res.PODS, over)
        created = fake.create(res.PODS, lsr)
        async with extender(fake) as (session, url):
            result = await call(session, url, "filter", {"Pod": over, "NodeNames": ["n1"]})
            assert result["NodeNames"] == []
            assert result["FailedNodes"]["n1"].startswith("Insufficient quotas, quotaName: team")
            bind = {
                "PodName": "lsr",
                "PodNamespace": "default",
                "PodUID": created["metadata"]["uid"],
                "Node": "n1",
            }
            assert await call(session, url, "bind", bind) == {"Error": ""}
            bound = fake.get(res.PODS, "lsr", "default")
            assert bound["spec"]["nodeName"] == "n1"
            status = json.loads(bound["metadata"]["annotations"]["scheduling.koordinator.sh/resource-status"])
            assert status == {"cpuset": "0-3"}
            # a stale UID is refused, and malformed requests get an Error, not a 500
            stale = await call(session, url, "bind", {**bind, "PodUID": "other"})
            assert "is not other" in stale["Error"]
            assert (await call(session, url, "filter", {"NodeNames": ["n1"]}))[
                "Error"
            ] == "ExtenderArgs: no Pod"
            async with session.post(f"{url}/filter", data=b"{not json") as reply:
                assert (await reply.json())["Error"].startswith("request body is not JSON")


async def test_preempt_returns_kube_schedulers_victims_unchanged():
    async with FakeApiServer() as fake:
        serve_crds(fake)
        fake.create(res.NODES, node("n1"))
        async with extender(fake) as (session, url):
            victims = {"n1": {"Pods": [{"UID": "u1"}], "NumPDBViolations": 0}}
            answer = await call(
                session, url, "preempt", {"Pod": pod("p", "1"), "NodeNameToMetaVictims": victims}
            )
            assert answer == {"NodeNameToMetaVictims": victims}
