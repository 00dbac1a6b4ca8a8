"""Builders for the gang tests: pods and PodGroups as the API returns them.

``make_pod("p1").gang("job", min_available=3).on("node-1").member()``
``make_pod_group("train", min_member=3, timeout=30, mode="NonStrict")``
"""

from __future__ import annotations

import json
from typing import Any

from controlplane.scheduler.gang import GangMember, gang_member
from koordinator.api.extension.gang import (
    ANNOTATION_GANG_GROUPS,
    ANNOTATION_GANG_MATCH_POLICY,
    ANNOTATION_GANG_MIN_NUM,
    ANNOTATION_GANG_MODE,
    ANNOTATION_GANG_NAME,
    ANNOTATION_GANG_TOTAL_NUM,
    ANNOTATION_GANG_WAIT_TIME,
    LABEL_POD_GROUP,
)

Obj = dict[str, Any]


class PodBuilder:
    def __init__(self, name: str, namespace: str) -> None:
        self._pod: Obj = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": f"uid-{namespace}-{name}",
                "labels": {},
                "annotations": {},
                "creationTimestamp": "2024-01-01T00:00:00Z",
            },
            "spec": {"containers": [{"name": "main"}]},
            "status": {"phase": "Pending"},
        }

    @property
    def _meta(self) -> Obj:
        meta: Obj = self._pod["metadata"]
        return meta

    def in_pod_group(self, name: str) -> PodBuilder:
        """Member of the PodGroup ``name`` (the ``pod-group.scheduling.sigs.k8s.io`` label)."""
        self._meta["labels"][LABEL_POD_GROUP] = name
        return self

    def gang(
        self,
        name: str,
        min_available: int | str | None = None,
        *,
        total: int | str | None = None,
        wait: str | None = None,
        mode: str | None = None,
        policy: str | None = None,
        groups: list[str] | str | None = None,
    ) -> PodBuilder:
        """A gang declared in the pod's annotations."""
        annotations = self._meta["annotations"]
        annotations[ANNOTATION_GANG_NAME] = name
        for key, value in (
            (ANNOTATION_GANG_MIN_NUM, min_available),
            (ANNOTATION_GANG_TOTAL_NUM, total),
            (ANNOTATION_GANG_WAIT_TIME, wait),
            (ANNOTATION_GANG_MODE, mode),
            (ANNOTATION_GANG_MATCH_POLICY, policy),
        ):
            if value is not None:
                annotations[key] = str(value)
        if groups is not None:
            annotations[ANNOTATION_GANG_GROUPS] = groups if isinstance(groups, str) else json.dumps(groups)
        return self

    def label(self, key: str, value: str) -> PodBuilder:
        self._meta["labels"][key] = value
        return self

    def annotate(self, key: str, value: str) -> PodBuilder:
        self._meta["annotations"][key] = value
        return self

    def on(self, node: str) -> PodBuilder:
        self._pod["spec"]["nodeName"] = node
        return self

    def phase(self, phase: str) -> PodBuilder:
        self._pod["status"]["phase"] = phase
        return self

    def owned_by(self, *names: str) -> PodBuilder:
        self._meta["ownerReferences"] = [
            {"apiVersion": "batch/v1", "kind": "Job", "name": n, "uid": f"uid-{n}"} for n in names
        ]
        return self

    def build(self) -> Obj:
        return self._pod

    def member(self) -> GangMember:
        member = gang_member(self._pod)
        assert member is not None, "the pod names no gang"
        return member


def make_pod(name: str, namespace: str = "default") -> PodBuilder:
    return PodBuilder(name, namespace)


def make_pod_group(
    name: str,
    namespace: str = "default",
    *,
    min_member: int = 1,
    timeout: int | None = None,
    annotations: dict[str, str] | None = None,
    status: Obj | None = None,
    created: str = "2024-01-01T00:00:00Z",
) -> Obj:
    spec: Obj = {"minMember": min_member}
    if timeout is not None:
        spec["scheduleTimeoutSeconds"] = timeout
    pod_group: Obj = {
        "apiVersion": "scheduling.sigs.k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "annotations": dict(annotations or {}),
            "creationTimestamp": created,
        },
        "spec": spec,
    }
    if status is not None:
        pod_group["status"] = status
    return pod_group
