"""ElasticQuota webhooks: defaults on create, tree invariants on create/update/delete, admitted overlay."""

from __future__ import annotations

from typing import Any

import pytest

from controlplane.manager.webhooks.context import ClusterError
from controlplane.manager.webhooks.elasticquota.topology import QuotaInfo, QuotaTopology
from koordinator.api.quantity import Quantity
from tests.controlplane.manager.builders import Admission, apply, make_pod, patch_of, quota, review

MUTATE = "/mutate-scheduling-sigs-k8s-io-v1alpha1-elasticquota"
VALIDATE = "/validate-scheduling-sigs-k8s-io-v1alpha1-elasticquota"
PARENT = "quota.scheduling.koordinator.sh/parent"
IS_PARENT = "quota.scheduling.koordinator.sh/is-parent"
TREE_ID = "quota.scheduling.koordinator.sh/tree-id"
SHARED_WEIGHT = "quota.scheduling.koordinator.sh/shared-weight"

TREE = [
    quota(
        "root-a",
        max={"cpu": "100", "memory": "100Gi"},
        min={"cpu": "50", "memory": "50Gi"},
        labels={IS_PARENT: "true", TREE_ID: "t1"},
    ),
    quota(
        "child-1",
        max={"cpu": "60", "memory": "60Gi"},
        min={"cpu": "30", "memory": "30Gi"},
        labels={PARENT: "root-a", TREE_ID: "t1"},
    ),
]


def refused(message: str) -> dict[str, Any]:
    return {"metadata": {}, "message": message, "code": 400}


async def test_defaults_are_filled_on_create():
    new = quota("child-2", max={"cpu": "10", "memory": "10Gi"}, labels={PARENT: "root-a"})
    response = await Admission(TREE).call(MUTATE, review(new))
    assert patch_of(response) == [
        {"op": "add", "path": "/metadata/labels/quota.scheduling.koordinator.sh~1tree-id", "value": "t1"},
        {
            "op": "add",
            "path": "/metadata/annotations",
            "value": {SHARED_WEIGHT: '{"cpu":"10","memory":"10Gi"}'},
        },
    ]


async def test_parent_defaults_to_root_and_shared_weight_keys_follow_max():
    new = quota(
        "solo", max={"cpu": "4", "memory": "8Gi"}, annotations={SHARED_WEIGHT: '{"cpu":"2","gpu":"1"}'}
    )
    mutated = apply(new, await Admission().call(MUTATE, review(new)))
    assert mutated["metadata"]["labels"] == {PARENT: "koordinator-root-quota"}
    assert mutated["metadata"]["annotations"] == {SHARED_WEIGHT: '{"cpu":"2","memory":"8Gi"}'}


@pytest.mark.parametrize(
    ("new", "message"),
    [
        pytest.param(
            quota("orphan", max={"cpu": "1"}, labels={PARENT: "nope"}),
            "fill quota orphan failed, parent not exist",
            id="unknown-parent",
        ),
        pytest.param(
            quota("solo", max={"cpu": "4"}, annotations={SHARED_WEIGHT: "[1]"}),
            "fillDefaultQuotaInfo unmarshal sharedWeight failed:"
            f"quota.Annotation[{SHARED_WEIGHT}]'s value is invalid: expected a JSON object of quantities",
            id="unreadable-shared-weight",
        ),
    ],
)
async def test_mutating_refusals(new, message):
    response = await Admission(TREE).call(MUTATE, review(new))
    assert response["allowed"] is False
    assert response["status"] == refused(message)


async def test_unknown_parent_with_a_tree_id_is_left_to_the_validating_webhook():
    """Only a quota that would inherit the tree id needs its parent when defaults are filled."""
    new = quota("orphan", max={"cpu": "1"}, labels={PARENT: "nope", TREE_ID: "t1"})
    assert (await Admission(TREE).call(MUTATE, review(new)))["allowed"] is True


