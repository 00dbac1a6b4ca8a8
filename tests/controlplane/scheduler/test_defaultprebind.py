"""DefaultPreBind: the one patch of the PreBind changes, sent again after a conflict or a lost
connection, and refused for a pod being deleted (against the fake apiserver)."""

from __future__ import annotations

import pytest

from controlplane.scheduler.plugins.defaultprebind import ATTEMPTS, DefaultPreBind, PodDeletingError
from controlplane.scheduler.podinfo import pod_info
from koordinator.kube import resources as res
from koordinator.kube.errors import ConflictError
from tests.controlplane.scheduler.test_scheduler import pod
from testsupport.fake import FakeApiServer
from testsupport.fake.server import Fault

BODY = {"metadata": {"annotations": {"scheduling.koordinator.sh/resource-status": '{"cpuset":"0-1"}'}}}


@pytest.mark.parametrize("status", [409, 0], ids=["conflict", "connection-lost"])
async def test_a_refused_patch_is_sent_again_until_it_lands(status):
    async with FakeApiServer() as fake:
        created = fake.create(res.PODS, pod("p", "1"))
        fault = fake.inject(Fault(status=status, times=ATTEMPTS - 1, method="PATCH", path="/pods/p"))
        async with fake.client() as client:
            await DefaultPreBind().apply_patch(client, pod_info(created), BODY)
        assert fault.hits == ATTEMPTS - 1
        annotations = fake.get(res.PODS, "p", "default")["metadata"]["annotations"]
        assert annotations == BODY["metadata"]["annotations"]


async def test_a_patch_refused_every_time_fails_the_binding():
    async with FakeApiServer() as fake:
        created = fake.create(res.PODS, pod("p", "1"))
        fake.inject(Fault(status=409, times=ATTEMPTS, method="PATCH", path="/pods/p"))
        async with fake.client() as client:
            with pytest.raises(ConflictError):
                await DefaultPreBind().apply_patch(client, pod_info(created), BODY)


async def test_a_pod_being_deleted_is_not_bound():
    async with FakeApiServer() as fake:
        obj = pod("p", "1")
        obj["metadata"]["finalizers"] = ["test.koordinator.sh/keep"]
        created = fake.create(res.PODS, obj)
        fake.delete(res.PODS, "p", "default")  # the finalizer keeps it, being deleted
        async with fake.client() as client:
            with pytest.raises(PodDeletingError, match="default/p is being deleted"):
                await DefaultPreBind().apply_patch(client, pod_info(created), BODY)
