"""Custom resources are accepted or refused as the apiserver does, with its field paths and wording.

The expected error texts in ``data/apiserver_errors.json`` were recorded from a real
kube-apiserver (v1.34) serving the generated CRDs; the validator must produce the same set.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from koordinator.api.schema import CRDValidator, ErrorType, FieldError, validator_for
from koordinator.api.schema.structural import apply_defaults, prune, validate
from tests.koordinator.api.crd_cases import (
    ALL_SAMPLES,
    BASES,
    DATA,
    INVALID,
    RESERVATION,
    SEED_SAMPLES,
    sample_id,
)

APISERVER_ERRORS: dict[str, list[str]] = json.loads((DATA / "apiserver_errors.json").read_text())


def _validator(obj: dict[str, Any]) -> CRDValidator:
    validator = validator_for(obj["apiVersion"], obj["kind"])
    assert validator is not None, f"no CRD serves {obj['apiVersion']}/{obj['kind']}"
    return validator


def test_seed_document_has_six_samples():
    assert [s["kind"] for s in SEED_SAMPLES] == [
        "Recommendation",
        "ClusterColocationProfile",
        "ElasticQuotaProfile",
        "Reservation",
        "NodeMetric",
        "NodeSLO",
    ]


@pytest.mark.parametrize("obj", ALL_SAMPLES + BASES, ids=[sample_id(o) for o in ALL_SAMPLES + BASES])
def test_valid_objects_are_accepted(obj):
    stored, errors = _validator(obj).admit(obj)
    assert errors == []
    assert stored["metadata"] == obj["metadata"]


def test_there_are_at_least_forty_invalid_cases():
    assert len(INVALID) >= 40
    assert len({case.id for case in INVALID}) == len(INVALID)


@pytest.mark.parametrize("case", INVALID, ids=[case.id for case in INVALID])
def test_invalid_object_is_refused_naming_the_field(case):
    _, errors = _validator(case.obj).admit(case.obj)
    matching = [e for e in errors if e.field == case.field and e.reason == case.reason]
    assert matching, [str(e) for e in errors]
    assert str(matching[0]).startswith(case.field + ": ")


@pytest.mark.parametrize("case", INVALID, ids=[case.id for case in INVALID])
def test_error_text_matches_the_apiserver(case):
    _, errors = _validator(case.obj).admit(case.obj)
    assert sorted(str(e) for e in errors) == sorted(APISERVER_ERRORS[case.id])


def test_ttl_default_does_not_break_expires_only_reservations():
    obj = copy.deepcopy(RESERVATION)
    del obj["spec"]["ttl"]
    obj["spec"]["expires"] = "2030-01-01T00:00:00Z"
    stored, errors = _validator(obj).admit(obj)
    assert errors == []
    assert "ttl" not in stored["spec"]


def test_defaults_are_applied_inside_existing_objects_only():
    stored, _ = _validator(RESERVATION).admit(RESERVATION)
    assert stored["spec"]["allocateOnce"] is True
    explicit = copy.deepcopy(RESERVATION)
    explicit["spec"]["allocateOnce"] = False
    assert _validator(explicit).admit(explicit)[0]["spec"]["allocateOnce"] is False


def test_unknown_fields_and_nulls_are_pruned():
    obj = copy.deepcopy(RESERVATION)
    obj["spec"]["bogus"] = 1
    obj["spec"]["expires"] = None
    obj["spec"]["template"]["anything"] = {"kept": True}
    obj["extra"] = "dropped"
    stored, errors = _validator(obj).admit(obj)
    assert errors == []
    assert "bogus" not in stored["spec"]
    assert "expires" not in stored["spec"]
    assert "extra" not in stored
    assert stored["spec"]["template"]["anything"] == {"kept": True}


def test_wrong_api_version_or_kind_is_refused():
    validator = _validator(RESERVATION)
    _, errors = validator.admit({**RESERVATION, "apiVersion": "scheduling.koordinator.sh/v1"})
    assert [e.field for e in errors] == ["apiVersion"]
    assert validator.validate({**RESERVATION, "kind": "Pod"})[0].field == "kind"


def test_unknown_kinds_have_no_validator():
    assert validator_for("v1", "Pod") is None
    assert validator_for("scheduling.koordinator.sh/v1alpha1", "Nothing") is None


def test_nrt_serves_both_versions_and_stores_v1alpha1():
    validator = validator_for("topology.node.k8s.io/v1alpha2", "NodeResourceTopology")
    assert validator is not None
    assert validator.versions == ("v1alpha1", "v1alpha2")
    assert validator.storage_version == "v1alpha1"


def test_transition_rules_only_run_on_update():
    schema = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "properties": {"name": {"type": "string"}},
                "x-kubernetes-validations": [
                    {"rule": "self.name == oldSelf.name", "message": "name is immutable"}
                ],
            }
        },
    }
    assert validate({"spec": {"name": "a"}}, schema) == []
    assert validate({"spec": {"name": "a"}}, schema, old={"spec": {"name": "a"}}) == []
    errors = validate({"spec": {"name": "b"}}, schema, old={"spec": {"name": "a"}})
    assert [str(e) for e in errors] == ['spec: Invalid value: "object": name is immutable']


def test_list_type_set_and_map_reject_duplicates():
    schema = {
        "type": "object",
        "properties": {
            "tags": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"},
            "ports": {
                "type": "array",
                "items": {"type": "object", "properties": {"port": {"type": "integer"}}},
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["port"],
            },
        },
    }
    errors = validate({"tags": ["a", "a"], "ports": [{"port": 1}, {"port": 1}]}, schema)
    assert {(e.type, e.field) for e in errors} == {
        (ErrorType.DUPLICATE, "tags[1]"),
        (ErrorType.DUPLICATE, "ports[1]"),
    }


def test_prune_and_default_do_not_mutate_their_input():
    schema = {"type": "object", "properties": {"a": {"type": "integer", "default": 1}}}
    obj = {"b": 2}
    assert prune(obj, schema) == {}
    assert apply_defaults({}, schema) == {"a": 1}
    assert obj == {"b": 2}


def test_field_error_rendering():
    assert str(FieldError.required("spec.template")) == "spec.template: Required value"
    assert (
        str(FieldError.not_supported("spec.mode", "X", ["A", "B"]))
        == 'spec.mode: Unsupported value: "X": supported values: "A", "B"'
    )
    assert FieldError.invalid("spec.x", 5, "too big").reason == "FieldValueInvalid"
