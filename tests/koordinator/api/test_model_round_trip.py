"""Every model reads its sample and writes back the same JSON (empty fields omitted as Go does)."""

from __future__ import annotations

import pytest

from koordinator.api.model import ModelError
from koordinator.api.quantity import Quantity
from koordinator.api.types.registry import CRDS, model_for
from koordinator.api.types.scheduling import Reservation, ReservationSpec
from koordinator.api.types.slo import NodeSLO, SystemStrategy
from tests.koordinator.api.crd_cases import ALL_SAMPLES, sample_id


@pytest.mark.parametrize("obj", ALL_SAMPLES, ids=[sample_id(o) for o in ALL_SAMPLES])
def test_sample_round_trips(obj):
    model = model_for(obj["apiVersion"], obj["kind"])
    assert model is not None
    typed = model.from_dict(obj)
    assert typed.to_dict() == obj
    assert model.from_json(typed.to_json()).to_dict() == obj


def test_every_crd_version_has_a_sample():
    covered = {(o["apiVersion"], o["kind"]) for o in ALL_SAMPLES}
    for crd in CRDS:
        for version in crd.versions:
            assert (f"{crd.group}/{version.name}", crd.kind) in covered


def test_zero_values_are_omitted_like_go_omitempty():
    spec = ReservationSpec(template={"spec": {}}, owners=[], pre_allocation=False, allocate_policy="")
    assert spec.to_dict() == {"template": {"spec": {}}, "owners": []}


def test_non_omitempty_struct_fields_are_always_written():
    # Go's omitempty never drops a struct: totalNetworkBandwidth is written as "0".
    assert SystemStrategy().to_dict() == {"totalNetworkBandwidth": "0"}


def test_pointer_fields_keep_explicit_zero_values():
    slo = NodeSLO.from_dict(
        {"spec": {"resourceUsedThresholdWithBE": {"enable": False, "cpuSuppressThresholdPercent": 0}}}
    )
    assert slo.to_dict()["spec"] == {
        "resourceUsedThresholdWithBE": {"enable": False, "cpuSuppressThresholdPercent": 0}
    }


def test_new_objects_carry_api_version_and_kind():
    obj = Reservation(metadata={"name": "r"}).to_dict()
    assert obj == {
        "apiVersion": "scheduling.koordinator.sh/v1alpha1",
        "kind": "Reservation",
        "metadata": {"name": "r"},
    }


def test_quantities_are_written_canonically():
    obj = {"status": {"allocatable": {"cpu": "0.5", "memory": 1073741824}}}
    assert Reservation.from_dict(obj).to_dict()["status"] == {
        "allocatable": {"cpu": "500m", "memory": "1073741824"}
    }
    typed = Reservation.from_dict(obj)
    assert typed.status is not None
    assert typed.status.allocatable["cpu"] == Quantity.from_milli(500)


@pytest.mark.parametrize(
    ("data", "path"),
    [
        ({"spec": {"ttl": 5}}, "spec.ttl"),
        ({"spec": {"owners": [{"object": {"name": 1}}]}}, "spec.owners[0].object.name"),
        ({"spec": {"allocateOnce": "true"}}, "spec.allocateOnce"),
        ({"status": {"allocatable": {"cpu": "lots"}}}, "status.allocatable.cpu"),
        ({"spec": []}, "spec"),
    ],
)
def test_wrong_types_name_the_json_path(data, path):
    with pytest.raises(ModelError) as info:
        Reservation.from_dict(data)
    assert info.value.path == path


def test_reservation_ttl_semantics():
    assert ReservationSpec().ttl_nanos() == 24 * 3600 * 10**9
    assert ReservationSpec(ttl="0").ttl_nanos() == 0
    assert ReservationSpec(expires="2030-01-01T00:00:00Z").ttl_nanos() is None
    assert ReservationSpec().allocate_once_or_default() is True
