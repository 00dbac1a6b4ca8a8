"""S2 (in-process part): koord-scheduler with Koordinator's profile
(``controlplane/scheduler/profiles/koord-scheduler.yaml``: LoadAwareScheduling, ElasticQuota,
Coscheduling on top of kube-scheduler's plug-ins), beside S1's SchedulingBasic measured in
the same run.

Nodes of 4 CPU, 32 Gi and 110 pods at 1000 and 5000 nodes, each with a fresh NodeMetric
(usage between 10% and 50% of its CPU, pod usages of the pods bound there); a 3-level
quota tree (the root, an ``org`` parent, three teams sharing it); 5000 pending pods of
100m / 500 Mi (500 in quick mode), each labelled with a team's quota, one in ten a member
of a gang of 10 (``min-available`` 10, annotations). The fake apiserver serves real JSON
over loopback HTTP from its own process, as in S1; the scheduler runs in this process with
its real informers (NodeMetrics, ElasticQuotas, PodGroups included), queue, framework and
asynchronous binding.

Figures, per node count: ``nodes_<N>_pods_per_s`` (pods bound per second from the informers
being synced to the last binding answered, gang members included), ``nodes_<N>_cpu_per_pod_ms``,
``basic_nodes_<N>_pods_per_s`` (S1's SchedulingBasic, same run) and
``nodes_<N>_vs_basic_ratio``; ``rss_mib``: this process's peak resident memory.
"""

from __future__ import annotations

import resource
import subprocess
import sys
import textwrap
from pathlib import Path

from benchmarks import scheduler_basic
from benchmarks.harness import Result
from controlplane.scheduler import config as schedconfig
from controlplane.scheduler.profiles import KOORDINATOR
from koordinator.cli import run_loop

NAME = "scheduler_koord"
TARGET_PODS_PER_S = 2500.0
GANG_SIZE = 10
TEAMS = ("team-a", "team-b", "team-c")

SERVER = textwrap.dedent(
    """
    import asyncio, sys, time
    from pathlib import Path
    from koordinator.cli import run_loop
    from koordinator.heap import freeze_startup_heap
    from koordinator.kube import resources as res
    from koordinator.kube.timeutil import format_time
    from testsupport.fake import FakeApiServer

    nodes, pods, gang_size = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    teams, crds = sys.argv[4].split(","), Path(sys.argv[5])
    Q = "quota.scheduling.koordinator.sh"

    def quota(name, parent, is_parent, cpu):
        labels = {f"{Q}/is-parent": "true" if is_parent else "false"}
        if parent:
            labels[f"{Q}/parent"] = parent
        return {"metadata": {"name": name, "namespace": "default", "labels": labels},
                "spec": {"min": {"cpu": cpu, "memory": "0"}, "max": {"cpu": "100000", "memory": "1000Ti"}}}

    async def main():
        fake = FakeApiServer(track_managed_fields=False, history_limit=8 * pods + 4 * nodes + 100)
        for crd in ("slo.koordinator.sh_nodemetrics.yaml", "scheduling.sigs.k8s.io_elasticquotas.yaml",
                    "scheduling.sigs.k8s.io_podgroups.yaml"):
            fake.register_crd(crds / crd)
        fake.create(res.NAMESPACES, {"metadata": {"name": "koordinator-system"}})
        now = format_time(time.time())
        for i in range(nodes):
            name = f"node-{i}"
            fake.create(res.NODES, {"metadata": {"name": name}, "status": {
                "allocatable": {"cpu": "4", "memory": "32Gi", "pods": "110"},
                "capacity": {"cpu": "4", "memory": "32Gi", "pods": "110"}}})
            fake.create(res.NODE_METRICS, {"metadata": {"name": name}})
            metric = fake.get(res.NODE_METRICS, name)
            metric["status"] = {"updateTime": now, "nodeMetric": {"nodeUsage": {"resources": {
                "cpu": f"{400 + (i * 37) % 1600}m", "memory": f"{4 + i % 8}Gi"}}}, "podsMetric": []}
            fake.update(res.NODE_METRICS, metric, subresource="status")
        fake.create(res.ELASTIC_QUOTAS, quota("org", "", True, str(4 * nodes)))
        for team in teams:
            fake.create(res.ELASTIC_QUOTAS, quota(team, "org", False, str(4 * nodes // len(teams))))
        for i in range(pods):
            team = teams[i % len(teams)]
            meta = {"name": f"pod-{i}", "namespace": "default", "labels": {f"{Q}/name": team}}
            if (i // gang_size) % 10 == 0:  # one block of gang_size pods in ten: a gang
                meta["annotations"] = {
                    "gang.scheduling.koordinator.sh/name": f"gang-{i // gang_size}",
                    "gang.scheduling.koordinator.sh/min-available": str(gang_size),
                }
            container = {"name": "c", "image": "pause",
                         "resources": {"requests": {"cpu": "100m", "memory": "500Mi"}}}
            fake.create(res.PODS, {"metadata": meta,
                                   "spec": {"schedulerName": "koord-scheduler", "containers": [container]}})
        freeze_startup_heap(rarer_full_collections=True)
        await fake.start()
        print(fake.url, flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
        await fake.stop()

    run_loop(main())
    """
)


