"""envtest tier: the slo-controller against a real kube-apiserver.

The module runs its own etcd and kube-apiserver: the controllers act on every node of
the cluster, so they must not share one with other tests' nodes.

* batch and mid resources land in node status as the formulas say, GPU and RDMA resources
  as the node's Device says (with its GPU labels);
* a NodeMetric that stops being reported loses its node's batch resources once it is
  older than ``degradeTimeMinutes`` (one minute, for one node selected by a node entry);
* a ConfigMap change reaches the NodeSLOs;
* two ``koord-manager`` processes: the leader is killed (SIGKILL, no lease release) while a
  key of the ConfigMap is broken, the other takes over after the lease expires, finds the
  last good value in the persisted copy and writes nothing the first one already wrote
  (before the copy existed it reset every NodeSLO's thresholds to the defaults).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from koordinator.api.quantity import Quantity
from koordinator.kube import resources as res
from koordinator.kube.client import ApiClient
from koordinator.kube.errors import AlreadyExistsError, NotFoundError
from koordinator.kube.timeutil import format_time
from tests.controlplane.manager.controllers.harness import controller_set
from tests.controlplane.manager.controllers.objects import GI, config_map, node, node_metric, pod, pod_metric
from tests.envtest import Envtest, apply_crds, own_envtest
from tests.koordinator.api.builders import GiB, device, gpu, rdma
from testsupport.envtest.controlplane import free_port

ROOT = Path(__file__).resolve().parents[4]
SYSTEM = "koordinator-system"
APPS = "apps"
BATCH_CPU = "kubernetes.io/batch-cpu"
BATCH_MEMORY = "kubernetes.io/batch-memory"
MID_CPU = "kubernetes.io/mid-cpu"


@pytest.fixture(scope="module")
def envtest_slo(envtest_bin: Path) -> Iterator[Envtest]:
    """A control plane of this module's own."""
    with own_envtest(envtest_bin) as plane:
        yield plane


async def wait_for(predicate: Any, within: float = 60.0, every: float = 0.2) -> None:
    """Poll an async predicate until it returns true."""
    async with asyncio.timeout(within):
        while not await predicate():  # noqa: ASYNC110 - the state lives in the apiserver
            await asyncio.sleep(every)


async def create_with_status(client: ApiClient, resource: res.Resource, obj: dict[str, Any]) -> None:
    body = {k: v for k, v in obj.items() if k != "status"}
    created = await client.create(resource, body)
    if obj.get("status"):
        created["status"] = {**(created.get("status") or {}), **obj["status"]}
        await client.replace_status(resource, created)


async def prepared(envtest: Envtest) -> ApiClient:
    client = envtest.client()
    await apply_crds(client, [ROOT / "crds"])
    await client.ensure_namespace(SYSTEM)
    await client.ensure_namespace(APPS)
    return client


def batch_of(node_obj: dict[str, Any]) -> tuple[int, int] | None:
    allocatable = node_obj["status"].get("allocatable") or {}
    capacity = node_obj["status"].get("capacity") or {}
    if BATCH_CPU not in allocatable:
        assert BATCH_CPU not in capacity
        return None
    assert (capacity[BATCH_CPU], capacity[BATCH_MEMORY]) == (
        allocatable[BATCH_CPU],
        allocatable[BATCH_MEMORY],
    )
    return Quantity.parse(allocatable[BATCH_CPU]).value(), Quantity.parse(allocatable[BATCH_MEMORY]).value()


