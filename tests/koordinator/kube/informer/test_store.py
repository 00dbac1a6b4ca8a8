"""The indexed store: indices follow puts and removals; indexers can be added later."""

from __future__ import annotations

import pytest

from koordinator.kube.informer import Store, index_by_controller, index_by_label, index_by_node_name


def pod(name: str, node: str = "", owner: str = "", app: str = "") -> dict[str, object]:
    meta: dict[str, object] = {"name": name, "namespace": "ns", "labels": {"app": app} if app else {}}
    if owner:
        meta["ownerReferences"] = [{"uid": owner, "controller": True}, {"uid": "other", "controller": False}]
    return {"metadata": meta, "spec": {"nodeName": node} if node else {}}


def test_index_follows_updates_and_removals():
    store: Store[dict[str, object]] = Store({"node": index_by_node_name})
    store.put("ns/a", pod("a", node="n1"))
    store.put("ns/b", pod("b", node="n1"))
    store.put("ns/a", pod("a", node="n2"))
    assert store.index_keys("node", "n1") == {"ns/b"}
    assert store.index_values("node") == ["n1", "n2"]
    store.remove("ns/b")
    assert store.index_values("node") == ["n2"]
    assert store.by_index("node", "n1") == []
    assert store.remove("ns/missing") is None


def test_indexer_added_later_files_existing_records():
    store: Store[dict[str, object]] = Store()
    store.put("ns/a", pod("a", owner="rs-1", app="web"))
    store.add_indexer("controller", index_by_controller)
    store.add_indexer("app", index_by_label("app"))
    assert store.index_keys("controller", "rs-1") == {"ns/a"}
    assert store.index_keys("controller", "other") == set()
    assert store.index_keys("app", "web") == {"ns/a"}
    with pytest.raises(ValueError, match="already exists"):
        store.add_indexer("app", index_by_label("app"))
    with pytest.raises(KeyError, match="no indexer"):
        store.index_keys("zone", "a")
