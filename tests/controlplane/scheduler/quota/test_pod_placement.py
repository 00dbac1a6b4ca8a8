"""Which quota (and tree) counts a pod, and how pods move when quotas come and go."""

from __future__ import annotations

import pytest

from controlplane.scheduler.quota import QuotaForest, QuotaGates, QuotaRef
from koordinator.api.quantity import Quantity
from koordinator.api.resourcelist import is_zero

from .builders import cpu, eq, pod

DEFAULT = "koordinator-default-quota"


def forest_with(*quotas, gates: QuotaGates | None = None) -> QuotaForest:
    forest = QuotaForest(gates=gates)
    for obj in quotas:
        forest.upsert_quota(obj)
    return forest


@pytest.mark.parametrize(
    ("quotas", "pod_kwargs", "expected"),
    [
        pytest.param([eq("team")], {"quota": "team"}, "team", id="label"),
        pytest.param([eq("ns1", namespace="ns1")], {"namespace": "ns1"}, "ns1", id="namespace-named-quota"),
        pytest.param(
            [eq("ns1", namespace="other")], {"namespace": "ns1"}, DEFAULT, id="same-name-other-namespace"
        ),
        pytest.param(
            [eq("zeta", namespaces=["ns1"]), eq("alpha", namespaces=["ns1", "ns2"])],
            {"namespace": "ns1"},
            "alpha",
            id="namespaces-annotation-first-by-name",
        ),
        pytest.param(
            [eq("ns1", namespace="ns1"), eq("team")],
            {"namespace": "ns1", "quota": "team"},
            "team",
            id="label-first",
        ),
        pytest.param([eq("team")], {}, DEFAULT, id="unlabelled"),
        pytest.param([eq("team")], {"quota": "nope"}, DEFAULT, id="unknown-name"),
        pytest.param([], {"quota": "koordinator-system-quota"}, "koordinator-system-quota", id="system"),
    ],
)
def test_pod_resolution(quotas, pod_kwargs, expected):
    forest = forest_with(*quotas)
    assert forest.resolve(pod("p", **pod_kwargs)) == QuotaRef(expected, "")


@pytest.mark.parametrize(
    ("pod_kwargs", "expected"),
    [
        pytest.param({}, None, id="unlabelled-unmanaged"),
        pytest.param({"quota": "nope"}, None, id="unknown-unmanaged"),
        pytest.param({"namespace": "team"}, None, id="namespace-not-read"),
        pytest.param({"quota": "team"}, QuotaRef("team", ""), id="labelled"),
    ],
)
def test_disable_default_quota_leaves_unlabelled_pods_alone(pod_kwargs, expected):
    forest = forest_with(eq("team", namespace="team"), gates=QuotaGates(disable_default_quota=True))
    assert forest.resolve(pod("p", **pod_kwargs)) == expected


def test_default_quota_pods_move_to_a_quota_created_later_and_back_when_it_goes():
    forest = QuotaForest()
    forest.add_pod(pod("p", namespace="ns1", requests=cpu("1"), node="n1", phase="Running"))
    assert forest.placement("ns1/p") == QuotaRef(DEFAULT, "")
    forest.upsert_quota(eq("ns1", namespace="ns1", max=cpu("10")))
    assert forest.placement("ns1/p") == QuotaRef("ns1", "")
    tree = forest.tree("")
    assert tree is not None
    assert tree.used("ns1") == {"cpu": Quantity.parse("1")}
    assert is_zero(tree.used(DEFAULT))
    forest.delete_quota("ns1")
    assert forest.placement("ns1/p") == QuotaRef(DEFAULT, "")
    assert tree.used(DEFAULT) == {"cpu": Quantity.parse("1")}


def test_a_reserved_pod_keeps_its_used_when_its_quota_is_deleted():
    forest = forest_with(eq("team", max=cpu("10")))
    p = pod("p", quota="team", requests=cpu("2"))
    forest.add_pod(p)
    forest.reserve(p)
    forest.delete_quota("team")
    tree = forest.tree("")
    assert tree is not None
    assert forest.placement("default/p") == QuotaRef(DEFAULT, "")
    assert tree.used(DEFAULT) == {"cpu": Quantity.parse("2")}


def test_relabelling_a_pod_moves_it():
    forest = forest_with(eq("a", max=cpu("10")), eq("b", max=cpu("10")))
    forest.add_pod(pod("p", quota="a", requests=cpu("1"), node="n1", phase="Running"))
    forest.update_pod(pod("p", quota="b", requests=cpu("1"), node="n1", phase="Running"))
    tree = forest.tree("")
    assert tree is not None
    assert tree.used("b") == {"cpu": Quantity.parse("1")}
    assert not tree.pods("a")


def multi_tree(ignore_default_tree: bool = False) -> QuotaForest:
    forest = QuotaForest(gates=QuotaGates(multi_quota_tree=True))
    forest.set_cluster_total({"cpu": Quantity.parse("100")})
    forest.upsert_quota(eq("shared", max=cpu("1000"), weight=cpu("1")))
    forest.upsert_quota(
        eq(
            "tree-a-root",
            tree_id="a",
            is_root=True,
            is_parent=True,
            max=cpu("1000"),
            total=cpu("30"),
            ignore_default_tree=ignore_default_tree,
        )
    )
    forest.upsert_quota(eq("a-team", tree_id="a", parent="tree-a-root", max=cpu("1000")))
    forest.add_pod(pod("s", quota="shared", requests=cpu("200")))
    forest.add_pod(pod("t", quota="a-team", requests=cpu("50")))
    return forest


def test_a_tree_root_takes_its_total_out_of_the_default_tree():
    forest = multi_tree()
    default, tree_a = forest.tree(""), forest.tree("a")
    assert default is not None
    assert tree_a is not None
    assert forest.placement("default/t") == QuotaRef("a-team", "a")
    assert default.total == {"cpu": Quantity.parse("70")}
    assert default.runtime("shared") == {"cpu": Quantity.parse("70")}
    assert tree_a.total == {"cpu": Quantity.parse("30")}
    assert tree_a.runtime("tree-a-root") == tree_a.runtime("a-team") == {"cpu": Quantity.parse("30")}
    assert default.resource_keys == ("cpu",)
    assert "a-team" not in default.quota_names()


def test_ignore_default_tree_leaves_the_default_total_alone():
    forest = multi_tree(ignore_default_tree=True)
    default = forest.tree("")
    assert default is not None
    assert default.runtime("shared") == {"cpu": Quantity.parse("100")}


def test_deleting_the_tree_root_gives_its_total_back():
    forest = multi_tree()
    forest.delete_quota("tree-a-root")
    default, tree_a = forest.tree(""), forest.tree("a")
    assert default is not None
    assert tree_a is not None
    assert default.runtime("shared") == {"cpu": Quantity.parse("100")}
    assert tree_a.total == {}


def test_without_the_gate_tree_ids_are_ignored():
    forest = QuotaForest()
    forest.upsert_quota(eq("a-team", tree_id="a", max=cpu("10")))
    assert forest.resolve(pod("p", quota="a-team")) == QuotaRef("a-team", "")
    assert forest.tree("a") is None


def test_replace_quotas_forgets_the_missing_ones():
    forest = forest_with(eq("a", max=cpu("10")), eq("b", max=cpu("10")))
    forest.replace_quotas([eq("b", max=cpu("10")), eq("c", max=cpu("10"))])
    assert forest.quota_names() == ["b", "c", DEFAULT, "koordinator-system-quota"]
