"""S2: koord-scheduler with Koordinator's profile
(``controlplane/scheduler/profiles/koord-scheduler.yaml``: LoadAwareScheduling,
NodeNUMAResource, DeviceShare, ElasticQuota, Coscheduling on top of kube-scheduler's
plug-ins; the workload's pods bind no CPUs and ask for no devices), beside S1's SchedulingBasic measured in
the same run, in process and end to end.

The workload (its objects built by ``benchmarks/_koord_e2e.py`` for both halves): nodes of
4 CPU, 32 Gi and 110 pods, each with a fresh NodeMetric (created, then its status written:
usage between 10% and 50% of its CPU); a 3-level quota tree (the root, an ``org`` parent,
three teams sharing it); pending pods of 100m / 500 Mi, each labelled with a team's quota
round-robin, one block of 10 in every 100 a gang (``min-available`` 10, annotations).

**In process**: 1000 and 5000 nodes, 5000 pods (500 in quick mode). The fake apiserver
serves real JSON over loopback HTTP from its own process, as in S1; the scheduler runs in
this process with its real informers (NodeMetrics, ElasticQuotas, PodGroups included),
queue, framework and asynchronous binding. Figures, per node count:
``nodes_<N>_pods_per_s`` (pods bound per second from the informers being synced to the
last binding answered, gang members included), ``nodes_<N>_cpu_per_pod_ms`` (over the
same span), ``nodes_<N>_events_after_s`` (the scheduler writes each pod's Scheduled Event
in the background, one at a time, as kube-scheduler's event broadcaster does: the seconds
after the last binding until the last of them was written), ``basic_nodes_<N>_pods_per_s``
(S1's SchedulingBasic, same run) and ``nodes_<N>_vs_basic_ratio``; ``rss_mib``: this
process's peak resident memory over this half.

**End to end** (``_koord_e2e.run_e2e``, ``scheduler_e2e``'s machinery): 1000 nodes and 5000
pods (100 and 200 in quick mode) on a fresh envtest etcd + kube-apiserver v1.34.4 per run,
with the NodeMetric, ElasticQuota, PodGroup, Device and NodeResourceTopology CRDs and the
``koordinator-system`` namespace;
``python -m controlplane.scheduler --config`` (the profile, its clientConnection at QPS and
burst 5000, leader election off) as a process of its own. Beside it, on its own fresh
control plane, S1's end-to-end workload with koord-scheduler's default profile. 3 runs of
each, alternating (1 in quick mode), medians:

* ``e2e_pods_per_s``: pods bound per second from the first binding seen (a watch) to the
  last; ``e2e_basic_pods_per_s`` the same for SchedulingBasic; ``e2e_vs_basic_ratio``;
* ``e2e_cpu_per_pod_ms`` / ``e2e_basic_cpu_per_pod_ms``: the scheduler process's CPU over
  that span, per pod (``e2e_cpu_per_pod_vs_basic_ratio``);
* ``e2e_rss_mib`` / ``e2e_basic_rss_mib``: the scheduler process's peak resident set;
* ``e2e_apiserver_cpu_s`` / ``e2e_basic_apiserver_cpu_s``, ``e2e_etcd_cpu_s``: the apiserver's
  and etcd's CPU over the span; ``e2e_start_to_bound_s``: process start to last binding;
  ``e2e_scheduled_events_count``: ``Scheduled`` Events found.

Each run's figures are in ``params`` (``e2e_koord_runs``, ``e2e_basic_runs``). Without the
envtest binaries the in-process figures are still reported and ``params["e2e_skipped"]``
says why the end-to-end ones are missing.
"""

from __future__ import annotations

import resource
import textwrap

from benchmarks import scheduler_basic
from benchmarks.harness import Result
from controlplane.scheduler import config as schedconfig
from controlplane.scheduler.profiles import KOORDINATOR

NAME = "scheduler_koord"
TARGET_PODS_PER_S = 2500.0

SERVER = textwrap.dedent(
    """
    import asyncio, sys, time
    from benchmarks import _koord_e2e as workload
    from koordinator.cli import run_loop
    from koordinator.heap import freeze_startup_heap
    from koordinator.kube import resources as res
    from koordinator.kube.timeutil import format_time
    from testsupport.fake import FakeApiServer

    nodes, pods, mixed = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "mixed"

    async def main():
        fake = FakeApiServer(track_managed_fields=False, history_limit=8 * pods + 4 * nodes + 100)
        for crd in workload.CRDS:
            fake.register_crd(crd)
        fake.create(res.NAMESPACES, {"metadata": {"name": workload.SYSTEM_NAMESPACE}})
        now = format_time(time.time())
        for i in range(nodes):
            fake.create(res.NODES, workload.mixed_node(i) if mixed else workload.node(i))
            if mixed:
                fake.create(res.NODE_RESOURCE_TOPOLOGIES, workload.mixed_topology(i))
                fake.create(res.DEVICES, workload.mixed_device(i))
            fake.create(res.NODE_METRICS, workload.node_metric(i))
            metric = fake.get(res.NODE_METRICS, f"node-{i}")
            metric["status"] = workload.node_metric_status(i, now)
            fake.update(res.NODE_METRICS, metric, subresource="status")
        for quota in workload.quotas(nodes, "default"):
            fake.create(res.ELASTIC_QUOTAS, quota)
        for i in range(pods):
            if mixed and i % 10 == workload.OWNER_SLOT:
                fake.create(res.RESERVATIONS, workload.mixed_reservation(i, "default"))
                placed = fake.get(res.RESERVATIONS, f"reserve-{i}")
                placed["status"] = workload.mixed_reservation_status(i, nodes, now)
                fake.update(res.RESERVATIONS, placed, subresource="status")
            fake.create(res.PODS, (workload.mixed_pod if mixed else workload.pod)(i, "default"))
        freeze_startup_heap(rarer_full_collections=True)
        await fake.start()
        print(fake.url, flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
        await fake.stop()

    run_loop(main())
    """
)


