"""Shape checks: the compiled verdict and the path-naming walk agree on every value.

:func:`~controlplane.manager.webhooks.objects.check` first asks a predicate compiled from
the spec, and walks the value again only to name the problem of one it refuses; both must
refuse exactly the same values, or a malformed object would slip through (or a good one
be refused with no message).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controlplane.manager.webhooks import objects
from controlplane.manager.webhooks.objects import ObjectError, check

SPECS = {
    "pod": objects.POD,
    "node": objects.NODE,
    "configmap": objects.CONFIG_MAP,
    "elasticquota": objects.ELASTIC_QUOTA,
    "reservation": objects.RESERVATION,
    "profile": objects.CLUSTER_COLOCATION_PROFILE,
    "quota-profile": objects.ELASTIC_QUOTA_PROFILE,
}

scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**40), 2**40)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from(["", "1", "500m", "2Gi", "abc", "1e3", "-1", "99999999999999999999Ei"])
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["a", "cpu", "k"]), inner, max_size=3)
    ),
    max_leaves=6,
)


def full(spec: Any) -> Any:
    """A value that passes the spec and fills every field it names, at every depth."""
    if isinstance(spec, objects._Object):
        return {key: full(child) for key, child in spec.fields.items()}
    if isinstance(spec, objects._Map):
        return {"a": full(spec.values), "b/c": full(spec.values)}
    if isinstance(spec, objects._List):
        return [full(spec.items), full(spec.items)]
    return {"string": "x", "bool": True, "int32": 7, "quantity": "500m"}.get(spec.kind, 1.5)


def spots(spec: Any, value: Any, path: tuple[Any, ...] = ()) -> list[tuple[tuple[Any, ...], Any]]:
    """Every (path, spec) in ``value`` where it still has the spec's shape, the root included."""
    found = [(path, spec)]
    if isinstance(spec, objects._Object) and isinstance(value, dict):
        for key, child in spec.fields.items():
            if key in value:
                found += spots(child, value[key], (*path, key))
    elif isinstance(spec, objects._Map) and isinstance(value, dict):
        for key, item in value.items():
            found += spots(spec.values, item, (*path, key))
    elif isinstance(spec, objects._List) and isinstance(value, list):
        for index, item in enumerate(value):
            found += spots(spec.items, item, (*path, index))
    return found


def edges(spec: Any) -> list[Any]:
    """Values at the edge of what the spec accepts, on either side."""
    if isinstance(spec, objects._Object):
        return [None, {}, [], "x", 1]
    if isinstance(spec, objects._Map):
        return [None, {}, {"k": None}, {"k": 1}, {"k": [1]}, [], "x"]
    if isinstance(spec, objects._List):
        return [None, [], [None], [None, None], [1], {}, "x"]
    by_kind: dict[str, list[Any]] = {
        "string": [None, "", 1, True, 1.5, [], {}],
        "bool": [None, False, 0, "true"],
        "int32": [None, 0, 2**31 - 1, 2**31, -(2**31), -(2**31) - 1, True, 1.5, "3"],
        "quantity": [None, "0", "1e3", "-1", "abc", "", 5, 1.5, True, [], "99999999999999999999Ei"],
    }
    return by_kind.get(spec.kind, [None, 1, "x", [], {}])


@st.composite
def corrupted(draw: st.DrawFn, spec: Any) -> Any:
    """The full value with up to four spots (any depth) replaced by edge values or removed."""
    value = full(spec)
    for _ in range(draw(st.integers(0, 4))):
        places = spots(spec, value)
        path, at = draw(st.sampled_from(places))
        replacement = copy.deepcopy(draw(st.sampled_from(edges(at)) | values))
        if not path:
            value = replacement
            continue
        parent = value
        for step in path[:-1]:
            parent = parent[step]
        if isinstance(parent, dict) and draw(st.integers(0, 5)) == 0:
            del parent[path[-1]]
        else:
            parent[path[-1]] = replacement
    return value


def agree(spec: Any, value: Any) -> None:
    walk_refuses = True
    try:
        objects._check(value, spec, "")
    except ObjectError:
        pass
    else:
        walk_refuses = False
    assert objects._accepts(spec)(value) is (not walk_refuses), value
    if isinstance(value, dict):
        if walk_refuses:
            with pytest.raises(ObjectError, match="cannot decode it: "):
                check(value, spec, "it")
        else:
            assert check(value, spec, "it") is value


@pytest.mark.parametrize("name", sorted(SPECS))
def test_compiled_predicate_agrees_with_the_walk(name):
    spec = SPECS[name]

    @settings(max_examples=200, deadline=None, database=None)
    @given(corrupted(spec))
    def run(value: Any) -> None:
        agree(spec, value)

    run()


@pytest.mark.parametrize(
    ("value", "message"),
    [
        pytest.param(
            {"spec": {"containers": [None]}},
            "cannot decode pod: spec.containers[0]: cannot decode null as an object",
            id="null-container",
        ),
        pytest.param(
            {"spec": {"priority": 2**31}},
            "cannot decode pod: spec.priority: 2147483648 overflows int32",
            id="int32-overflow",
        ),
        pytest.param(
            {"spec": {"containers": [{"resources": {"limits": {"cpu": "abc"}}}]}},
            "cannot decode pod: spec.containers[0].resources.limits[cpu]: ",
            id="bad-quantity",
        ),
        pytest.param(
            {"metadata": {"labels": {"a/b": 1}}},
            "cannot decode pod: metadata.labels[a/b]: cannot decode number as a string",
            id="label-not-a-string",
        ),
    ],
)
def test_refused_values_are_named_by_their_path(value, message):
    with pytest.raises(ObjectError) as refused:
        check(value, objects.POD, "pod")
    assert str(refused.value).startswith(message)
