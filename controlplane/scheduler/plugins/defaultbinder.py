"""DefaultBinder (Bind): posts the pod's ``binding`` subresource naming the node, with the
pod's UID so a pod deleted and created again under the same name is not bound by mistake.
It skips reserve pods (they are not Pod objects): the plug-in owning reservations binds them."""

from __future__ import annotations

from controlplane.scheduler.plugins.interface import CycleState
from controlplane.scheduler.podinfo import PodInfo
from koordinator.kube import resources as res
from koordinator.kube.client import ApiClient

NAME = "DefaultBinder"


class DefaultBinder:
    NAME = NAME

    async def bind(self, client: ApiClient, state: CycleState, pod: PodInfo, node: str) -> bool:
        if pod.reservation:
            return False
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        await client.create_subresource(res.PODS, pod.name, "binding", body, pod.namespace)
        return True
