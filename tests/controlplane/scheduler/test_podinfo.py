"""The scheduler's pod record: effective requests as upstream computes them (the summed fast
path for plain pods, the full rules with init containers, sidecars and overhead), host
ports and affinity terms; a request that does not parse is a ValueError."""

from __future__ import annotations

import copy
import dataclasses

import pytest

from controlplane.scheduler.podinfo import pod_info, pod_object, refresh_pod_info
from controlplane.scheduler.quota.pods import quota_pod
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


def _fields(info: object) -> dict[str, object]:
    return {f.name: getattr(info, f.name) for f in dataclasses.fields(info)}  # type: ignore[arg-type]


def _gang_pod() -> dict[str, object]:
    obj = pod(
        containers=[container("a", "100m", "1Gi")],
        priority=5,
        tolerations=[{"key": "k", "operator": "Exists"}],
    )
    obj["metadata"].update(  # type: ignore[attr-defined]
        uid="u1",
        labels={"koordinator.sh/qosClass": "BE"},
        annotations={
            "gang.scheduling.koordinator.sh/name": "g",
            "gang.scheduling.koordinator.sh/min-available": "2",
        },
    )
    return obj


def test_a_bound_pods_record_is_refreshed_from_the_stored_one_as_a_full_build_would_make_it():
    pending = _gang_pod()
    bound = copy.deepcopy(pending)
    bound["spec"]["nodeName"] = "n1"  # type: ignore[index]
    bound["status"] = {"conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": "t"}]}
    bound["metadata"]["labels"]["koordinator.sh/qosClass"] = "LS"  # type: ignore[index]
    refreshed = refresh_pod_info(bound, pod_info(pending))
    assert _fields(refreshed) == _fields(pod_info(bound))
    assert (refreshed.node_name, refreshed.scheduled_at, refreshed.priority_class) == (
        "n1",
        "t",
        "koord-prod",
    )
    assert refreshed.gang is not None
    assert refreshed.gang.node_name == "n1"


def test_a_changed_spec_or_uid_is_read_again():
    pending = _gang_pod()
    resized = copy.deepcopy(pending)
    resized["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "2"  # type: ignore[index]
    assert refresh_pod_info(resized, pod_info(pending)).requests["cpu"] == 2000
    recreated = copy.deepcopy(resized)
    recreated["metadata"]["uid"] = "u2"  # type: ignore[index]
    assert _fields(refresh_pod_info(recreated, pod_info(resized))) == _fields(pod_info(recreated))


def test_quota_records_keep_the_request_only_while_the_spec_is_the_same():
    pending = _gang_pod()
    previous = quota_pod(pending)
    bound = copy.deepcopy(pending)
    bound["spec"]["nodeName"] = "n1"  # type: ignore[index]
    assert quota_pod(bound, previous=previous) == quota_pod(bound)
    resized = copy.deepcopy(bound)
    resized["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "2"  # type: ignore[index]
    assert quota_pod(resized, previous=previous).request["cpu"].milli_value() == 2000


def test_every_owner_reference_is_kept_and_given_back_to_the_cores():
    refs = [
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "rs-uid", "controller": True},
        {"apiVersion": "batch/v1", "kind": "Job", "name": "job", "uid": "job-uid"},
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "cm", "uid": "cm-uid", "controller": False},
    ]
    obj = pod(containers=[container("a", "1", "1Gi")])
    obj["metadata"]["ownerReferences"] = refs  # type: ignore[index]
    info = pod_info(obj)
    assert info.controller is not None
    assert info.controller.name == "rs"
    assert pod_object(info)["metadata"]["ownerReferences"] == refs
    # a change of the references alone is seen by the refreshed record
    changed = copy.deepcopy(obj)
    changed["metadata"]["ownerReferences"] = refs[:1]  # type: ignore[index]
    assert pod_object(refresh_pod_info(changed, info))["metadata"]["ownerReferences"] == refs[:1]
