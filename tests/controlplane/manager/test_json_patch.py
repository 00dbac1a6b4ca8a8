"""Hand-built JSON patches: pointer escaping, add vs replace, lists -- checked by applying them."""

from __future__ import annotations

from typing import Any

import jsonpatch
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controlplane.manager.webhooks.jsonpatch import create_patch, escape_token, pointer
from controlplane.manager.webhooks.strategicmerge import POD_RULES, strategic_merge
from testsupport.fake.patching import strategic_merge_patch
from testsupport.fake.schema import builtin_structure


@pytest.mark.parametrize(
    ("token", "escaped"),
    [
        pytest.param("koordinator.sh/qosClass", "koordinator.sh~1qosClass", id="slash"),
        pytest.param("a~b", "a~0b", id="tilde"),
        pytest.param("~1", "~01", id="tilde-before-one-is-not-a-slash"),
        pytest.param("/~", "~1~0", id="both"),
    ],
)
def test_escape_token(token, escaped):
    assert escape_token(token) == escaped
    assert pointer("metadata", "labels", token) == f"/metadata/labels/{escaped}"


@pytest.mark.parametrize(
    ("original", "modified", "patch"),
    [
        pytest.param({"a": 1}, {"a": 1}, [], id="equal"),
        pytest.param(
            {},
            {"labels": {"x": "y"}},
            [{"op": "add", "path": "/labels", "value": {"x": "y"}}],
            id="missing-map-added-whole",
        ),
        pytest.param(
            {"labels": {}},
            {"labels": {"x/y": "z"}},
            [{"op": "add", "path": "/labels/x~1y", "value": "z"}],
            id="key-added-escaped",
        ),
        pytest.param({"a": 1, "b": 2}, {"a": 1}, [{"op": "remove", "path": "/b"}], id="key-removed"),
        pytest.param(
            {"a": 1},
            {"a": 1.0},
            [{"op": "replace", "path": "/a", "value": 1.0}],
            id="int-to-float-is-a-change",
        ),
        pytest.param(
            {"a": 1},
            {"a": True},
            [{"op": "replace", "path": "/a", "value": True}],
            id="int-to-bool-is-a-change",
        ),
        pytest.param(
            {"a": [1, 2]}, {"a": [1, 2, 3]}, [{"op": "add", "path": "/a/2", "value": 3}], id="list-append"
        ),
        pytest.param(
            {"a": [1, 2, 3]},
            {"a": [1]},
            [{"op": "remove", "path": "/a/2"}, {"op": "remove", "path": "/a/1"}],
            id="list-shrink",
        ),
        pytest.param(
            {"a": {"b": 1}}, {"a": [1]}, [{"op": "replace", "path": "/a", "value": [1]}], id="type-change"
        ),
        pytest.param(
            {"a": None},
            {"a": {"x": 1}},
            [{"op": "replace", "path": "/a", "value": {"x": 1}}],
            id="null-to-map",
        ),
    ],
)
def test_create_patch(original, modified, patch):
    assert create_patch(original, modified) == patch
    assert jsonpatch.apply_patch(original, patch) == modified


