"""The Reservation a ReservationFirst job asks for: named by the job's UID, the pod's
template without its node and kept off that node, its controller (or, for an unschedulable
Pending pod, the pod itself) as owner, allocate-once, the job's TTL."""

from __future__ import annotations

import copy
from typing import Any

from controlplane.descheduler.migration.reservation import reservation_for
from tests.controlplane.descheduler.builders import pod

Obj = dict[str, Any]
NOT_ON_N1 = {"key": "metadata.name", "operator": "NotIn", "values": ["n1"]}


def test_the_reservation_of_a_running_pod() -> None:
    p = pod("web-1", namespace="prod", node="n1", labels={"app": "web"}, annotations={"a": "b"})
    original = copy.deepcopy(p)
    r = reservation_for(p, "job-uid-1", 300.0, 1_767_225_600_123)
    assert r["apiVersion"] == "scheduling.koordinator.sh/v1alpha1"
    assert r["kind"] == "Reservation"
    assert r["metadata"] == {
        "name": "job-uid-1",
        "labels": {
            "app.kubernetes.io/created-by": "koord-descheduler",
            "scheduling.koordinator.sh/reservation-order": "1767225600123",
        },
    }
    spec = r["spec"]
    assert spec["allocateOnce"] is True
    assert spec["ttl"] == "5m0s"
    assert spec["owners"] == [
        {
            "controller": {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "name": "rs",
                "uid": "rs-uid",
                "controller": True,
                "blockOwnerDeletion": True,
                "namespace": "prod",
            }
        }
    ]
    template = spec["template"]
    assert template["metadata"]["name"] == "web-1"
    assert template["metadata"]["namespace"] == "prod"
    assert template["metadata"]["labels"] == {"app": "web"}
    assert template["metadata"]["annotations"] == {"a": "b"}
    assert "nodeName" not in template["spec"]
    assert template["spec"]["containers"] == p["spec"]["containers"]
    assert template["spec"]["schedulerName"] == "koord-scheduler"
    assert template["spec"]["affinity"] == {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchFields": [NOT_ON_N1]}]
            }
        }
    }
    # the pod itself is left as it was
    assert p == original


