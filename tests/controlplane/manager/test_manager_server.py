"""The manager against the fake apiserver: TLS webhook server, probes, metrics, restarts, admit parity."""

from __future__ import annotations

import asyncio
import base64
import datetime
import io
import json
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
import yaml

from controlplane.manager.__main__ import main as koord_manager
from controlplane.manager.certs import CertBundle, SecretCertStore, issue_serving_certificate
from controlplane.manager.manager import Manager
from controlplane.manager.options import ManagerOptions
from koordinator.kube import resources as res
from koordinator.kube.client import ApiClient
from koordinator.kube.resources import builtin_for
from tests.controlplane.manager.builders import make_pod, review
from testsupport.fake import FakeApiServer

ROOT = Path(__file__).resolve().parents[3]
DATA = Path(__file__).resolve().parent / "data"
CLUSTER = DATA / "cluster.yaml"
DRAW = 10

MUTATING_NAME = "koordinator-mutating-webhook-configuration"
CONFIGURATIONS: list[dict[str, Any]] = [
    {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "koordinator-mutating-webhook-configuration"},
        "webhooks": [
            {
                "name": "mpod-create.koordinator.sh",
                "admissionReviewVersions": ["v1", "v1beta1"],
                "sideEffects": "None",
                "clientConfig": {"service": {"name": "x", "namespace": "y", "path": "/mutate-pod"}},
                "rules": [
                    {
                        "operations": ["CREATE"],
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "resources": ["pods"],
                    }
                ],
            }
        ],
    },
    {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "koordinator-validating-webhook-configuration"},
        "webhooks": [
            {
                "name": "vpod.koordinator.sh",
                "admissionReviewVersions": ["v1", "v1beta1"],
                "sideEffects": "None",
                "clientConfig": {"service": {"name": "x", "namespace": "y", "path": "/validate-pod"}},
                "rules": [
                    {
                        "operations": ["CREATE"],
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "resources": ["pods"],
                    }
                ],
            }
        ],
    },
]

CRD_RESOURCES = {
    "ClusterColocationProfile": res.CLUSTER_COLOCATION_PROFILES,
    "ElasticQuota": res.ELASTIC_QUOTAS,
}


def cluster_objects() -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(CLUSTER.read_text()) if doc]


async def seed(client: ApiClient) -> None:
    await client.ensure_namespace("koordinator-system")
    for obj in [*cluster_objects(), *CONFIGURATIONS]:
        resource = builtin_for(obj["apiVersion"], obj["kind"]) or CRD_RESOURCES[obj["kind"]]
        await client.create(resource, obj)


class Running:
    def __init__(self, manager: Manager, client: ApiClient) -> None:
        self.manager = manager
        self.client = client

    @property
    def port(self) -> int:
        assert self.manager.webhook_site is not None
        return self.manager.webhook_site.port

    async def ssl_context(self) -> ssl.SSLContext:
        configuration = await self.client.get(res.MUTATING_WEBHOOK_CONFIGURATIONS, MUTATING_NAME)
        ca = base64.b64decode(configuration["webhooks"][0]["clientConfig"]["caBundle"]).decode()
        return ssl.create_default_context(cadata=ca)

    async def post(self, path: str, body: bytes, content_type: str = "application/json") -> tuple[int, Any]:
        context = await self.ssl_context()
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                f"https://127.0.0.1:{self.port}{path}",
                data=body,
                headers={"Content-Type": content_type},
                ssl=context,
            ) as response,
        ):
            text = await response.text()
            return response.status, json.loads(text) if response.content_type == "application/json" else text


def options(tmp_path: Path, **overrides: Any) -> ManagerOptions:
    settings: dict[str, Any] = {
        "webhook_port": 0,
        "webhook_bind_host": "127.0.0.1",
        "webhook_host": "127.0.0.1",
        "webhook_cert_dir": tmp_path / "certs",
        "metrics_addr": ("127.0.0.1", 0),
        "health_probe_addr": ("127.0.0.1", 0),
    }
    settings.update(overrides)
    return ManagerOptions(**settings)