async def test_batch_resources_degrade_and_configmap_changes_on_a_real_apiserver(envtest_slo):
    client = await prepared(envtest_slo)
    try:
        now = time.time()
        fresh = format_time(now)
        colocation = {
            "enable": True,
            "nodeConfigs": [
                {
                    "name": "fast",
                    "nodeSelector": {"matchLabels": {"degrade": "fast"}},
                    "degradeTimeMinutes": 1,
                }
            ],
        }
        await client.create(res.CONFIG_MAPS, config_map(colocation))
        for obj in (node("node-a"), node("node-b"), node("node-c", labels={"degrade": "fast"})):
            await create_with_status(client, res.NODES, obj)
        await create_with_status(
            client,
            res.PODS,
            pod("prod-a", "4", "8Gi", node_name="node-a", namespace=APPS, priority_class="koord-prod"),
        )
        # created without a status: the apiserver makes it Pending, as a pod not yet started
        pending = pod("prod-c", "1", "1Gi", node_name="node-a", namespace=APPS, priority_class="koord-prod")
        del pending["status"]
        await client.create(res.PODS, pending)
        await create_with_status(
            client,
            res.NODE_METRICS,
            node_metric(
                "node-a", update_time=fresh, pods=[pod_metric("prod-a", "3", "10Gi", namespace=APPS)]
            ),
        )
        await create_with_status(client, res.NODE_METRICS, node_metric("node-b", update_time=fresh))
        gpus = (gpu(0, memory=16 * GiB), gpu(1, memory=16 * GiB), gpu(2, healthy=False), rdma(0))
        model = {"node.koordinator.sh/gpu-model": "A100-SXM4-80GB"}
        await client.create(res.DEVICES, device(*gpus, labels=model, name="node-b"))
        # reported 45 s ago: fresh now, stale in 15 s under this node's degradeTimeMinutes=1
        await create_with_status(
            client, res.NODE_METRICS, node_metric("node-c", update_time=format_time(now - 45))
        )

        async with controller_set(client, ("nodemetric", "noderesource", "nodeslo")):

            async def written() -> bool:
                nodes = [await client.get(res.NODES, n) for n in ("node-a", "node-b", "node-c")]
                return all(batch_of(n) is not None for n in nodes)

            await wait_for(written)
            # node-a: 16000 - 6400 (60 %) - max(500, kubelet 1000) - (prod-a 3000 + pending prod-c 1000)
            #         64Gi - 24051816857 (35 %) - 4Gi - (10Gi + 1Gi)
            assert batch_of(await client.get(res.NODES, "node-a")) == (4600, 64 * GI - 24051816857 - 15 * GI)
            # node-b: no pods
            assert batch_of(await client.get(res.NODES, "node-b")) == (8600, 64 * GI - 24051816857 - 4 * GI)
            node_b = await client.get(res.NODES, "node-b")
            assert node_b["status"]["allocatable"][MID_CPU] == "0"

            async def devices_written() -> bool:
                status = (await client.get(res.NODES, "node-b"))["status"]
                return "koordinator.sh/rdma" in status["capacity"]

            await wait_for(devices_written)
            node_b = await client.get(res.NODES, "node-b")
            names = ("koordinator.sh/gpu", "koordinator.sh/gpu-memory", "koordinator.sh/rdma")
            for part in ("capacity", "allocatable"):
                amounts = [Quantity.parse(node_b["status"][part][name]).value() for name in names]
                assert amounts == [200, 32 * GiB, 100], part
            assert node_b["metadata"]["labels"]["node.koordinator.sh/gpu-model"] == "A100-SXM4-80GB"

            # node-c's koordlet is silent: its batch resources go once the report is a minute old
            async def degraded() -> bool:
                return batch_of(await client.get(res.NODES, "node-c")) is None

            await wait_for(degraded, within=60)
            assert time.time() - (now - 45) >= 60, "not before the report was a minute old"
            assert batch_of(await client.get(res.NODES, "node-a")) is not None
            events = (await client.list(res.EVENTS, "default"))["items"]
            assert any(
                e["reason"] == "NodeResourceReset" and e["involvedObject"]["name"] == "node-c" for e in events
            )

            # a ConfigMap change reaches every NodeSLO
            async def slos_have(percent: int) -> bool:
                items = (await client.list(res.NODE_SLOS))["items"]
                return len(items) == 3 and all(
                    i["spec"]["resourceUsedThresholdWithBE"]["cpuSuppressThresholdPercent"] == percent
                    for i in items
                )

            await wait_for(lambda: slos_have(65))
            cm = await client.get(res.CONFIG_MAPS, "slo-controller-config", SYSTEM)
            cm["data"]["resource-threshold-config"] = json.dumps(
                {"clusterStrategy": {"enable": True, "cpuSuppressThresholdPercent": 45}}
            )
            await client.replace(res.CONFIG_MAPS, cm)
            await wait_for(lambda: slos_have(45))
            # the leader copied the good value, owned by the ConfigMap (a real apiserver checks the reference)
            await wait_for(lambda: copied(client, cm["data"]["resource-threshold-config"]))
            metrics = (await client.list(res.NODE_METRICS))["items"]
            assert sorted(m["metadata"]["name"] for m in metrics) == ["node-a", "node-b", "node-c"]
    finally:
        await client.close()


