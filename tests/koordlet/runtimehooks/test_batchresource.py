"""BatchResource plans: BE pods' cgroups from batch-cpu / batch-memory."""

from __future__ import annotations

import pytest

from koordinator.api.extension.resources import BATCH_CPU, BATCH_MEMORY
from koordlet.runtimehooks.hooks.batchresource import BatchResource, milli_to_quota, milli_to_shares
from koordlet.runtimehooks.protocol import ContainerContext, PodContext, Resources
from tests.fakes.pods import PodBuilder, make_pod
from tests.koordlet.runtimehooks.conftest import facts, meta

CID = "containerd://" + "a" * 64


@pytest.mark.parametrize(("milli", "shares"), [(0, 2), (1, 2), (500, 512), (1000, 1024), (10**9, 262144)])
def test_shares(milli, shares):
    assert milli_to_shares(milli) == shares


@pytest.mark.parametrize(("milli", "quota"), [(0, -1), (5, 1000), (500, 50000), (2000, 200000)])
def test_quota(milli, quota):
    assert milli_to_quota(milli) == quota


def _be(**containers: tuple[dict[str, str], dict[str, str]]) -> PodBuilder:
    builder = make_pod("batch").qos("BE").kube_qos("BestEffort")
    for name, (requests, limits) in containers.items():
        builder.container(name, cid=f"containerd://{name}" + "0" * 50, requests=requests, limits=limits)
    return builder


def _pod_resources(host, pod, **kw) -> Resources:
    ctx = PodContext(meta(host, pod), facts(host, **kw))
    BatchResource().pod(ctx)
    return ctx.response.resources


def test_pod_level(any_host):
    pod = _be(
        a=({BATCH_CPU: "1000", BATCH_MEMORY: "1Gi"}, {BATCH_CPU: "2000", BATCH_MEMORY: "2Gi"}),
        b=({BATCH_CPU: "500"}, {BATCH_CPU: "500", BATCH_MEMORY: "1Gi"}),
    ).build()
    assert _pod_resources(any_host, pod) == Resources(cpu_shares=1536, cfs_quota=250000, memory_limit=3 << 30)


def test_a_container_without_limits_makes_the_pod_unlimited(any_host):
    pod = _be(
        a=({BATCH_CPU: "1000"}, {BATCH_CPU: "1000", BATCH_MEMORY: "1Gi"}), b=({BATCH_CPU: "1000"}, {})
    ).build()
    assert _pod_resources(any_host, pod) == Resources(cpu_shares=2048, cfs_quota=-1, memory_limit=-1)


def test_container_level(any_host):
    pod = _be(a=({BATCH_CPU: "250", BATCH_MEMORY: "1Gi"}, {BATCH_CPU: "500", BATCH_MEMORY: "2Gi"})).build()
    m = meta(any_host, pod)
    ctx = ContainerContext(m, m.containers[0], facts(any_host))
    BatchResource().container(ctx)
    assert ctx.response.resources == Resources(cpu_shares=256, cfs_quota=50000, memory_limit=2 << 30)
    assert ctx.response.resources.updates(ctx.cgroup_parent)[0].relative == m.containers[0].cgroup_dir


def test_cfs_quota_suppression_owns_the_quota(any_host):
    pod = _be(a=({BATCH_CPU: "1000"}, {BATCH_CPU: "1000", BATCH_MEMORY: "1Gi"})).build()
    slo = {"resourceUsedThresholdWithBE": {"enable": True, "cpuSuppressPolicy": "cfsQuota"}}
    assert _pod_resources(any_host, pod, slo=slo).cfs_quota == -1


def test_cpu_normalization_ratio_divides_the_quota(any_host):
    pod = _be(a=({BATCH_CPU: "1000"}, {BATCH_CPU: "1000", BATCH_MEMORY: "1Gi"})).build()
    node = {"metadata": {"annotations": {"node.koordinator.sh/cpu-normalization-ratio": "1.5"}}}
    assert _pod_resources(any_host, pod, node=node).cfs_quota == 66667  # ceil(100000 / 1.5)


def test_extended_resource_spec_annotation_wins(any_host):
    pod = (
        _be(a=({}, {}))
        .annotation(
            "node.koordinator.sh/extended-resource-spec",
            '{"containers": {"a": {"requests": {"kubernetes.io/batch-cpu": "2000"},'
            ' "limits": {"kubernetes.io/batch-cpu": "2000", "kubernetes.io/batch-memory": "4Gi"}}}}',
        )
        .build()
    )
    assert _pod_resources(any_host, pod) == Resources(cpu_shares=2048, cfs_quota=200000, memory_limit=4 << 30)


def test_only_be_pods(any_host):
    pod = make_pod("web").qos("LS").container("a", cid=CID, requests={BATCH_CPU: "1000"}).build()
    assert _pod_resources(any_host, pod) == Resources()


def test_gate(fake_host_v1):
    assert BatchResource().enabled(facts(fake_host_v1))[0]
    assert not BatchResource().enabled(facts(fake_host_v1, gates={"BatchResource": False}))[0]
