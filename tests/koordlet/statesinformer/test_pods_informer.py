"""The pods informer and the kubelet client: the last good pod list survives errors,
garbage and empty answers; PLEG-triggered resyncs are rate-limited."""

from __future__ import annotations

import asyncio
import copy
import ssl
from typing import Any

import pytest
from aiohttp import web

from koordinator.kube.ratelimit import TokenBucket
from koordlet.statesinformer.kubelet import KubeletClient, KubeletEndpoint, KubeletError
from koordlet.statesinformer.pods import PodsInformer
from koordlet.system.cgroup.layout import CgroupDriver, KubepodsLayout
from tests.fakes.pods import make_pod
from testsupport.envtest.certs import ADMIN_USER, generate_credentials

LAYOUT = KubepodsLayout.default(CgroupDriver.SYSTEMD)


class ScriptedSource:
    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)

    async def get_pods(self) -> list[dict[str, Any]]:
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return list(answer)


async def test_keeps_the_last_good_list():
    pod = make_pod("web").kube_qos("Burstable").container("c", cid="containerd://" + "a" * 64).build()
    changes = []
    informer = PodsInformer(
        ScriptedSource([pod], KubeletError("HTTP 500"), [], [pod]),
        LAYOUT,
        on_change=lambda: changes.append(1),
    )
    assert await informer.sync()
    assert informer.has_synced
    [meta] = informer.get_all_pods()
    assert meta.cgroup_dir.endswith(".slice")
    assert meta.containers[0].cgroup_dir.endswith(f"cri-containerd-{'a' * 64}.scope")
    assert not await informer.sync()  # error
    assert informer.last_error == "HTTP 500"
    assert [p.uid for p in informer.get_all_pods()] == [meta.uid]
    assert not await informer.sync()  # empty: a restarting kubelet
    assert [p.uid for p in informer.get_all_pods()] == [meta.uid]
    assert await informer.sync()
    assert changes == [1]  # the same pods again: no change notification


async def test_not_synced_until_the_first_success():
    informer = PodsInformer(ScriptedSource(KubeletError("refused")), LAYOUT)
    assert not await informer.sync()
    assert not informer.has_synced


async def test_pods_without_uid_are_ignored():
    broken = {"metadata": {"name": "x"}}
    good = make_pod("ok").build()
    informer = PodsInformer(ScriptedSource([broken, good]), LAYOUT)
    await informer.sync()
    assert [p.name for p in informer.get_all_pods()] == ["ok"]


async def test_an_unchanged_pod_keeps_its_podmeta():
    """An equal pod object keeps the same PodMeta across syncs (collectors compare them by
    identity); a pod whose object changed, even without a new resourceVersion, is resolved
    again, and a pod that came back after leaving gets a fresh one."""
    cid = "containerd://" + "b" * 64
    web = make_pod("web").kube_qos("Burstable").container("c", cid=cid).build()
    db = make_pod("db").kube_qos("BestEffort").build()
    relabelled = copy.deepcopy(web)
    relabelled["metadata"]["labels"] = {"tier": "front"}
    informer = PodsInformer(
        ScriptedSource([web, db], [copy.deepcopy(web), db], [relabelled, db], [db], [relabelled, db]),
        LAYOUT,
        keep_on_empty=False,
    )
    await informer.sync()
    first = {meta.name: meta for meta in informer.get_all_pods()}
    await informer.sync()  # equal objects (one a copy): the same metas
    second = {meta.name: meta for meta in informer.get_all_pods()}
    assert second["web"] is first["web"]
    assert second["db"] is first["db"]
    await informer.sync()  # web relabelled
    third = {meta.name: meta for meta in informer.get_all_pods()}
    assert third["web"] is not first["web"]
    assert third["web"].labels == {"tier": "front"}
    assert third["web"].containers[0].cgroup_dir == first["web"].containers[0].cgroup_dir
    assert third["db"] is first["db"]
    await informer.sync()  # web gone
    assert [meta.name for meta in informer.get_all_pods()] == ["db"]
    await informer.sync()  # web back: resolved again, not the meta of two syncs ago
    back = informer.get_pod(third["web"].uid)
    assert back is not None
    assert back is not third["web"]
    assert back.pod == relabelled


def test_token_bucket():
    now = [0.0]
    bucket = TokenBucket(5.0, 10, clock=lambda: now[0])
    assert sum(bucket.try_acquire() for _ in range(20)) == 10
    now[0] = 1.0
    assert sum(bucket.try_acquire() for _ in range(20)) == 5


@pytest.fixture
async def kubelet(aiohttp_server_factory):
    return aiohttp_server_factory


@pytest.fixture
async def aiohttp_server_factory():
    runners = []

    async def start(handler) -> str:
        app = web.Application()
        app.router.add_get("/pods/", handler)
        app.router.add_get("/configz", handler)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return f"http://127.0.0.1:{port}"

    yield start
    for runner in runners:
        await runner.cleanup()