def _run_koord(nodes: int, pods: int, mixed: bool = False) -> tuple[float, float, float]:
    """One run: (wall, CPU) seconds until every pod was bound, then the wall seconds until
    their Scheduled Events were all written."""
    config = schedconfig.load(str(KOORDINATOR))
    config.leader_election = {}
    args = [str(nodes), str(pods), "mixed" if mixed else "plain"]
    return scheduler_basic.against_fake(SERVER, args, pods, config)


def run(quick: bool) -> Result:
    pods = 500 if quick else 5000
    results: dict[str, float] = {}
    ratios: dict[str, float] = {}
    headline = []
    repeats = 1 if quick else 3
    for nodes in (1000, 5000):
        # medians of three runs each, the two profiles alternating (the machine is noisy)
        koord_runs, basic_runs = [], []
        for _ in range(repeats):
            koord_runs.append(_run_koord(nodes, pods))
            basic_runs.append(scheduler_basic._run_one("basic", nodes, pods))
        wall_s, cpu_s, events_s = sorted(koord_runs)[repeats // 2]
        basic_wall_s, _, _ = sorted(basic_runs)[repeats // 2]
        rate, basic = pods / wall_s, pods / basic_wall_s
        results[f"nodes_{nodes}_pods_per_s"] = round(rate, 1)
        results[f"nodes_{nodes}_cpu_per_pod_ms"] = round(cpu_s * 1000 / pods, 3)
        results[f"nodes_{nodes}_events_after_s"] = round(events_s, 3)
        results[f"basic_nodes_{nodes}_pods_per_s"] = round(basic, 1)
        ratios[f"nodes_{nodes}_vs_basic_ratio"] = round(rate / basic, 3)
        ratios[f"nodes_{nodes}_vs_target_ratio"] = round(rate / TARGET_PODS_PER_S, 3)
        headline.append(
            f"{nodes} nodes: {rate:.0f} pods/s ({cpu_s * 1000 / pods:.2f} ms CPU/pod), "
            f"SchedulingBasic {basic:.0f} pods/s"
        )
    # the mixed workload: a tenth each of NUMA, GPU-share and reservation-owner pods
    for nodes in (1000, 5000):
        runs = sorted(_run_koord(nodes, pods, mixed=True) for _ in range(repeats))
        wall_s, cpu_s, _ = runs[repeats // 2]
        rate = pods / wall_s
        results[f"mixed_nodes_{nodes}_pods_per_s"] = round(rate, 1)
        results[f"mixed_nodes_{nodes}_cpu_per_pod_ms"] = round(cpu_s * 1000 / pods, 3)
        ratios[f"mixed_nodes_{nodes}_vs_target_ratio"] = round(rate / TARGET_PODS_PER_S, 3)
        headline.append(f"mixed {nodes} nodes: {rate:.0f} pods/s ({cpu_s * 1000 / pods:.2f} ms CPU/pod)")
    # before the end-to-end half, whose API objects and watch live in this process too
    results["rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    # imported only now: its envtest machinery must not add to the in-process figure's memory
    from benchmarks._koord_e2e import GANG_SIZE, TEAMS, run_e2e

    e2e = run_e2e(quick)
    results.update(e2e.results)
    ratios.update(e2e.ratios)
    params: dict[str, object] = {
        "profile": "Koordinator's (controlplane/scheduler/profiles/koord-scheduler.yaml)",
        "pods": pods,
        "gang_pods": f"1 in 10, gangs of {GANG_SIZE}",
        "quota_tree": f"root > org > {', '.join(TEAMS)}",
        "node": "4 CPU, 32Gi, 110 pods, a fresh NodeMetric each",
        "pod": "100m, 500Mi",
        "mixed": "one pod in ten each: LSR binding 1 CPU (NodeNUMAResource), 25% of a GPU "
        "(DeviceShare; a GPU and a Device per node), the owner of a Reservation placed ahead of it "
        "(Available on a node); NodeResourceTopology per node",
        "api": "fake apiserver over loopback HTTP, own process",
        "quick": quick,
        **e2e.params,
    }
    if e2e.skipped is not None:
        params["e2e_skipped"] = e2e.skipped
    return Result(
        name=NAME,
        params=params,
        results=results,
        ratios=ratios,
        headline=f"scheduler_koord: {'; '.join(headline)}; peak RSS {results['rss_mib']} MiB; "
        f"{e2e.headline} (S2 target: {TARGET_PODS_PER_S:.0f} pods/s in process)",
    )
