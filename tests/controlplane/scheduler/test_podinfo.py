"""The scheduler's pod record: effective requests as upstream computes them (the summed fast
path for plain pods, the full rules with init containers, sidecars and overhead), host
ports and affinity terms; a request that does not parse is a ValueError."""

from __future__ import annotations

import pytest

from controlplane.scheduler.podinfo import pod_info
from koordinator.api import resourcelist


def pod(**spec: object) -> dict[str, object]:
    return {"metadata": {"name": "p", "namespace": "ns"}, "spec": spec}


def container(name: str, cpu: str, memory: str, **extra: object) -> dict[str, object]:
    return {"name": name, "resources": {"requests": {"cpu": cpu, "memory": memory}}, **extra}


def test_plain_pods_sum_their_containers():
    info = pod_info(pod(containers=[container("a", "100m", "1Gi"), container("b", "1", "512Mi")]))
    assert info.requests == {"cpu": 1100, "memory": 1536 * 1024 * 1024}


def test_init_containers_sidecars_and_overhead_follow_the_full_rules():
    obj = pod(
        containers=[container("a", "100m", "1Gi")],
        initContainers=[
            container("init", "2", "64Mi"),
            container("sidecar", "200m", "128Mi", restartPolicy="Always"),
        ],
        overhead={"cpu": "50m"},
    )
    expected = resourcelist.pod_requests(obj)
    info = pod_info(obj)
    assert info.requests == {"cpu": expected["cpu"].milli_value(), "memory": expected["memory"].value()}
    assert info.requests["cpu"] > 2000  # the init container's 2 CPUs dominate, plus sidecar and overhead


def test_host_ports_and_bad_quantities():
    ported = container("a", "1", "1Gi", ports=[{"containerPort": 80, "hostPort": 8080, "protocol": "UDP"}])
    assert pod_info(pod(containers=[ported])).host_ports == (("UDP", "0.0.0.0", 8080),)
    with pytest.raises(ValueError, match="quantities must match"):
        pod_info(pod(containers=[container("a", "lots", "1Gi")]))