async def copied(client: ApiClient, threshold: str) -> bool:
    """The persisted copy holds ``threshold`` and is owned by the current slo-controller-config."""
    try:
        copy = await client.get(res.CONFIG_MAPS, "slo-controller-config-last-good", SYSTEM)
    except NotFoundError:
        return False
    cm = await client.get(res.CONFIG_MAPS, "slo-controller-config", SYSTEM)
    owners = copy["metadata"].get("ownerReferences") or [{}]
    return bool(
        copy.get("data", {}).get("resource-threshold-config") == threshold
        and owners[0].get("uid") == cm["metadata"]["uid"]
    )


# ---- two manager processes ---------------------------------------------------------------------


async def create_webhook_configurations(client: ApiClient) -> None:
    """The webhook configurations koord-manager publishes its CA into (with no webhooks in
    them, the apiserver calls none)."""
    for kind, name in (
        (res.MUTATING_WEBHOOK_CONFIGURATIONS, "koordinator-mutating-webhook-configuration"),
        (res.VALIDATING_WEBHOOK_CONFIGURATIONS, "koordinator-validating-webhook-configuration"),
    ):
        body = {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": kind.kind,
            "metadata": {"name": name},
        }
        with contextlib.suppress(AlreadyExistsError):
            await client.create(kind, body)