@pytest.mark.parametrize(
    ("new", "message"),
    [
        pytest.param(
            quota(
                "child-2",
                max={"cpu": "10", "memory": "10Gi"},
                min={"cpu": "5", "memory": "5Gi"},
                labels={PARENT: "root-a", TREE_ID: "t1"},
            ),
            None,
            id="fits",
        ),
        pytest.param(
            quota("child-1", max={"cpu": "1", "memory": "1Gi"}),
            "AddQuota quota already exist:child-1",
            id="duplicate-name",
        ),
        pytest.param(
            quota("neg", max={"cpu": "-1"}),
            "neg quota.Spec.Max's value < 0, in dimensions :[cpu]",
            id="negative-max",
        ),
        pytest.param(
            quota("m", max={"cpu": "1"}, min={"memory": "1Gi"}),
            "resourceKey memory of quota m is included in min, which is not included in max",
            id="min-key-not-in-max",
        ),
        pytest.param(
            # Upstream prints Go's %v of the lists, which shows each Quantity's internal struct
            # ({{2 0} {<nil>}  DecimalSI}); the words are upstream's, the quantities readable.
            quota("m", max={"cpu": "1", "memory": "2Gi"}, min={"cpu": "2", "memory": "1Gi"}),
            "resourceKey cpu of quota m min :map[cpu:2 memory:1Gi] > max,map[cpu:1 memory:2Gi]",
            id="min-above-max",
        ),
        pytest.param(
            quota("orphan", max={"cpu": "1", "memory": "1Gi"}, labels={PARENT: "nope"}),
            "orphan has parentName nope but not find parentInfo in quotaInfoMap",
            id="unknown-parent",
        ),
        pytest.param(
            quota("grandchild", max={"cpu": "1", "memory": "1Gi"}, labels={PARENT: "child-1", TREE_ID: "t1"}),
            "grandchild has parentName child-1 but the parentQuotaInfo's IsParent is false",
            id="parent-is-not-a-parent",
        ),
        pytest.param(
            quota("child-2", max={"cpu": "10"}, labels={PARENT: "root-a", TREE_ID: "t1"}),
            "failed to check sub and parent group quotaKey, err: checkSubAndParentGroupQuotaKey failed: "
            "root-a's max keys are not the same with child-2's",
            id="max-keys-differ",
        ),
        pytest.param(
            quota(
                "child-2",
                max={"cpu": "40", "memory": "10Gi"},
                min={"cpu": "30"},
                labels={PARENT: "root-a", TREE_ID: "t1"},
            ),
            "checkMinQuotaSum all brothers' MinQuota > parent MinQuota, parent: root-a",
            id="siblings-min-above-parent-min",
        ),
        pytest.param(
            quota("child-2", max={"cpu": "10", "memory": "10Gi"}, labels={PARENT: "root-a", TREE_ID: "t2"}),
            "child-2 tree id is different from parent root-a, [t2] vs [t1]",
            id="tree-id-differs-from-parent",
        ),
        pytest.param(
            quota(
                "strict",
                max={"cpu": "1"},
                annotations={"quota.scheduling.koordinator.sh/max-strict-check-resource-keys": '["cpu"]'},
                used={"cpu": "2"},
            ),
            "resourceKey cpu of quota strict max 1 < used 2",
            id="strict-max-below-used",
        ),
        pytest.param(
            quota(
                "greedy",
                max={"cpu": "1"},
                annotations={"quota.scheduling.koordinator.sh/namespaces": '["team-x"]'},
            ),
            "AddQuota quota greedy's annotation namespace team-x is already bound to quota owner",
            id="namespace-already-bound",
        ),
        pytest.param(
            quota(
                "child-1",
                max={"cpu": "1"},
                min={"cpu": "2"},
                annotations={"quota.scheduling.koordinator.sh/namespaces": '["team-x"]'},
            ),
            "AddQuota quota already exist:child-1",
            id="name-checked-before-namespaces",
        ),
        pytest.param(
            quota(
                "greedy",
                max={"cpu": "1"},
                min={"cpu": "2"},
                annotations={"quota.scheduling.koordinator.sh/namespaces": '["team-x"]'},
            ),
            "AddQuota quota greedy's annotation namespace team-x is already bound to quota owner",
            id="namespaces-checked-before-own-values",
        ),
    ],
)
async def test_create_invariants(new, message):
    objects = [
        *TREE,
        quota(
            "owner",
            max={"cpu": "1"},
            annotations={"quota.scheduling.koordinator.sh/namespaces": '["team-x"]'},
        ),
    ]
    response = await Admission(objects).call(VALIDATE, review(new))
    assert response["allowed"] is (message is None)
    if message:
        assert response["status"] == refused(message)


