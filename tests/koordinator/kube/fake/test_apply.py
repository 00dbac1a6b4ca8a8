"""Field ownership bookkeeping: fieldsets, FieldsV1 encoding, Update ownership transfer."""

from __future__ import annotations

from typing import Any

from testsupport.fake import apply as ssa
from testsupport.fake.schema import builtin_structure

POD = builtin_structure("Pod")
NOW = "2026-01-01T00:00:00Z"


def test_fieldset_of_an_applied_pod():
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "labels": {"a": "1"}, "finalizers": ["f"]},
        "spec": {
            "containers": [{"name": "c", "ports": [{"containerPort": 80, "protocol": "TCP"}]}],
            "tolerations": [],
        },
    }
    fields = ssa.to_fields_v1(ssa.fieldset(pod, POD))
    assert fields == {
        "f:metadata": {"f:finalizers": {'v:"f"': {}}, "f:labels": {"f:a": {}}},
        "f:spec": {
            "f:containers": {
                'k:{"name":"c"}': {
                    ".": {},
                    "f:name": {},
                    "f:ports": {
                        'k:{"containerPort":80,"protocol":"TCP"}': {
                            ".": {},
                            "f:containerPort": {},
                            "f:protocol": {},
                        }
                    },
                }
            },
            "f:tolerations": {},
        },
    }
    assert ssa.from_fields_v1(fields) == ssa.fieldset(pod, POD)


def test_update_takes_ownership_of_what_it_changed():
    old: dict[str, Any] = {"metadata": {"name": "x"}, "data": {"a": "1", "b": "2"}}
    ssa.record_update(None, old, POD, "creator", "v1", NOW)
    new: dict[str, Any] = {"metadata": {**old["metadata"]}, "data": {"a": "10", "b": "2", "c": "3"}}
    ssa.record_update(old, new, POD, "editor", "v1", NOW)
    owners = {m["manager"]: m["fieldsV1"] for m in new["metadata"]["managedFields"]}
    assert owners == {
        "creator": {"f:data": {".": {}, "f:b": {}}},
        "editor": {"f:data": {"f:a": {}, "f:c": {}}},
    }


def test_removed_fields_leave_every_manager():
    old: dict[str, Any] = {"metadata": {"name": "x"}, "data": {"a": "1"}}
    ssa.record_update(None, old, POD, "creator", "v1", NOW)
    new: dict[str, Any] = {"metadata": {**old["metadata"]}, "data": {}}
    ssa.record_update(old, new, POD, "editor", "v1", NOW)
    assert [(m["manager"], m["fieldsV1"]) for m in new["metadata"]["managedFields"]] == [
        ("creator", {"f:data": {}})
    ]
