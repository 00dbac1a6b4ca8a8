"""A builder for pods as the kubelet reports them (spec and status, container IDs).

``make_pod("web").qos("BE").container("main", cid="containerd://abc", requests={...}).build()``
"""

from __future__ import annotations

import hashlib
from typing import Any

from koordinator.api.extension.qos import LABEL_POD_QOS


def _uid(name: str) -> str:
    h = hashlib.sha1(name.encode()).hexdigest()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


class PodBuilder:
    def __init__(self, name: str, namespace: str = "default") -> None:
        self._pod: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": _uid(f"{namespace}/{name}"),
                "resourceVersion": "1",
                "labels": {},
                "annotations": {},
            },
            "spec": {"containers": []},
            "status": {"phase": "Running", "containerStatuses": []},
        }

    @property
    def uid(self) -> str:
        return str(self._pod["metadata"]["uid"])

    def qos(self, qos: str) -> PodBuilder:
        self._pod["metadata"]["labels"][LABEL_POD_QOS] = qos
        return self

    def kube_qos(self, qos: str) -> PodBuilder:
        self._pod["status"]["qosClass"] = qos
        return self

    def label(self, key: str, value: str) -> PodBuilder:
        self._pod["metadata"]["labels"][key] = value
        return self

    def annotation(self, key: str, value: str) -> PodBuilder:
        self._pod["metadata"]["annotations"][key] = value
        return self

    def priority(self, value: int) -> PodBuilder:
        self._pod["spec"]["priority"] = value
        return self

    def phase(self, phase: str) -> PodBuilder:
        self._pod["status"]["phase"] = phase
        return self

    def container(
        self,
        name: str,
        *,
        cid: str | None = None,
        requests: dict[str, str] | None = None,
        limits: dict[str, str] | None = None,
        init: bool = False,
    ) -> PodBuilder:
        resources: dict[str, Any] = {}
        if requests:
            resources["requests"] = dict(requests)
        if limits:
            resources["limits"] = dict(limits)
        field = "initContainers" if init else "containers"
        self._pod["spec"].setdefault(field, []).append(
            {"name": name, "image": "app:1", "resources": resources}
        )
        if cid is not None:
            status_field = "initContainerStatuses" if init else "containerStatuses"
            self._pod["status"].setdefault(status_field, []).append(
                {"name": name, "containerID": cid, "ready": True}
            )
        return self

    def build(self) -> dict[str, Any]:
        return self._pod


def make_pod(name: str, namespace: str = "default") -> PodBuilder:
    return PodBuilder(name, namespace)