async def test_child_max_may_exceed_parent_max():
    """Upstream has no child.max <= parent.max rule; max sums are unconstrained."""
    big = quota("big", max={"cpu": "1000", "memory": "1000Gi"}, labels={PARENT: "root-a", TREE_ID: "t1"})
    assert (await Admission(TREE).call(VALIDATE, review(big)))["allowed"] is True


async def test_update_key_set_may_shrink_with_gate():
    shrink = quota("child-2", max={"cpu": "10"}, labels={PARENT: "root-a", TREE_ID: "t1"})
    admission = Admission(TREE, feature_gates="ElasticQuotaEnableUpdateResourceKey=true")
    assert (await admission.call(VALIDATE, review(shrink)))["allowed"] is True


@pytest.mark.parametrize(
    ("old", "new", "pods", "message"),
    [
        pytest.param(TREE[1], {**TREE[1], "status": {"used": {"cpu": "1"}}}, [], None, id="unrelated-change"),
        pytest.param(
            TREE[1],
            quota(
                "child-1",
                max={"cpu": "60", "memory": "60Gi"},
                min={"cpu": "30", "memory": "30Gi"},
                labels={PARENT: "root-a", TREE_ID: "t9"},
            ),
            [],
            "child-1 tree id changed [t1] vs [t9]",
            id="tree-id-immutable",
        ),
        pytest.param(
            TREE[0],
            quota(
                "root-a",
                max={"cpu": "100", "memory": "100Gi"},
                min={"cpu": "50", "memory": "50Gi"},
                labels={TREE_ID: "t1"},
            ),
            [],
            "quota has children, isParent is forbidden to modify as false, quotaName:root-a",
            id="parent-with-children-stays-parent",
        ),
        pytest.param(
            TREE[1],
            quota(
                "child-1",
                max={"cpu": "60", "memory": "60Gi"},
                min={"cpu": "30", "memory": "30Gi"},
                labels={PARENT: "root-a", TREE_ID: "t1", IS_PARENT: "true"},
            ),
            [make_pod("worker").labels(**{"quota.scheduling.koordinator.sh/name": "child-1"}).build()],
            "quota has bound pods, isParent is forbidden to modify as true, quotaName: child-1",
            id="leaf-with-pods-stays-leaf",
        ),
        pytest.param(
            TREE[1],
            quota(
                "child-1",
                max={"cpu": "60", "memory": "60Gi"},
                min={"cpu": "60", "memory": "30Gi"},
                labels={PARENT: "root-a", TREE_ID: "t1"},
            ),
            [],
            "checkMinQuotaSum all brothers' MinQuota > parent MinQuota, parent: root-a",
            id="min-grows-past-parent",
        ),
    ],
)
async def test_update_invariants(old, new, pods, message):
    response = await Admission([*TREE, *pods]).call(VALIDATE, review(new, operation="UPDATE", old=old))
    assert response["allowed"] is (message is None)
    if message:
        assert response["status"] == refused(message)


NAMESPACES = "quota.scheduling.koordinator.sh/namespaces"


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        pytest.param(
            quota("mine", max={"cpu": "1"}),
            quota("mine", max={"cpu": "1"}, annotations={NAMESPACES: '["team-x"]'}),
            # "Updadte" is upstream's spelling.
            "UpdadteQuota, quota mine update namespaces, but namespace team-x "
            "is already bound to quota owner",
            id="namespace-of-another-quota",
        ),
        pytest.param(
            quota("mine", max={"cpu": "1"}, annotations={NAMESPACES: '["team-x"]'}),
            quota("mine", max={"cpu": "2"}, annotations={NAMESPACES: '["team-x"]'}),
            None,
            id="namespace-shared-before-is-kept",
        ),
        pytest.param(
            quota("ghost", max={"cpu": "1"}),
            quota("ghost", max={"cpu": "2"}),
            "UpdateQuota quota not exist in quotaInfoMap:ghost",
            id="unknown-quota",
        ),
    ],
)
async def test_update_namespaces_and_unknown_quotas(old, new, message):
    """A namespace two quotas came to share outside the webhook does not block later changes
    of either (upstream refuses whichever its namespace map does not point to)."""
    owner = quota("owner", max={"cpu": "1"}, annotations={NAMESPACES: '["team-x"]'})
    objects = [owner] if old["metadata"]["name"] == "ghost" else [owner, old]
    response = await Admission(objects).call(VALIDATE, review(new, operation="UPDATE", old=old))
    assert response["allowed"] is (message is None)
    if message:
        assert response["status"] == refused(message)