def _run_koord(nodes: int, pods: int) -> tuple[float, float]:
    crds = Path(__file__).resolve().parents[1] / "crds"
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(nodes), str(pods), str(GANG_SIZE), ",".join(TEAMS), str(crds)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        url = server.stdout.readline().strip()
        if not url.startswith("http"):
            raise RuntimeError("the fake apiserver did not start")
        config = schedconfig.load(str(KOORDINATOR))
        config.leader_election = {}
        return run_loop(scheduler_basic.schedule(url, pods, config))
    finally:
        assert server.stdin is not None
        server.stdin.close()
        server.wait(timeout=60)


def run(quick: bool) -> Result:
    pods = 500 if quick else 5000
    results: dict[str, float] = {}
    ratios: dict[str, float] = {}
    headline = []
    for nodes in (1000, 5000):
        wall_s, cpu_s = _run_koord(nodes, pods)
        basic_wall_s, _ = scheduler_basic._run_one("basic", nodes, pods)
        rate, basic = pods / wall_s, pods / basic_wall_s
        results[f"nodes_{nodes}_pods_per_s"] = round(rate, 1)
        results[f"nodes_{nodes}_cpu_per_pod_ms"] = round(cpu_s * 1000 / pods, 3)
        results[f"basic_nodes_{nodes}_pods_per_s"] = round(basic, 1)
        ratios[f"nodes_{nodes}_vs_basic_ratio"] = round(rate / basic, 3)
        ratios[f"nodes_{nodes}_vs_target_ratio"] = round(rate / TARGET_PODS_PER_S, 3)
        headline.append(
            f"{nodes} nodes: {rate:.0f} pods/s ({cpu_s * 1000 / pods:.2f} ms CPU/pod), "
            f"SchedulingBasic {basic:.0f} pods/s"
        )
    results["rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return Result(
        name=NAME,
        params={
            "profile": "Koordinator's (controlplane/scheduler/profiles/koord-scheduler.yaml)",
            "pods": pods,
            "gang_pods": f"1 in 10, gangs of {GANG_SIZE}",
            "quota_tree": f"root > org > {', '.join(TEAMS)}",
            "node": "4 CPU, 32Gi, 110 pods, a fresh NodeMetric each",
            "pod": "100m, 500Mi",
            "api": "fake apiserver over loopback HTTP, own process",
            "quick": quick,
        },
        results=results,
        ratios=ratios,
        headline=f"scheduler_koord: {'; '.join(headline)}; peak RSS {results['rss_mib']} MiB "
        f"(S2 target: {TARGET_PODS_PER_S:.0f} pods/s in process)",
    )
