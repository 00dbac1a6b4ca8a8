"""Builders for the objects and AdmissionReviews of the koord-manager webhook tests."""

from __future__ import annotations

import base64
import copy
import uuid
from typing import Any

import jsonpatch
import orjson

from controlplane.manager.webhooks.cluster import StaticCluster, quota_topology_of
from controlplane.manager.webhooks.context import WebhookContext, WebhookOptions
from controlplane.manager.webhooks.dispatch import AdmissionDispatcher
from controlplane.manager.webhooks.quotaevaluate.accessor import StaticQuotaAccessor
from controlplane.manager.webhooks.quotaevaluate.evaluator import QuotaEvaluator
from koordinator.api.features import CONTROL_PLANE_FEATURES, FeatureGates

Obj = dict[str, Any]


class PodBuilder:
    """``make_pod("web").namespace("ns").labels(app="web").container("main", requests={"cpu": "1"})``."""

    def __init__(self, name: str) -> None:
        self.obj: Obj = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": []},
        }

    def namespace(self, namespace: str | None) -> PodBuilder:
        if namespace is None:
            self.obj["metadata"].pop("namespace", None)
        else:
            self.obj["metadata"]["namespace"] = namespace
        return self

    def labels(self, **labels: str) -> PodBuilder:
        return self.label_map(labels)

    def label_map(self, labels: dict[str, str]) -> PodBuilder:
        self.obj["metadata"].setdefault("labels", {}).update(labels)
        return self

    def annotations(self, annotations: dict[str, str]) -> PodBuilder:
        self.obj["metadata"].setdefault("annotations", {}).update(annotations)
        return self

    def qos(self, qos: str) -> PodBuilder:
        return self.label_map({"koordinator.sh/qosClass": qos})

    def priority(self, value: int) -> PodBuilder:
        self.obj["spec"]["priority"] = value
        return self

    def spec(self, **fields: Any) -> PodBuilder:
        self.obj["spec"].update(fields)
        return self

    def container(
        self,
        name: str = "main",
        *,
        requests: dict[str, Any] | None = None,
        limits: dict[str, Any] | None = None,
        init: bool = False,
        **fields: Any,
    ) -> PodBuilder:
        container: Obj = {"name": name, "image": "registry.example/app:1.0", **fields}
        resources: Obj = {}
        if requests is not None:
            resources["requests"] = dict(requests)
        if limits is not None:
            resources["limits"] = dict(limits)
        if resources:
            container["resources"] = resources
        self.obj["spec"].setdefault("initContainers" if init else "containers", []).append(container)
        return self

    def build(self) -> Obj:
        if not self.obj["spec"]["containers"]:
            self.container()
        return copy.deepcopy(self.obj)


def make_pod(name: str = "pod-1") -> PodBuilder:
    return PodBuilder(name)


def namespace(name: str, **labels: str) -> Obj:
    meta: Obj = {"name": name}
    if labels:
        meta["labels"] = dict(labels)
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}


def priority_class(name: str, value: int, preemption_policy: str | None = "PreemptLowerPriority") -> Obj:
    obj: Obj = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
    }
    if preemption_policy:
        obj["preemptionPolicy"] = preemption_policy
    return obj


def profile(name: str, *, object_annotations: dict[str, str] | None = None, **spec: Any) -> Obj:
    meta: Obj = {"name": name}
    if object_annotations:
        meta["annotations"] = dict(object_annotations)
    return {
        "apiVersion": "config.koordinator.sh/v1alpha1",
        "kind": "ClusterColocationProfile",
        "metadata": meta,
        "spec": spec,
    }


def quota(
    name: str,
    *,
    namespace: str = "default",
    min: dict[str, str] | None = None,
    max: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    used: dict[str, str] | None = None,
) -> Obj:
    meta: Obj = {"name": name, "namespace": namespace}
    if labels:
        meta["labels"] = dict(labels)
    if annotations:
        meta["annotations"] = dict(annotations)
    obj: Obj = {
        "apiVersion": "scheduling.sigs.k8s.io/v1alpha1",
        "kind": "ElasticQuota",
        "metadata": meta,
        "spec": {"min": dict(min or {}), "max": dict(max or {})},
    }
    if used is not None:
        obj["status"] = {"used": dict(used)}
    return obj


def node(name: str, labels: dict[str, str] | None = None, **status: Any) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": dict(labels or {})},
        "status": status,
    }


