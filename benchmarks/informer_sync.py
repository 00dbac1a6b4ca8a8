"""S3: initial informer sync of 5000 nodes and 50000 pods from a real kube-apiserver.

The benchmark starts its own etcd and kube-apiserver (``hack/envtest.sh`` binaries), creates
the objects with concurrent requests, then syncs them in a fresh child process so the
memory figure is the syncing process alone:

* ``sync_s``: from starting the node and pod informers to both having delivered their
  first complete LIST, with compact per-consumer records (what a scheduler keeps); the
  median of five runs (one in quick mode), each in a fresh process, once the apiserver
  has gone idle after the bulk creation; the informers use the product's defaults (page
  size included);
* ``rss_mib``: the largest peak resident set size of those processes;
* ``raw_sync_s`` / ``raw_rss_mib``: the same with decoded JSON kept as is (identity
  transform), for comparison;
* ``client_cpu_s`` / ``apiserver_cpu_s``: CPU seconds the syncing process and the
  apiserver spent during the compact sync (they share this machine's cores, so the sync
  cannot be faster than their sum divided by the core count).

Before each run one pod and one node are written, as a live cluster writes them all the
time: the apiserver serves the pages after the first from a snapshot of its cache at the
list's resourceVersion, and drops the snapshots older than etcd's compaction (every 5
minutes); in a cluster left still for that long it serves them from etcd instead, which
costs it (and etcd) twice the work.

Every run also notes (in ``params``) the apiserver's CPU seconds and completed garbage
collections (one that starts late in a run completes in the next), and etcd's CPU
seconds, while it lasted. The apiserver's Go heap holds every object it caches (about
1.6 GB here), so one collection costs it 2 to 3 CPU seconds; one comes every 2 to 3
syncs (each has it allocate about 0.7 GB), and a run it falls in takes 2 to 4 s longer
on two cores. etcd works during a run when the apiserver checks
its cache against it (every 5 to 7.5 minutes, a full read of the pods). Five runs keep
the median off those.

Quick mode (the test suite's smoke run) uses 50 nodes and 500 pods.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

import orjson

from benchmarks.harness import Result
from koordinator.kube import resources as res
from koordinator.kube.client import ApiClient
from koordinator.kube.config import ClusterConfig
from koordinator.kube.informer import InformerFactory
from testsupport.envtest import ControlPlane, provision_binaries

NAME = "informer_sync"
RUNS = 5
NAMESPACES = 50
CONCURRENCY = 48
ROOT = Path(__file__).resolve().parent.parent


def make_node(i: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": f"node-{i:05d}",
            "labels": {
                "kubernetes.io/hostname": f"node-{i:05d}",
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "node.kubernetes.io/instance-type": "m5.4xlarge",
                "topology.kubernetes.io/zone": f"zone-{i % 3}",
                "topology.kubernetes.io/region": "region-1",
            },
        },
        "spec": {"podCIDR": f"10.{i // 256 % 256}.{i % 256}.0/24"},
        "status": {
            "capacity": {"cpu": "16", "memory": "64Gi", "pods": "110", "ephemeral-storage": "100Gi"},
            "allocatable": {"cpu": "15800m", "memory": "62Gi", "pods": "110", "ephemeral-storage": "95Gi"},
            "conditions": [
                {
                    "type": t,
                    "status": "False" if t != "Ready" else "True",
                    "reason": f"Kubelet{t}",
                    "message": "ok",
                    "lastHeartbeatTime": "2026-01-01T00:00:00Z",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }
                for t in ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready")
            ],
            "addresses": [
                {"type": "InternalIP", "address": f"192.168.{i // 256 % 256}.{i % 256}"},
                {"type": "Hostname", "address": f"node-{i:05d}"},
            ],
            "nodeInfo": {
                "kubeletVersion": "v1.34.4",
                "containerRuntimeVersion": "containerd://2.1.0",
                "osImage": "Debian GNU/Linux 12 (bookworm)",
                "kernelVersion": "6.1.0-28-amd64",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        },
    }


def make_pod(i: int, nodes: int) -> dict[str, Any]:
    app = f"app-{i % 200}"
    namespace = f"bench-{i % NAMESPACES}"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{app}-{i:06d}",
            "namespace": namespace,
            "labels": {
                "app": app,
                "app.kubernetes.io/name": app,
                "app.kubernetes.io/instance": f"{app}-prod",
                "app.kubernetes.io/version": "1.2.3",
                "pod-template-hash": f"{i % 200:08x}",
                "koordinator.sh/qosClass": "LS" if i % 3 else "BE",
                "team": f"team-{i % 17}",
            },
            "annotations": {
                "prometheus.io/scrape": "true",
                "prometheus.io/port": "9090",
                "kubectl.kubernetes.io/default-container": "main",
            },
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": f"{app}-rs",
                    "uid": f"00000000-0000-0000-0000-{i % 200:012d}",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "nodeName": f"node-{i % nodes:05d}",
            "containers": [
                {
                    "name": "main",
                    "image": f"registry.example/{app}:1.2.3",
                    "args": ["--port=8080", "--metrics-port=9090", "--log-level=info"],
                    "ports": [
                        {"name": "http", "containerPort": 8080},
                        {"name": "metrics", "containerPort": 9090},
                    ],
                    "env": [{"name": f"ENV_{k}", "value": f"value-{k}"} for k in range(6)],
                    "resources": {
                        "requests": {"cpu": "250m", "memory": "256Mi"},
                        "limits": {"cpu": "1", "memory": "512Mi"},
                    },
                    "volumeMounts": [
                        {"name": "config", "mountPath": "/etc/app"},
                        {"name": "data", "mountPath": "/data"},
                    ],
                    "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}, "periodSeconds": 10},
                },
                {
                    "name": "sidecar",
                    "image": "registry.example/proxy:2.0",
                    "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}},
                },
            ],
            "volumes": [
                {"name": "config", "configMap": {"name": f"{app}-config"}},
                {"name": "data", "emptyDir": {}},
            ],
            "tolerations": [
                {"key": "dedicated", "operator": "Equal", "value": "batch", "effect": "NoSchedule"}
            ],
            "affinity": {
                "podAntiAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "weight": 100,
                            "podAffinityTerm": {
                                "topologyKey": "kubernetes.io/hostname",
                                "labelSelector": {"matchLabels": {"app": app}},
                            },
                        }
                    ]
                }
            },
        },
    }


class PodRecord(NamedTuple):
    """What a scheduler keeps of a pod: identity, placement and requests."""

    namespace: str
    name: str
    uid: str
    node: str
    phase: str
    cpu_milli: int
    memory_bytes: int
    priority: int
    labels: tuple[tuple[str, str], ...]


class NodeRecord(NamedTuple):
    name: str
    cpu_milli: int
    memory_bytes: int
    labels: tuple[tuple[str, str], ...]


_UNITS = {
    "Ki": 1024,
    "Mi": 1024**2,
    "Gi": 1024**3,
    "Ti": 1024**4,
    "m": 0.001,
    "k": 1000,
    "M": 10**6,
    "G": 10**9,
}


@functools.lru_cache(maxsize=4096)
def _quantity(text: str) -> float:
    """A resource quantity's value; the few distinct spellings in a cluster are cached."""
    for suffix in ("Ki", "Mi", "Gi", "Ti", "m", "k", "M", "G"):
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * _UNITS[suffix]
    return float(text)