@pytest.mark.parametrize("name", ["koordinator-root-quota", "koordinator-system-quota"])
async def test_protected_quotas_cannot_change(name):
    old = quota(name, namespace="koordinator-system", max={"cpu": "1"})
    new = quota(name, namespace="koordinator-system", max={"cpu": "2"})
    response = await Admission([old]).call(VALIDATE, review(new, operation="UPDATE", old=old))
    assert response["status"] == refused(f"invalid quota {name}")


@pytest.mark.parametrize(
    ("name", "pods", "message"),
    [
        pytest.param("child-1", [], None, id="leaf"),
        pytest.param("root-a", [], "delete quota failed, quota root-a has 1 child quotas", id="has-children"),
        pytest.param(
            "koordinator-default-quota",
            [],
            "can not delete quotaGroup :koordinator-default-quota",
            id="default-quota",
        ),
        pytest.param(
            "child-1",
            [
                make_pod("b")
                .namespace("x")
                .labels(**{"quota.scheduling.koordinator.sh/name": "child-1"})
                .build(),
                make_pod("a")
                .namespace("x")
                .labels(**{"quota.scheduling.koordinator.sh/name": "child-1"})
                .build(),
            ],
            "delete quota failed, quota child-1 has 2 child pods: a, b",
            id="has-pods",
        ),
        pytest.param(
            "child-1",
            [
                make_pod(name)
                .namespace(space)
                .labels(**{"quota.scheduling.koordinator.sh/name": "child-1"})
                .build()
                for name, space in (("c", "x"), ("a", "y"), ("b", "x"))
            ],
            "delete quota failed, quota child-1 has 3 child pods: a, b, ...",
            id="many-pods-shows-two",
        ),
    ],
)
async def test_delete_guards(name, pods, message):
    old = next(
        (q for q in TREE if q["metadata"]["name"] == name), quota(name, namespace="koordinator-system")
    )
    response = await Admission([*TREE, *pods]).call(VALIDATE, review(None, operation="DELETE", old=old))
    assert response["allowed"] is (message is None)
    if message:
        assert response["status"] == refused(message)


async def test_delete_when_pods_cannot_be_listed():
    """Upstream's words, but a 500: the cluster failed, not the request (upstream answers 400)."""
    admission = Admission(TREE)

    async def broken(namespace=None, labels=None):
        raise ClusterError("pods is forbidden")

    admission.cluster.pods = broken  # type: ignore[method-assign]
    response = await admission.call(VALIDATE, review(None, operation="DELETE", old=TREE[1]))
    assert response["status"] == {
        "metadata": {},
        "message": "failed list pods for quota child-1, err: pods is forbidden",
        "code": 500,
    }


async def test_admitted_quota_counts_until_confirmed_and_expires():
    admission = Admission(TREE)
    first = quota(
        "child-2",
        max={"cpu": "20", "memory": "10Gi"},
        min={"cpu": "15", "memory": "1Gi"},
        labels={PARENT: "root-a", TREE_ID: "t1"},
    )
    second = quota(
        "child-3",
        max={"cpu": "20", "memory": "10Gi"},
        min={"cpu": "15", "memory": "1Gi"},
        labels={PARENT: "root-a", TREE_ID: "t1"},
    )
    assert (await admission.call(VALIDATE, review(first)))["allowed"] is True
    # 30 + 15 + 15 > 50: the first admission already counts
    refusal = await admission.call(VALIDATE, review(second))
    assert (
        refusal["status"]["message"]
        == "checkMinQuotaSum all brothers' MinQuota > parent MinQuota, parent: root-a"
    )


async def test_dry_run_admissions_do_not_count():
    admission = Admission(TREE)
    first = quota(
        "child-2",
        max={"cpu": "20", "memory": "10Gi"},
        min={"cpu": "15", "memory": "1Gi"},
        labels={PARENT: "root-a", TREE_ID: "t1"},
    )
    assert (await admission.call(VALIDATE, review(first, dry_run=True)))["allowed"] is True
    assert (await admission.call(VALIDATE, review(first)))["allowed"] is True