@pytest.mark.parametrize(
    ("status", "body", "message"),
    [
        (500, b"boom", "HTTP 500"),
        (200, b"{not json", "not JSON"),
        (200, b"[1, 2]", "not a PodList"),
        (200, b'{"items": "x"}', "not a PodList"),
    ],
)
async def test_kubelet_client_refuses_bad_answers(aiohttp_server_factory, status, body, message):
    async def handler(_request: web.Request) -> web.Response:
        return web.Response(status=status, body=body)

    url = await aiohttp_server_factory(handler)
    client = KubeletClient(KubeletEndpoint(url))
    with pytest.raises(KubeletError, match=message):
        await client.get_pods()
    await client.close()


async def test_kubelet_client_reads_pods(aiohttp_server_factory):
    pod = make_pod("web").build()

    async def handler(request: web.Request) -> web.Response:
        if request.path == "/configz":
            return web.json_response({"kubeletconfig": {"cpuManagerPolicy": "static"}})
        return web.json_response({"kind": "PodList", "items": [pod]})

    url = await aiohttp_server_factory(handler)
    client = KubeletClient(KubeletEndpoint(url))
    assert await client.get_pods() == [pod]
    assert (await client.get_configz())["cpuManagerPolicy"] == "static"
    await client.close()


async def test_a_kubelet_without_pods_answers_null_items(aiohttp_server_factory):
    """What a real kubelet sends when it runs no pod (found on the node tier)."""

    async def handler(_request: web.Request) -> web.Response:
        return web.Response(body=b'{"kind":"PodList","apiVersion":"v1","metadata":{},"items":null}')

    client = KubeletClient(KubeletEndpoint(await aiohttp_server_factory(handler)))
    assert await client.get_pods() == []
    await client.close()


async def test_unreachable_kubelet_is_a_kubelet_error():
    client = KubeletClient(KubeletEndpoint("http://127.0.0.1:9"), timeout=1)
    with pytest.raises(KubeletError):
        await client.get_pods()
    await client.close()


@pytest.mark.parametrize(
    ("node", "insecure", "url"),
    [
        (
            {
                "status": {
                    "addresses": [{"type": "InternalIP", "address": "10.0.0.5"}],
                    "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                }
            },
            False,
            "https://10.0.0.5:10250",
        ),
        (
            {"status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.5"}]}},
            True,
            "http://10.0.0.5:10255",
        ),
        (
            {"status": {"addresses": [{"type": "InternalIP", "address": "fd00::5"}]}},
            False,
            "https://[fd00::5]:10250",
        ),
    ],
)
def test_kubelet_endpoint(node, insecure, url):
    assert KubeletEndpoint.for_node(node, insecure=insecure).url == url


def test_kubelet_endpoint_needs_an_address():
    with pytest.raises(KubeletError):
        KubeletEndpoint.for_node({"status": {}})


async def test_trigger_wakes_the_loop():
    pod = make_pod("a").build()
    source = ScriptedSource(*([[pod]] * 5))
    informer = PodsInformer(source, LAYOUT, interval=3600)
    task = asyncio.create_task(informer.run())
    await asyncio.sleep(0.05)
    informer.trigger("test")
    await asyncio.sleep(0.05)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert len(source.answers) == 3  # two syncs: the first, then the triggered one


async def test_kubelet_client_shows_its_client_certificate(tmp_path):
    """A kubelet with x509 authentication (clientCAFile) admits the koordlet's certificate
    and refuses the handshake without one."""
    creds = generate_credentials(tmp_path / "pki")
    pod = make_pod("web").build()
    seen: list[str] = []

    async def handler(request: web.Request) -> web.Response:
        peer = request.transport.get_extra_info("peercert") if request.transport else None
        seen.append(dict(x[0] for x in peer["subject"])["commonName"] if peer else "")
        return web.json_response({"kind": "PodList", "items": [pod]})

    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(creds.ca_cert))
    server_tls.verify_mode = ssl.CERT_REQUIRED
    server_tls.load_cert_chain(str(creds.serving_cert), str(creds.serving_key))
    app = web.Application()
    app.router.add_get("/pods/", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_tls)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    endpoint = KubeletEndpoint(f"https://127.0.0.1:{port}")
    try:
        with_cert = KubeletClient(endpoint, client_cert=(str(creds.admin_cert), str(creds.admin_key)))
        assert await with_cert.get_pods() == [pod]
        await with_cert.close()
        without = KubeletClient(endpoint)
        with pytest.raises(KubeletError):
            await without.get_pods()
        await without.close()
    finally:
        await runner.cleanup()
    assert seen == [ADMIN_USER]