_intern = sys.intern
_LABEL_SETS: dict[tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]] = {}


def _labels(meta: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """The labels as a tuple shared by every object with the same label set.

    The apiserver writes map keys sorted, so no sorting is needed for equal sets to match.
    """
    items = tuple((meta.get("labels") or {}).items())
    shared = _LABEL_SETS.get(items)
    if shared is None:
        shared = tuple((_intern(k), _intern(v)) for k, v in items)
        _LABEL_SETS[shared] = shared
    return shared


def pod_record(obj: dict[str, Any]) -> PodRecord:
    meta, spec = obj["metadata"], obj["spec"]
    cpu = memory = 0.0
    for container in spec.get("containers") or ():
        requests = (container.get("resources") or {}).get("requests") or {}
        cpu += _quantity(requests.get("cpu", "0"))
        memory += _quantity(requests.get("memory", "0"))
    return PodRecord(
        _intern(meta["namespace"]),
        meta["name"],
        meta["uid"],
        _intern(spec.get("nodeName", "")),
        _intern((obj.get("status") or {}).get("phase", "")),
        int(cpu * 1000),
        int(memory),
        int(spec.get("priority") or 0),
        _labels(meta),
    )


def node_record(obj: dict[str, Any]) -> NodeRecord:
    allocatable = (obj.get("status") or {}).get("allocatable") or {}
    return NodeRecord(
        _intern(obj["metadata"]["name"]),
        int(_quantity(allocatable.get("cpu", "0")) * 1000),
        int(_quantity(allocatable.get("memory", "0"))),
        _labels(obj["metadata"]),
    )


def _rss_mib() -> tuple[float, float]:
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            fields[name] = int(value.split()[0]) / 1024.0
    return fields.get("VmRSS", 0.0), fields.get("VmHWM", 0.0)


async def _sync(config: ClusterConfig, compact: bool) -> dict[str, Any]:
    async with ApiClient(config, qps=1000.0, burst=1000) as client:
        factory = InformerFactory(client)
        nodes = factory.informer(res.NODES).add_consumer(node_record if compact else (lambda o: o))
        pods = factory.informer(res.PODS).add_consumer(pod_record if compact else (lambda o: o))
        start, cpu_start = time.perf_counter(), time.process_time()
        factory.start()
        async with asyncio.timeout(600):
            await factory.wait_for_sync()
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
        rss, peak = _rss_mib()
        result = {
            "sync_s": elapsed,
            "client_cpu_s": cpu,
            "rss_mib": peak,
            "steady_rss_mib": rss,
            "nodes": len(nodes.store),
            "pods": len(pods.store),
            "page_size": factory.page_size,
        }
        await factory.stop()
        return result


def _child(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", required=True)
    parser.add_argument("--raw", action="store_true")
    args = parser.parse_args(argv)
    config = ClusterConfig(**json.loads(args.config))
    print(json.dumps(asyncio.run(_sync(config, not args.raw))))


def _settle(pid: int, idle_fraction: float = 0.2, limit_s: float = 60.0) -> None:
    """Wait until the apiserver is idle after the bulk creation (busy below ``idle_fraction`` of a core)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        before = _cpu_seconds_of(pid)
        time.sleep(1.0)
        if _cpu_seconds_of(pid) - before < idle_fraction:
            return


def _cpu_seconds_of(pid: int) -> float:
    """User plus system CPU seconds of another process (0 when unknown)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _etcd_pid(workdir: Path) -> int:
    """The envtest etcd serving from ``workdir`` (0 when not found)."""
    wanted = f"--data-dir={workdir / 'etcd'}".encode()
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if wanted in argv:
            return int(entry.name)
    return 0


async def _apiserver_gc_cycles(config: ClusterConfig) -> int:
    """Garbage collections the apiserver's Go runtime has run so far (from its /metrics)."""
    async with ApiClient(config) as client:
        response = await client.open_stream("/metrics", {})
        try:
            text = (await response.read()).decode()
        finally:
            response.release()
    for line in text.splitlines():
        if line.startswith("go_gc_cycles_total_gc_cycles_total "):
            return int(float(line.split()[1]))
    return 0


async def _touch(config: ClusterConfig) -> None:
    """Write one pod and one node (see the module's docstring)."""
    stamp = {"metadata": {"annotations": {"bench.koordinator.sh/touched": str(time.time())}}}
    async with ApiClient(config) as client:
        await client.patch(res.PODS, make_pod(0, 1)["metadata"]["name"], stamp, "bench-0")
        await client.patch(res.NODES, make_node(0)["metadata"]["name"], stamp)


def _measure(config: dict[str, Any], raw: bool) -> dict[str, Any]:
    argv = [sys.executable, "-m", "benchmarks.informer_sync", "--config", json.dumps(config)]
    if raw:
        argv.append("--raw")
    done = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=ROOT, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"informer_sync child failed:\n{done.stderr[-4000:]}")
    measured: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return measured


async def _populate(client: ApiClient, nodes: int, pods: int) -> tuple[float, int]:
    for n in range(NAMESPACES):
        await client.ensure_namespace(f"bench-{n}")
    limit = asyncio.Semaphore(CONCURRENCY)

    async def create(resource: res.Resource, body: dict[str, Any]) -> dict[str, Any]:
        async with limit:
            return await client.create(resource, body)

    start = time.perf_counter()
    await asyncio.gather(*(create(res.NODES, make_node(i)) for i in range(nodes)))
    sample: dict[str, Any] = {}
    batch = 2000
    for first in range(0, pods, batch):
        created = await asyncio.gather(
            *(create(res.PODS, make_pod(i, nodes)) for i in range(first, min(pods, first + batch)))
        )
        sample = sample or created[0]
    return time.perf_counter() - start, len(orjson.dumps(sample))


def run(quick: bool) -> Result:
    nodes, pods = (50, 500) if quick else (5000, 50000)
    with ControlPlane(provision_binaries()) as plane:
        creds = plane.creds
        config = {
            "server": plane.url,
            "ca_file": str(creds.ca_cert),
            "client_cert_file": str(creds.admin_cert),
            "client_key_file": str(creds.admin_key),
        }

        admin = ClusterConfig(
            server=plane.url,
            ca_file=str(creds.ca_cert),
            client_cert_file=str(creds.admin_cert),
            client_key_file=str(creds.admin_key),
        )

        async def populate() -> tuple[float, int]:
            async with ApiClient(admin, qps=5000.0, burst=5000) as client:
                return await _populate(client, nodes, pods)

        create_s, pod_bytes = asyncio.run(populate())
        apiserver_pid = plane.apiserver.pid if plane.apiserver is not None else 0
        etcd_pid = _etcd_pid(plane.workdir)
        gc_cycles = functools.partial(_apiserver_gc_cycles, admin)
        _settle(apiserver_pid)
        runs = []
        for _ in range(1 if quick else RUNS):
            asyncio.run(_touch(admin))
            before, etcd_before, gc_before = (
                _cpu_seconds_of(apiserver_pid),
                _cpu_seconds_of(etcd_pid),
                asyncio.run(gc_cycles()),
            )
            measured = _measure(config, raw=False)
            measured["apiserver_cpu_s"] = _cpu_seconds_of(apiserver_pid) - before
            measured["etcd_cpu_s"] = _cpu_seconds_of(etcd_pid) - etcd_before
            measured["apiserver_gcs"] = asyncio.run(gc_cycles()) - gc_before
            runs.append(measured)
        asyncio.run(_touch(admin))
        raw = _measure(config, raw=True)
    for measured in runs:
        if (measured["nodes"], measured["pods"]) != (nodes, pods):
            raise RuntimeError(
                f"synced {measured['nodes']} nodes and {measured['pods']} pods, expected {nodes} and {pods}"
            )
    compact = sorted(runs, key=lambda r: r["sync_s"])[len(runs) // 2]
    apiserver_cpu_s = compact["apiserver_cpu_s"]
    result = Result(
        name=NAME,
        params={
            "nodes": nodes,
            "pods": pods,
            "page_size": compact["page_size"],
            "pod_json_bytes": pod_bytes,
            "quick": quick,
            "sync_runs_s": [round(r["sync_s"], 3) for r in runs],
            "apiserver_cpu_runs_s": [round(r["apiserver_cpu_s"], 2) for r in runs],
            "apiserver_gc_runs": [r["apiserver_gcs"] for r in runs],
            "etcd_cpu_runs_s": [round(r["etcd_cpu_s"], 2) for r in runs],
        },
        results={
            "sync_s": round(compact["sync_s"], 3),
            "client_cpu_s": round(compact["client_cpu_s"], 2),
            "apiserver_cpu_s": round(apiserver_cpu_s, 2),
            "rss_mib": round(max(r["rss_mib"] for r in runs), 1),
            "steady_rss_mib": round(compact["steady_rss_mib"], 1),
            "raw_sync_s": round(raw["sync_s"], 3),
            "raw_rss_mib": round(raw["rss_mib"], 1),
            "create_s": round(create_s, 1),
        },
        ratios={"raw_vs_compact_rss_ratio": round(raw["rss_mib"] / compact["rss_mib"], 2)},
    )
    result.headline = (
        f"informer_sync: {nodes} nodes + {pods} pods synced in {result.results['sync_s']:.2f}s, "
        f"peak RSS {result.results['rss_mib']:.0f} MiB compact / {result.results['raw_rss_mib']:.0f} MiB raw "
        f"(S3 targets: sync_s <= 5, rss_mib <= 256)"
    )
    return result


if __name__ == "__main__":
    _child(sys.argv[1:])