def test_the_node_exclusion_is_added_to_every_existing_term() -> None:
    p = pod("web-1", node="n1")
    zone = {"key": "zone", "operator": "In", "values": ["z1"]}
    by_name = {"key": "metadata.name", "operator": "NotIn", "values": ["n7"]}
    p["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [zone]}, {"matchFields": [by_name]}]
            },
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 1, "preference": {"matchExpressions": [zone]}}
            ],
        },
        "podAntiAffinity": {"x": "y"},
    }
    original = copy.deepcopy(p)
    r = reservation_for(p, "u", 300.0, 1)
    affinity = r["spec"]["template"]["spec"]["affinity"]
    assert affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == {
        "nodeSelectorTerms": [
            {"matchExpressions": [zone], "matchFields": [NOT_ON_N1]},
            {"matchFields": [by_name, NOT_ON_N1]},
        ]
    }
    assert (
        affinity["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
        == (original["spec"]["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"])
    )
    assert affinity["podAntiAffinity"] == {"x": "y"}
    assert p == original


def test_the_reservation_of_an_unschedulable_pending_pod_is_owned_by_the_pod() -> None:
    p = pod("web-1", namespace="prod", phase="Pending", ready=False, uid="pod-uid")
    r = reservation_for(p, "u", 300.0, 1)
    assert r["spec"]["owners"] == [
        {"object": {"uid": "pod-uid", "kind": "Pod", "name": "web-1", "namespace": "prod"}}
    ]
    # no node: no exclusion
    assert "affinity" not in r["spec"]["template"]["spec"]


def test_a_scheduled_pending_pod_is_owned_by_its_controller() -> None:
    p = pod("web-1", node="n1", phase="Pending", ready=False)
    r = reservation_for(p, "u", 300.0, 1)
    assert list(r["spec"]["owners"][0]) == ["controller"]


def test_a_bare_pod_gets_no_owner() -> None:
    assert reservation_for(pod("p", node="n1", owner=None), "u", 300.0, 1)["spec"]["owners"] == []


def test_ttl_formatting() -> None:
    p = pod("p", node="n1")
    assert reservation_for(p, "u", 90.5, 1)["spec"]["ttl"] == "1m30.5s"
    assert reservation_for(p, "u", 3600.0, 1)["spec"]["ttl"] == "1h0m0s"
    assert "ttl" not in reservation_for(p, "u", None, 1)["spec"]
    assert "ttl" not in reservation_for(p, "u", 0.0, 1)["spec"]


# ---- the job's spec.reservationOptions.template ----------------------------------------------

PINNED = {
    "metadata": {"labels": {"app": "web"}},
    "spec": {
        "nodeName": "n1",
        "nodeSelector": {"kubernetes.io/hostname": "n2"},
        "containers": [{"name": "main", "image": "app"}],
    },
}
OWNERS = [{"labelSelector": {"matchLabels": {"app": "web"}}}]


def test_a_template_is_the_starting_point() -> None:
    p = pod("web-1", namespace="prod", node="n1", labels={"app": "web"})
    template = {
        "metadata": {"name": "my-reservation", "labels": {"team": "x"}, "annotations": {"note": "y"}},
        "spec": {"ttl": "30m", "owners": OWNERS, "template": PINNED, "allocateOnce": False},
    }
    given = copy.deepcopy(template)
    r = reservation_for(p, "job-uid-1", 300.0, 42, template)
    # the template's name, labels and annotations, with the descheduler's labels over them
    assert r["metadata"] == {
        "name": "my-reservation",
        "labels": {
            "team": "x",
            "app.kubernetes.io/created-by": "koord-descheduler",
            "scheduling.koordinator.sh/reservation-order": "42",
        },
        "annotations": {"note": "y"},
    }
    spec = r["spec"]
    # its ttl, not the job's; its owners; allocate-once whatever it says
    assert spec["ttl"] == "30m"
    assert spec["owners"] == OWNERS
    assert spec["allocateOnce"] is True
    # its pod template, without a node and kept off the pod's node
    assert spec["template"]["metadata"] == {"labels": {"app": "web"}}
    assert "nodeName" not in spec["template"]["spec"]
    assert spec["template"]["spec"]["nodeSelector"] == {"kubernetes.io/hostname": "n2"}
    assert spec["template"]["spec"]["containers"] == [{"name": "main", "image": "app"}]
    assert spec["template"]["spec"]["affinity"] == {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchFields": [NOT_ON_N1]}]
            }
        }
    }
    # the job's template is left as it was
    assert template == given


def test_what_the_template_leaves_out_comes_from_the_pod() -> None:
    p = pod("web-1", namespace="prod", node="n1", labels={"app": "web"})
    r = reservation_for(p, "job-uid-1", 300.0, 42, {"metadata": {"labels": {"team": "x"}}})
    assert r["metadata"]["name"] == "job-uid-1"
    assert r["metadata"]["labels"]["team"] == "x"
    assert r["spec"]["ttl"] == "5m0s"
    assert list(r["spec"]["owners"][0]) == ["controller"]
    assert r["spec"]["template"]["metadata"]["name"] == "web-1"
    assert r["spec"]["template"]["spec"]["containers"] == p["spec"]["containers"]
    assert r["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ] == {"nodeSelectorTerms": [{"matchFields": [NOT_ON_N1]}]}
    # without a template at all: the same as none
    assert reservation_for(p, "u", 300.0, 1, None) == reservation_for(p, "u", 300.0, 1)


def test_a_template_with_expires_gets_no_ttl() -> None:
    p = pod("web-1", node="n1")
    spec = {"expires": "2026-11-27T13:00:00Z"}
    r = reservation_for(p, "u", 300.0, 1, {"spec": spec})
    assert r["spec"]["expires"] == "2026-11-27T13:00:00Z"
    assert "ttl" not in r["spec"]