keys = st.text(alphabet=st.sampled_from("ab/~0_."), min_size=1, max_size=4)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(-5, 5)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=3)
)
documents = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(keys, children, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(
    original=st.dictionaries(keys, documents, max_size=5),
    modified=st.dictionaries(keys, documents, max_size=5),
)
def test_applying_the_patch_gives_the_modified_document(original: dict[str, Any], modified: dict[str, Any]):
    patch = create_patch(original, modified)
    result = jsonpatch.apply_patch(original, patch)
    assert create_patch(result, modified) == []


def reference_patch(original: Any, modified: Any) -> list[dict[str, Any]]:
    """The first implementation, kept as the reference: equality checked before every step down."""

    def same(a: Any, b: Any) -> bool:
        if isinstance(a, dict | list) and isinstance(b, dict | list):
            return a is b or (a == b and orjson.dumps(a) == orjson.dumps(b))
        return type(a) is type(b) and a == b

    def diff(a: Any, b: Any, path: str, out: list[dict[str, Any]]) -> None:
        if isinstance(a, dict) and isinstance(b, dict):
            for key in a:
                if key not in b:
                    out.append({"op": "remove", "path": f"{path}/{escape_token(key)}"})
            for key, value in b.items():
                if key not in a:
                    out.append({"op": "add", "path": f"{path}/{escape_token(key)}", "value": value})
                elif not same(a[key], value):
                    diff(a[key], value, f"{path}/{escape_token(key)}", out)
            return
        if isinstance(a, list) and isinstance(b, list):
            common = min(len(a), len(b))
            for index in range(common):
                if not same(a[index], b[index]):
                    diff(a[index], b[index], f"{path}/{index}", out)
            for index in range(common, len(b)):
                out.append({"op": "add", "path": f"{path}/{index}", "value": b[index]})
            for index in range(len(a) - 1, common - 1, -1):
                out.append({"op": "remove", "path": f"{path}/{index}"})
            return
        if not same(a, b):
            out.append({"op": "replace", "path": path, "value": b})

    operations: list[dict[str, Any]] = []
    if not same(original, modified):
        diff(original, modified, "", operations)
    return operations


@st.composite
def edited(draw: st.DrawFn, value: Any) -> Any:
    """``value`` after random edits, sharing what was not edited (as a copy-on-write copy does)."""
    roll = draw(st.integers(0, 9))
    if roll < 3:
        return value  # shared
    if roll == 3:
        return orjson.loads(orjson.dumps(value))  # equal, not shared
    if roll == 4:
        return draw(documents)  # replaced
    if roll == 5 and isinstance(value, int) and not isinstance(value, bool):
        return draw(st.sampled_from([float(value), value == 1, value]))  # equal in Python, not in JSON
    if isinstance(value, dict):
        copy = {key: draw(edited(item)) for key, item in value.items() if draw(st.integers(0, 5)) > 0}
        copy.update(draw(st.dictionaries(keys, documents, max_size=2)))
        return copy
    if isinstance(value, list):
        items = [draw(edited(item)) for item in value]
        return items[: draw(st.integers(0, len(items)))] + draw(st.lists(documents, max_size=2))
    return value


@settings(max_examples=500, deadline=None)
@given(st.data(), st.dictionaries(keys, documents, max_size=5))
def test_patch_equals_the_reference_on_shared_and_edited_documents(data: st.DataObject, original: Any):
    modified = data.draw(edited(original))
    assert create_patch(original, modified) == reference_patch(original, modified)


POD: dict[str, Any] = {
    "metadata": {"name": "p", "labels": {"a": "1"}, "finalizers": ["x"]},
    "spec": {
        "containers": [
            {
                "name": "main",
                "image": "i",
                "env": [{"name": "A", "value": "1"}],
                "ports": [{"containerPort": 80}],
            },
            {"name": "side", "image": "s"},
        ],
        "tolerations": [{"key": "t", "operator": "Exists"}],
        "volumes": [{"name": "v", "emptyDir": {}}],
    },
}


@pytest.mark.parametrize(
    "patch",
    [
        pytest.param(
            {"spec": {"containers": [{"name": "main", "env": [{"name": "B", "value": "2"}]}]}}, id="merge-env"
        ),
        pytest.param({"spec": {"containers": [{"name": "new", "image": "n"}]}}, id="append-container"),
        pytest.param({"spec": {"containers": [{"name": "side", "$patch": "delete"}]}}, id="delete-container"),
        pytest.param(
            {"spec": {"tolerations": [{"key": "u", "operator": "Exists"}]}}, id="replace-tolerations"
        ),
        pytest.param(
            {"metadata": {"labels": {"a": None, "b": "2"}, "finalizers": ["y"]}}, id="labels-and-finalizers"
        ),
        pytest.param(
            {
                "spec": {"volumes": [{"name": "w", "emptyDir": {}}]},
                "metadata": {"$patch": "replace", "name": "q"},
            },
            id="replace-map",
        ),
        pytest.param(
            {"spec": {"containers": [{"name": "main", "ports": [{"containerPort": 81}]}]}}, id="merge-ports"
        ),
    ],
)
def test_strategic_merge_agrees_with_the_fake_apiserver(patch):
    """The production merge and the fake apiserver's (checked against a real apiserver) agree on pods."""
    assert strategic_merge(POD, patch, POD_RULES) == strategic_merge_patch(
        POD, patch, builtin_structure("Pod")
    )
