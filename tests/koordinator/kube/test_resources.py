"""Resource addressing for core, grouped and custom resources."""

from __future__ import annotations

import pytest

from koordinator.kube import resources as res


@pytest.mark.parametrize(
    ("resource", "namespace", "name", "sub", "path"),
    [
        pytest.param(res.PODS, None, None, None, "/api/v1/pods", id="all-pods"),
        pytest.param(res.PODS, "ns", "p", "status", "/api/v1/namespaces/ns/pods/p/status", id="pod-status"),
        pytest.param(res.NODES, None, "n1", None, "/api/v1/nodes/n1", id="node"),
        pytest.param(
            res.LEASES,
            "kube-system",
            "l",
            None,
            "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/l",
            id="lease",
        ),
        pytest.param(
            res.Resource("slo.koordinator.sh", "v1alpha1", "nodeslos", "NodeSLO", False),
            None,
            "n1",
            None,
            "/apis/slo.koordinator.sh/v1alpha1/nodeslos/n1",
            id="cluster-scoped-crd",
        ),
    ],
)
def test_paths(resource, namespace, name, sub, path):
    assert resource.path(namespace, name, sub) == path


@pytest.mark.parametrize(
    ("resource", "namespace", "name"),
    [
        pytest.param(res.PODS, None, "p", id="namespaced-object-without-namespace"),
        pytest.param(res.NODES, "ns", "n", id="cluster-scoped-with-namespace"),
        pytest.param(res.PODS, "ns", "", id="empty-name"),
    ],
)
def test_path_errors(resource, namespace, name):
    with pytest.raises(ValueError):  # noqa: PT011 - the three mistakes have different messages
        resource.path(namespace, name)


def test_keys_and_lookup():
    assert res.object_key({"metadata": {"name": "p", "namespace": "ns"}}) == "ns/p"
    assert res.object_key({"metadata": {"name": "n"}}) == "n"
    assert res.split_key("ns/p") == ("ns", "p")
    assert res.split_key("n") == (None, "n")
    assert res.builtin_for("policy/v1", "PodDisruptionBudget") is res.POD_DISRUPTION_BUDGETS
    assert res.LEASES.group_resource == "leases.coordination.k8s.io"