async def start(client: ApiClient, tmp_path: Path, **overrides: Any) -> Manager:
    manager = Manager(options(tmp_path, **overrides), client)
    manager.ctx.rand_intn = lambda _n: DRAW
    await manager.start()
    async with asyncio.timeout(30):
        while problem := await manager.readiness():
            assert "informer" in problem or "not set up" in problem or "handshake" in problem, problem
            await asyncio.sleep(0.05)
    return manager


@pytest.fixture
async def fake() -> AsyncIterator[FakeApiServer]:
    async with FakeApiServer() as server:
        for crd in sorted((ROOT / "crds").glob("*.yaml")):
            server.register_crd(crd)
        yield server


@pytest.fixture
async def running(fake: FakeApiServer, tmp_path: Path) -> AsyncIterator[Running]:
    async with fake.client() as client:
        await seed(client)
        manager = await start(client, tmp_path)
        try:
            yield Running(manager, client)
        finally:
            await manager.stop()


def site_url(manager: Manager, index: int, path: str) -> str:
    return f"http://127.0.0.1:{manager._sites[index].port}{path}"


async def test_probes_and_metrics(running):
    async with aiohttp.ClientSession() as session:
        async with session.get(site_url(running.manager, 0, "/readyz")) as response:
            assert (response.status, await response.text()) == (200, "ok")
        async with session.get(site_url(running.manager, 0, "/healthz")) as response:
            assert response.status == 200
        status, _ = await running.post("/validate-pod", orjson.dumps(review(make_pod().qos("BE").build())))
        assert status == 200
        async with session.get(site_url(running.manager, 1, "/metrics")) as response:
            metrics = await response.text()
    assert (
        'koord_manager_webhook_webhook_duration_milliseconds_count{object_type="pod",operation="CREATE",'
        'plugin_name="ClusterColocationProfile",status="rejected",webhook_type="validate"} 1.0'
    ) in metrics
    assert (
        'koord_manager_webhook_quota_shared_weight{elasticquota_name="team-a",resource_name="cpu"} 50.0'
        in metrics
    )


async def test_webhook_server_answers_over_tls(running):
    body = (DATA / "reviews" / "batch-pod.yaml").read_text()
    status, answer = await running.post("/mutate-pod", orjson.dumps(yaml.safe_load(body)))
    assert status == 200
    assert answer["response"]["allowed"] is True
    assert answer["response"]["patchType"] == "JSONPatch"


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        pytest.param("GET", "/mutate-pod", 405, id="get-on-a-webhook"),
        pytest.param("POST", "/validate-node", 404, id="gate-off-path-not-served"),
        pytest.param("GET", "/healthz", 200, id="healthz-on-webhook-port"),
        pytest.param("GET", "/readyz", 200, id="readyz-on-webhook-port"),
        pytest.param("GET", "/elasticQuota", 200, id="quota-debug"),
    ],
)
async def test_webhook_port_routes(running, method, path, status):
    context = await running.ssl_context()
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, f"https://127.0.0.1:{running.port}{path}", ssl=context) as response,
    ):
        assert response.status == status


async def test_garbage_over_tls_gets_an_error_review_and_the_server_stays_up(running):
    status, answer = await running.post("/validate-pod", b"\x00\xffnot json")
    assert status == 200
    assert answer["response"]["status"]["code"] == 400
    status, answer = await running.post("/validate-pod", b"x" * (8 * 1024 * 1024))
    assert (status, answer["response"]["status"]["code"]) == (200, 400)
    assert "too large" in answer["response"]["status"]["message"]
    status, _ = await running.post("/validate-pod", orjson.dumps(review(make_pod().build())))
    assert status == 200


async def test_a_body_past_the_servers_limit_gets_an_error_review(running):
    status, answer = await running.post("/validate-pod", b"x" * (15 * 1024 * 1024))
    assert (status, answer["response"]["status"]["code"]) == (200, 400)
    assert "too large" in answer["response"]["status"]["message"]
    status, _ = await running.post("/validate-pod", orjson.dumps(review(make_pod().build())))
    assert status == 200