def config_map(name: str, namespace: str, data: dict[str, str], labels: dict[str, str] | None = None) -> Obj:
    meta: Obj = {"name": name, "namespace": namespace}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": dict(data)}


RESOURCES = {
    "Pod": ("", "v1", "pods"),
    "Node": ("", "v1", "nodes"),
    "ConfigMap": ("", "v1", "configmaps"),
    "ElasticQuota": ("scheduling.sigs.k8s.io", "v1alpha1", "elasticquotas"),
    "Reservation": ("scheduling.koordinator.sh", "v1alpha1", "reservations"),
}


def review(
    obj: Obj | None,
    *,
    operation: str = "CREATE",
    old: Obj | None = None,
    kind: str | None = None,
    namespace: str | None = None,
    sub_resource: str = "",
    api_version: str = "admission.k8s.io/v1",
    uid: str | None = None,
    dry_run: bool = False,
    username: str = "kubernetes-admin",
) -> Obj:
    source = obj if obj is not None else old
    assert source is not None
    kind = kind or source["kind"]
    group, version, plural = RESOURCES[kind]
    meta = source.get("metadata") or {}
    request: Obj = {
        "uid": uid or str(uuid.uuid4()),
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": plural},
        "name": meta.get("name", ""),
        "namespace": namespace if namespace is not None else meta.get("namespace", ""),
        "operation": operation,
        "userInfo": {"username": username},
        "dryRun": dry_run,
    }
    if sub_resource:
        request["subResource"] = sub_resource
    if obj is not None:
        request["object"] = obj
    if old is not None:
        request["oldObject"] = old
    return {"apiVersion": api_version, "kind": "AdmissionReview", "request": request}


def gates(text: str = "") -> FeatureGates:
    return FeatureGates.parse(CONTROL_PLANE_FEATURES, text)


class Admission:
    """An in-process dispatcher over a static cluster; ``await adm.call(path, review)``."""

    def __init__(
        self,
        objects: list[Obj] | None = None,
        *,
        feature_gates: str = "",
        draw: int | None = None,
        options: WebhookOptions | None = None,
    ) -> None:
        self.cluster = StaticCluster(objects or [])
        self.quota_accessor = StaticQuotaAccessor(self.cluster.objects("ElasticQuota"))
        self.ctx = WebhookContext(
            cluster=self.cluster,
            gates=gates(feature_gates),
            options=options or WebhookOptions(),
            quota_evaluator=QuotaEvaluator(self.quota_accessor),
        )
        quota_topology_of(self.cluster, self.ctx.quotas)
        self.draws: list[int] = []
        if draw is not None:
            fixed = draw

            def rand(n: int) -> int:
                self.draws.append(n)
                return fixed

            self.ctx.rand_intn = rand
        self.dispatcher = AdmissionDispatcher(self.ctx)

    async def call(self, path: str, body: Obj) -> Obj:
        answer = await self.dispatcher.review(path, orjson.dumps(body))
        response: Obj = orjson.loads(answer)["response"]
        return response


def patch_of(response: Obj) -> list[Obj]:
    """The decoded JSON patch of a response (empty when there is none)."""
    if "patch" not in response:
        return []
    assert response["patchType"] == "JSONPatch"
    operations: list[Obj] = orjson.loads(base64.b64decode(response["patch"]))
    return operations


def apply(obj: Obj, response: Obj) -> Obj:
    """The object after the response's patch, applied with the ``jsonpatch`` library."""
    patched: Obj = jsonpatch.apply_patch(obj, patch_of(response))
    return patched


def pod_webhook(name: str, path: str, namespace_labels: dict[str, str]) -> Obj:
    """One webhook of a Mutating/ValidatingWebhookConfiguration sending the pods of the
    namespaces with ``namespace_labels`` to koord-manager's Service (whose URL the manager
    patches in with ``WEBHOOK_HOST``)."""
    return {
        "name": name,
        "admissionReviewVersions": ["v1", "v1beta1"],
        "sideEffects": "None",
        "failurePolicy": "Fail",
        "timeoutSeconds": 10,
        "clientConfig": {
            "service": {
                "name": "koordinator-webhook-service",
                "namespace": "koordinator-system",
                "path": path,
                "port": 443,
            }
        },
        "namespaceSelector": {"matchLabels": dict(namespace_labels)},
        "rules": [
            {
                "operations": ["CREATE", "UPDATE"],
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "resources": ["pods"],
            }
        ],
    }