class Replica:
    """``koord-manager`` in a process of its own (``args`` after the test's own flags,
    ``kubeconfig`` instead of the control plane's admin one)."""

    def __init__(
        self,
        envtest: Envtest,
        workdir: Path,
        name: str,
        kubeconfig: Path | None = None,
        args: Sequence[str] = (),
    ) -> None:
        self.name = name
        self.metrics_port = free_port()
        self.health_port = free_port()
        self.log = workdir / f"{name}.log"
        workdir.mkdir(parents=True, exist_ok=True)
        argv = [
            sys.executable,
            "-m",
            "controlplane.manager",
            "--kubeconfig",
            str(kubeconfig or envtest.kubeconfig),
            "--webhook-port",
            str(free_port()),
            "--webhook-bind-address",
            "127.0.0.1",
            "--webhook-host",
            "127.0.0.1",
            "--webhook-cert-dir",
            str(workdir / f"{name}-certs"),
            "--metrics-addr",
            f"127.0.0.1:{self.metrics_port}",
            "--health-probe-addr",
            f"127.0.0.1:{self.health_port}",
            "--leader-elect-lease-duration",
            "4s",
            "--leader-elect-renew-deadline",
            "3s",
            "--leader-elect-retry-period",
            "500ms",
            *args,
        ]
        env = {k: v for k, v in os.environ.items() if k not in ("KUBERNETES_SERVICE_HOST",)}
        self.process = subprocess.Popen(
            argv, cwd=ROOT, env=env, stdout=self.log.open("wb"), stderr=subprocess.STDOUT
        )

    def _get(self, port: int, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as response:
                return response.status, response.read().decode()
        except OSError as exc:
            return 0, str(exc)

    async def metric(self, name: str) -> float | None:
        status, text = await asyncio.to_thread(self._get, self.metrics_port, "/metrics")
        if status != 200:
            return None
        total = None
        for line in text.splitlines():
            if line.startswith(name) and not line.startswith("#"):
                total = (total or 0.0) + float(line.rsplit(" ", 1)[1])
        return total

    async def ready(self) -> bool:
        status, _ = await asyncio.to_thread(self._get, self.health_port, "/readyz")
        return status == 200

    async def leading(self) -> bool:
        return await self.metric("koordinator_manager_is_leader ") == 1.0

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def output(self, *, everything: bool = False) -> str:
        text = self.log.read_text(errors="replace")
        return text if everything else text[-4000:]


async def versions(client: ApiClient) -> dict[str, str]:
    out = {}
    for resource in (res.NODES, res.NODE_METRICS, res.NODE_SLOS):
        for item in (await client.list(resource))["items"]:
            out[f"{resource.plural}/{item['metadata']['name']}"] = item["metadata"]["resourceVersion"]
    return out


async def test_leader_killed_the_other_replica_takes_over_without_rewriting(envtest_slo, tmp_path):
    client = await prepared(envtest_slo)
    replicas: list[Replica] = []
    try:
        await create_webhook_configurations(client)
        with contextlib.suppress(AlreadyExistsError):
            await client.create(res.CONFIG_MAPS, config_map({"enable": True}))
        cm = await client.get(res.CONFIG_MAPS, "slo-controller-config", SYSTEM)
        good = json.dumps({"clusterStrategy": {"enable": True, "cpuSuppressThresholdPercent": 45}})
        cm["data"]["resource-threshold-config"] = good
        await client.replace(res.CONFIG_MAPS, cm)
        for name in ("replica-node-1", "replica-node-2"):
            await create_with_status(client, res.NODES, node(name))
            await create_with_status(
                client, res.NODE_METRICS, node_metric(name, update_time=format_time(time.time()))
            )
        names = {n["metadata"]["name"] for n in (await client.list(res.NODES))["items"]}

        first = Replica(envtest_slo, tmp_path, "a")
        replicas.append(first)
        try:
            await wait_for(first.leading, within=60)

            async def all_written() -> bool:
                slos = {i["metadata"]["name"] for i in (await client.list(res.NODE_SLOS))["items"]}
                replica_nodes = [await client.get(res.NODES, n) for n in ("replica-node-1", "replica-node-2")]
                return slos == names and all(batch_of(n) is not None for n in replica_nodes)

            await wait_for(all_written, within=60)

            # the key breaks: the leader keeps 45 (and has it copied for whoever leads next)
            async def thresholds_45() -> bool:
                items = (await client.list(res.NODE_SLOS))["items"]
                return all(
                    i["spec"]["resourceUsedThresholdWithBE"]["cpuSuppressThresholdPercent"] == 45
                    for i in items
                )

            await wait_for(thresholds_45)
            await wait_for(lambda: copied(client, good))
            cm = await client.get(res.CONFIG_MAPS, "slo-controller-config", SYSTEM)
            cm["data"]["resource-threshold-config"] = '{"clusterStrategy": {"cpuSuppressThresholdPercent": 45'
            await client.replace(res.CONFIG_MAPS, cm)

            async def kept() -> bool:
                events = (await client.list(res.EVENTS, SYSTEM))["items"]
                return any(
                    e["message"].endswith("kept the last good value of resource-threshold-config")
                    for e in events
                )

            await wait_for(kept)
            second = Replica(envtest_slo, tmp_path, "b")
            replicas.append(second)
            await wait_for(second.ready, within=60)  # webhooks serve on the follower too
            assert not await second.leading()
            await asyncio.sleep(2)  # let the leader settle every key it requeued at once
            before = await versions(client)
            lease = await client.get(res.LEASES, "koordinator-manager", SYSTEM)

            first.kill()
            await wait_for(second.leading, within=60)
            await wait_for(
                lambda: _at_least(
                    second, 'controller_runtime_reconcile_total{controller="noderesource"', len(names)
                )
            )
            await wait_for(
                lambda: _at_least(
                    second, 'controller_runtime_reconcile_total{controller="nodeslo"', len(names)
                )
            )
            await asyncio.sleep(2)
            after = await versions(client)
            assert after == before, "the new leader rewrote objects the old one had written"
            assert await thresholds_45(), "the new leader reset the thresholds of the broken key"
            taken = await client.get(res.LEASES, "koordinator-manager", SYSTEM)
            assert taken["spec"]["holderIdentity"] != lease["spec"]["holderIdentity"]
            assert taken["spec"]["leaseTransitions"] == lease["spec"]["leaseTransitions"] + 1
        except BaseException:
            for replica in replicas:
                sys.stderr.write(f"--- {replica.name} ---\n{replica.output()}\n")
            raise
    finally:
        for replica in replicas:
            replica.stop()
        await client.close()


async def _at_least(replica: Replica, prefix: str, count: int) -> bool:
    value = await replica.metric(prefix)
    return value is not None and value >= count