async def test_a_body_that_arrives_after_its_headers_is_waited_for(running):
    body = orjson.dumps(review(make_pod().build()))
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", running.port, ssl=await running.ssl_context(), server_hostname="localhost"
    )
    try:
        head = (
            f"POST /validate-pod HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        )
        writer.write(head.encode() + body[:10])
        await writer.drain()
        await asyncio.sleep(0.2)
        writer.write(body[10:])
        await writer.drain()
        reply = await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()
    status_line, _, rest = reply.partition(b"\r\n")
    assert status_line == b"HTTP/1.1 200 OK"
    answer = orjson.loads(rest.partition(b"\r\n\r\n")[2])
    assert answer["response"]["allowed"] is True
    assert answer["response"]["uid"] == orjson.loads(body)["request"]["uid"]


async def test_restart_with_a_rotated_certificate(fake, tmp_path):
    async with fake.client() as client:
        await seed(client)
        first = await start(client, tmp_path)
        first_bundle = first.tls.loaded
        await first.stop()
        assert first_bundle is not None
        # the certificate is about to expire: the next manager must renew it (same CA)
        cert, key = issue_serving_certificate(
            first_bundle.ca_cert,
            first_bundle.ca_key,
            "127.0.0.1",
            validity=datetime.timedelta(days=1),
        )
        store = SecretCertStore(client, "koordinator-system", "koordinator-webhook-certs")
        current = await store.read()
        await store.write(CertBundle(first_bundle.ca_cert, first_bundle.ca_key, cert, key), current)
        second = await start(client, tmp_path)
        try:
            renewed = second.tls.loaded
            assert renewed is not None
            assert renewed.cert not in (cert, first_bundle.cert)
            assert renewed.ca_cert == first_bundle.ca_cert
            running = Running(second, client)
            status, answer = await running.post("/validate-pod", orjson.dumps(review(make_pod().build())))
            assert (status, answer["response"]["allowed"]) == (200, True)
        finally:
            await second.stop()


async def test_a_failing_runnable_stops_the_manager(running):
    async def broken() -> None:
        raise RuntimeError("controller crashed")

    manager = running.manager
    manager._tasks.append(asyncio.create_task(broken(), name="broken-controller"))
    with pytest.raises(Exception, match="runnable broken-controller stopped: controller crashed"):
        async with asyncio.timeout(5):
            await manager.wait()


@pytest.mark.parametrize(
    ("review_file", "path"),
    [
        pytest.param("batch-pod.yaml", "/mutate-pod", id="mutate-batch-pod"),
        pytest.param("batch-pod.yaml", "/validate-pod", id="validate-batch-pod"),
        pytest.param("lsr-fractional-cpu.yaml", "/validate-pod", id="validate-lsr-v1beta1"),
        pytest.param(
            "quota-child.yaml", "/mutate-scheduling-sigs-k8s-io-v1alpha1-elasticquota", id="mutate-quota"
        ),
        pytest.param(
            "quota-child.yaml", "/validate-scheduling-sigs-k8s-io-v1alpha1-elasticquota", id="validate-quota"
        ),
    ],
)
async def test_admit_command_answers_like_the_server(running, review_file, path, capsys):
    source = DATA / "reviews" / review_file
    _, served = await running.post(path, orjson.dumps(yaml.safe_load(source.read_text())))
    code = await asyncio.to_thread(
        koord_manager,
        [
            "admit",
            "--review",
            str(source),
            "--objects",
            str(CLUSTER),
            "--path",
            path,
            "--random",
            str(DRAW),
            "--output",
            "json",
        ],
    )
    offline = json.loads(capsys.readouterr().out)
    assert offline["review"]["response"] == served["response"]
    assert offline["review"]["apiVersion"] == served["apiVersion"]
    assert code == (0 if served["response"]["allowed"] else 1)


def test_admit_prints_the_patched_object(capsys):
    code = koord_manager(
        [
            "admit",
            "--review",
            str(DATA / "reviews" / "batch-pod.yaml"),
            "--objects",
            str(CLUSTER),
            "--random",
            "10",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    header, document = out.split("---\n")
    assert header == "/mutate-pod: allowed (code 200)\n/validate-pod: allowed (code 200)\n"
    pod = yaml.safe_load(document)
    assert pod["metadata"]["labels"]["koordinator.sh/qosClass"] == "BE"
    assert pod["spec"]["containers"][0]["resources"]["requests"] == {
        "kubernetes.io/batch-cpu": "1500",
        "kubernetes.io/batch-memory": "3Gi",
    }
    assert pod["spec"]["terminationGracePeriodSeconds"] == 30


def test_admit_runs_the_apiservers_chain_by_default(capsys):
    """Mutating, then validating on the mutated object: a pod the validating webhook refuses is refused."""
    argv = ["admit", "--review", str(DATA / "reviews" / "lsr-fractional-cpu.yaml"), "--output", "json"]
    code = koord_manager([*argv, "--objects", str(CLUSTER), "--random", "10"])
    result = json.loads(capsys.readouterr().out)
    assert code == 1
    assert [(s["path"], s["response"]["allowed"]) for s in result["steps"]] == [
        ("/mutate-pod", True),
        ("/validate-pod", False),
    ]
    assert result["review"]["response"]["status"]["message"].endswith(
        "the requested CPUs of LSR Pod must be integer"
    )
    assert result["object"] is None
    assert koord_manager([*argv, "--path", "/mutate-pod"]) == 0, "--path runs that webhook alone"


def test_admit_wraps_a_bare_object_and_respects_the_draw(tmp_path, capsys):
    pod = make_pod("bare").namespace("spark").labels(**{"koordinator.sh/enable-colocation": "true"}).build()
    (tmp_path / "pod.json").write_text(json.dumps(pod))
    argv = ["admit", "--review", str(tmp_path / "pod.json"), "--objects", str(CLUSTER), "--output", "json"]
    assert koord_manager([*argv, "--random", "51"]) == 0
    skipped = json.loads(capsys.readouterr().out)
    assert "koordinator.sh/qosClass" not in skipped["object"]["metadata"]["labels"]
    assert skipped["review"]["request"]["operation"] == "CREATE"
    assert koord_manager([*argv, "--random", "50"]) == 0
    applied = json.loads(capsys.readouterr().out)
    assert applied["object"]["metadata"]["labels"]["koordinator.sh/qosClass"] == "BE"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param(["--random", "150"], "--random must be in [0, 100), got 150", id="draw-out-of-range"),
        pytest.param(["--path", "/validate-node"], "no webhook is served at /validate-node", id="gate-off"),
        pytest.param(
            ["--objects", "/nonexistent.yaml"], "cannot read /nonexistent.yaml", id="missing-objects"
        ),
        pytest.param(
            ["--feature-gates", "Bogus=true"], "unrecognized feature gate: Bogus", id="unknown-gate"
        ),
    ],
)
def test_admit_usage_errors_exit_2(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        koord_manager(["admit", "--review", str(DATA / "reviews" / "batch-pod.yaml"), *argv])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err
    assert message in error
    assert error.count("\n") == 1


def test_admit_gates_after_the_subcommand(capsys):
    with pytest.raises(SystemExit) as exit_info:
        koord_manager(
            [
                "admit",
                "--review",
                str(DATA / "reviews" / "lsr-fractional-cpu.yaml"),
                "--path",
                "/validate-pod",
                "--feature-gates",
                "PodValidatingWebhook=false",
            ]
        )
    assert exit_info.value.code == 2
    assert "no webhook is served at /validate-pod" in capsys.readouterr().err


def test_admit_reads_stdin(monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", io.StringIO((DATA / "reviews" / "lsr-fractional-cpu.yaml").read_text()))
    code = koord_manager(["admit", "--review", "-", "--path", "/validate-pod", "--output", "yaml"])
    result = yaml.safe_load(capsys.readouterr().out)
    assert code == 1
    assert result["review"]["response"]["status"]["message"] == (
        'pod.spec.containers[*].resources.requests: Invalid value: "1500m": '
        "the requested CPUs of LSR Pod must be integer"
    )
    assert result["object"] is None