def test_overlay_expires_without_confirmation_and_confirmation_replaces_it():
    now = [0.0]
    topology = QuotaTopology(pending_ttl=30.0, clock=lambda: now[0])
    topology.admit("ghost", QuotaInfo(name="ghost"))
    topology.admit("real", QuotaInfo(name="real"))
    assert set(topology.view().infos) == {"ghost", "real"}
    topology.upsert(quota("real", max={"cpu": "1"}))
    now[0] = 31.0
    assert set(topology.view().infos) == {"real"}
    assert topology.view().infos["real"].max["cpu"].value() == 1


def test_informer_deletes_and_malformed_quotas():
    topology = QuotaTopology()
    # unreadable namespaces and guaranteed annotations count as absent, as upstream reads them
    lenient = quota(
        "lenient",
        max={"cpu": "1"},
        labels={"quota.scheduling.koordinator.sh/is-parent": "true"},
        annotations={
            "quota.scheduling.koordinator.sh/namespaces": "{",
            "quota.scheduling.koordinator.sh/guaranteed": "oops",
        },
    )
    topology.upsert(lenient)
    info = topology.view().infos["lenient"]
    assert (info.max, info.namespaces, info.guaranteed, info.is_parent) == (
        {"cpu": Quantity.parse("1")},
        (),
        {},
        True,
    )
    # an unreadable shared weight leaves the quantities out, but the tree place stays known
    broken = quota(
        "broken",
        max={"cpu": "1"},
        labels={"quota.scheduling.koordinator.sh/is-parent": "true"},
        annotations={"quota.scheduling.koordinator.sh/shared-weight": "["},
    )
    topology.upsert(broken)
    info = topology.view().infos["broken"]
    assert (info.max, info.is_parent) == ({}, True)
    topology.remove("broken")
    topology.remove("lenient")
    assert topology.view().infos == {}


async def test_debug_summary_lists_the_tree():
    admission = Admission(TREE)
    summary = admission.ctx.quotas.summary()
    assert summary["quotaHierarchyInfo"]["root-a"] == ["child-1"]
    assert summary["quotaInfoMap"]["child-1"]["min"] == {"cpu": "30", "memory": "30Gi"}


async def test_a_child_of_a_parent_with_an_unreadable_namespaces_annotation_is_admitted():
    """Upstream ignores an unreadable ``namespaces`` annotation; refusing it, or tracking the
    parent without its is-parent label, refused its children and let pods onto it."""
    parent = quota(
        "parent",
        max={"cpu": "8"},
        labels={"quota.scheduling.koordinator.sh/is-parent": "true"},
        annotations={"quota.scheduling.koordinator.sh/namespaces": "team-a"},
    )
    admission = Admission([parent])
    child = quota("child", max={"cpu": "2"}, labels={"quota.scheduling.koordinator.sh/parent": "parent"})
    response = await admission.call(VALIDATE, review(child))
    assert response["allowed"] is True, response


async def test_a_shared_weight_naming_maxs_resources_is_left_as_written():
    """Upstream's fixedSharedWeight rewrites the annotation only when its resources are not max's."""
    spelled = quota(
        "q1",
        max={"cpu": "2", "memory": "1Gi"},
        labels={"quota.scheduling.koordinator.sh/parent": "koordinator-root-quota"},
        annotations={"quota.scheduling.koordinator.sh/shared-weight": '{"cpu": "2000m", "memory":"1Gi"}'},
    )
    response = await Admission().call(MUTATE, review(spelled))
    assert patch_of(response) == []
    missing = quota(
        "q2",
        max={"cpu": "2", "memory": "1Gi"},
        labels={"quota.scheduling.koordinator.sh/parent": "koordinator-root-quota"},
        annotations={"quota.scheduling.koordinator.sh/shared-weight": '{"cpu": "1", "gpu": "1"}'},
    )
    response = await Admission().call(MUTATE, review(missing))
    assert apply(missing, response)["metadata"]["annotations"][
        "quota.scheduling.koordinator.sh/shared-weight"
    ] == ('{"cpu":"1","memory":"1Gi"}')
