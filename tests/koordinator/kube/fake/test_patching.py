"""Patch formats applied by the fake apiserver: JSON patch, merge patch, strategic merge directives."""

from __future__ import annotations

from typing import Any

import pytest

from testsupport.fake.patching import PatchError, json_patch, merge_patch, strategic_merge_patch
from testsupport.fake.schema import builtin_structure

POD = builtin_structure("Pod")


@pytest.mark.parametrize(
    ("doc", "ops", "result"),
    [
        pytest.param(
            {"a": [1, 2]}, [{"op": "add", "path": "/a/-", "value": 3}], {"a": [1, 2, 3]}, id="append"
        ),
        pytest.param(
            {"a": [1, 2]}, [{"op": "add", "path": "/a/0", "value": 0}], {"a": [0, 1, 2]}, id="insert"
        ),
        pytest.param(
            {"a": {"b": 1}}, [{"op": "move", "from": "/a/b", "path": "/c"}], {"a": {}, "c": 1}, id="move"
        ),
        pytest.param({"a/b": 1}, [{"op": "remove", "path": "/a~1b"}], {}, id="escaped-slash"),
        pytest.param(
            {"a~b": 1}, [{"op": "replace", "path": "/a~0b", "value": 2}], {"a~b": 2}, id="escaped-tilde"
        ),
    ],
)
def test_json_patch(doc, ops, result):
    assert json_patch(doc, ops) == result


@pytest.mark.parametrize(
    "ops",
    [
        pytest.param([{"op": "remove", "path": "/missing"}], id="remove-missing"),
        pytest.param([{"op": "add", "path": "/a/5", "value": 1}], id="index-out-of-range"),
        pytest.param([{"op": "frobnicate", "path": "/a"}], id="unknown-op"),
        pytest.param({"op": "add"}, id="not-a-list"),
        pytest.param([{"op": "add", "path": "a", "value": 1}], id="pointer-without-slash"),
    ],
)
def test_json_patch_errors(ops):
    with pytest.raises(PatchError):
        json_patch({"a": [1]}, ops)


def test_merge_patch_is_rfc7386():
    assert merge_patch({"a": {"b": 1, "c": 2}, "l": [1]}, {"a": {"b": None, "d": 3}, "l": [2]}) == {
        "a": {"c": 2, "d": 3},
        "l": [2],
    }
    assert merge_patch({"a": 1}, {"a": {"x": None}}) == {"a": {}}


def test_strategic_merge_directives():
    original: dict[str, Any] = {
        "metadata": {"finalizers": ["a", "b"], "labels": {"x": "1", "y": "2"}},
        "spec": {
            "containers": [
                {"name": "c1", "image": "i1", "env": [{"name": "A", "value": "1"}]},
                {"name": "c2", "image": "i2"},
            ],
            "volumes": [{"name": "v1", "emptyDir": {}}],
            "tolerations": [{"key": "t1"}],
        },
    }
    patch = {
        "$setElementOrder/containers": [{"name": "c1"}, {"name": "c2"}],
        "metadata": {"$deleteFromPrimitiveList/finalizers": ["a"], "labels": {"$patch": "replace", "z": "3"}},
        "spec": {
            "containers": [
                {"name": "c2", "$patch": "delete"},
                {"name": "c1", "env": [{"name": "B", "value": "2"}]},
            ],
            "volumes": [{"$patch": "replace"}, {"name": "v2", "configMap": {"name": "cm"}}],
            "tolerations": [{"key": "t2"}],
        },
    }
    merged = strategic_merge_patch(original, patch, POD)
    assert merged["metadata"] == {"finalizers": ["b"], "labels": {"z": "3"}}
    assert merged["spec"]["containers"] == [
        {"name": "c1", "image": "i1", "env": [{"name": "B", "value": "2"}, {"name": "A", "value": "1"}]}
    ]
    assert merged["spec"]["volumes"] == [{"name": "v2", "configMap": {"name": "cm"}}]
    assert merged["spec"]["tolerations"] == [{"key": "t2"}]
    assert original["spec"]["containers"][1]["name"] == "c2", "the input is left intact"


def test_strategic_merge_retain_keys_and_map_delete():
    original = {
        "spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}, "x": {"y": 1}}
    }
    patch = {"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}, "x": {"$patch": "delete"}}}
    assert strategic_merge_patch(original, patch, POD) == {"spec": {"strategy": {"type": "Recreate"}}}


def test_strategic_merge_needs_the_merge_key():
    with pytest.raises(PatchError, match="merge key"):
        strategic_merge_patch({"spec": {"containers": []}}, {"spec": {"containers": [{"image": "x"}]}}, POD)
