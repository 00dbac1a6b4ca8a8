"""Object builders shared by the kube tests."""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]


def pod(
    name: str, namespace: str, *, labels: dict[str, str] | None = None, node: str | None = None, **spec: Any
) -> Obj:
    body: Obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"containers": [{"name": "main", "image": "registry.example/app:1.0"}], **spec},
    }
    if labels:
        body["metadata"]["labels"] = dict(labels)
    if node:
        body["spec"]["nodeName"] = node
    return body


def config_map(name: str, namespace: str, data: dict[str, str] | None = None, **meta: Any) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, **meta},
        "data": dict(data or {}),
    }


def widget(name: str, namespace: str, **spec: Any) -> Obj:
    return {
        "apiVersion": "contract.koordinator.sh/v1alpha1",
        "kind": "Widget",
        "metadata": {"name": name, "namespace": namespace},
        "spec": dict(spec),
    }


def node(name: str, *, labels: dict[str, str] | None = None, cpu: str = "4", memory: str = "8Gi") -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": dict(labels or {})},
        "status": {
            "allocatable": {"cpu": cpu, "memory": memory, "pods": "110"},
            "capacity": {"cpu": cpu, "memory": memory, "pods": "110"},
        },
    }
