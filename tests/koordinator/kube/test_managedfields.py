"""managedFields of built-in objects left out before decoding: exactly them, and only where the
encoding says where they end."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from koordinator.kube import resources as res
from koordinator.kube.informer import Consumer, InformerFactory
from koordinator.kube.managedfields import strip_managed_fields
from tests.koordinator.kube.builders import pod
from tests.koordinator.kube.conftest import WIDGETS, Backend

Obj = dict[str, Any]

# strings that look like the structure the cut looks for (quotes are escaped in JSON)
_TRICKY = st.sampled_from(['}]},"spec":', '}],"', "]", "}", "[", '"', "\\", ",", "f:spec", 'k:{"a":1}'])
_TEXT = st.lists(st.one_of(_TRICKY, st.text(max_size=6)), max_size=4).map("".join)
_FIELDS: st.SearchStrategy[Any] = st.recursive(
    st.just({}), lambda inner: st.dictionaries(_TEXT.map(lambda t: f"f:{t}"), inner, max_size=3), max_leaves=8
)
_ENTRY = st.fixed_dictionaries(
    {
        "manager": _TEXT,
        "operation": st.sampled_from(["Update", "Apply"]),
        "apiVersion": st.just("v1"),
        "time": st.just("2026-01-01T00:00:00Z"),
        "fieldsType": st.just("FieldsV1"),
        "fieldsV1": _FIELDS,
    }
)


def go_ordered(name: str, labels: dict[str, str], managed: list[Obj], finalizers: list[str]) -> Obj:
    """A built-in object as the apiserver encodes it: ObjectMeta fields in declaration order."""
    meta: Obj = {"name": name, "namespace": "ns", "uid": "u-" + name, "labels": labels}
    if finalizers:
        meta["finalizers"] = finalizers
    meta["managedFields"] = managed
    return {"metadata": meta, "spec": {"containers": [{"name": "c", "args": list(labels.values())}]}}


def without_managed_fields(obj: Obj) -> Obj:
    stripped = copy.deepcopy(obj)
    stripped["metadata"].pop("managedFields", None)
    return stripped


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.dictionaries(_TEXT, _TEXT, max_size=3),
            st.lists(_ENTRY, min_size=1, max_size=3),
            st.lists(_TEXT, max_size=2),
        ),
        min_size=1,
        max_size=4,
    )
)
def test_a_list_of_built_in_objects_decodes_as_without_managed_fields(objects):
    items = [go_ordered(f"p{i}", labels, managed, fin) for i, (labels, managed, fin) in enumerate(objects)]
    page = {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "7"}, "items": items}
    stripped = orjson.loads(strip_managed_fields(orjson.dumps(page)))
    assert stripped == {**page, "items": [without_managed_fields(o) for o in items]}


@pytest.mark.parametrize(
    "obj",
    [
        pytest.param(
            {"metadata": {"name": "a", "managedFields": [{"manager": "m"}], "finalizers": ["x"]}, "spec": {}},
            id="another-field-after-managedFields",
        ),
        pytest.param(
            {
                "apiVersion": "x/v1",
                "metadata": {"managedFields": [{"manager": "m"}], "name": "a"},
                "spec": {},
            },
            id="custom-resource-sorted-keys",
        ),
        pytest.param({"metadata": {"name": "a", "managedFields": []}, "spec": {}}, id="empty"),
        pytest.param(
            {"metadata": {"name": "a", "managedFields": [{"manager": "m"}]}, "data": {}}, id="no-spec"
        ),
        pytest.param(
            {
                "metadata": {"name": "n", "managedFields": [{"manager": "m"}]},
                # status before spec, ending in an array: its end must not pass for the metadata's
                "status": {"allocatable": {"cpu": "4"}, "conditions": [{"type": "Ready"}]},
                "spec": {},
            },
            id="status-before-spec",
        ),
    ],
)
def test_objects_whose_encoding_does_not_say_where_they_end_are_left_whole(obj):
    data = orjson.dumps({"items": [obj]})
    assert strip_managed_fields(data) == data


async def test_built_in_objects_reach_informers_without_managed_fields(backend: Backend):
    """On the real apiserver, which writes managedFields on every create, and on the fake."""
    created = await backend.client.create(res.PODS, pod("p", backend.namespace))
    widget = {
        "apiVersion": WIDGETS.api_version,
        "kind": "Widget",
        "metadata": {"name": "w"},
        "spec": {"size": 1},
    }
    await backend.client.create(WIDGETS, widget, backend.namespace)
    full = (await backend.client.list_all(res.PODS, backend.namespace))["items"][0]
    assert full["metadata"]["managedFields"], "the apiserver records field ownership"
    factory = InformerFactory(backend.client, freeze_after_sync=False)
    pods: Consumer[Obj] = factory.informer(res.PODS, namespace=backend.namespace).add_consumer()
    widgets: Consumer[Obj] = factory.informer(WIDGETS, namespace=backend.namespace).add_consumer()
    factory.start()
    try:
        async with asyncio.timeout(30):
            await factory.wait_for_sync()
        cached = pods.store.get(f"{backend.namespace}/p")
        assert cached is not None
        assert cached["metadata"]["uid"] == created["metadata"]["uid"]
        # list items of built-in kinds come without apiVersion and kind; the informer adds them
        assert without_managed_fields(full) == {
            k: v for k, v in cached.items() if k not in ("apiVersion", "kind")
        }
        [custom] = widgets.store.values()
        assert custom["metadata"]["managedFields"], "custom resources are left whole"
    finally:
        await factory.stop()
