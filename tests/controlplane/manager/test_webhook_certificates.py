"""Self-managed TLS: validity, the Secret, caBundle patching, renewal, CA rotation, live reload."""

from __future__ import annotations

import asyncio
import base64
import datetime
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from cryptography import x509

from controlplane.manager.certs import (
    CertBundle,
    CertController,
    CertError,
    CertPolicy,
    ClientConfigTarget,
    DirectoryCertStore,
    SecretCertStore,
    ServingTLS,
    certificate_valid,
    generate_bundle,
    generate_ca,
    issue_serving_certificate,
    probe_tls,
    service_dns_name,
)
from controlplane.reactor.serving import start_site
from koordinator.kube import resources as res
from koordinator.kube.client import ApiClient
from testsupport.fake import FakeApiServer

DNS = service_dns_name("koordinator-webhook-service", "koordinator-system")
NOW = datetime.datetime.now(datetime.UTC)
DAY = datetime.timedelta(days=1)


def webhook(name: str, path: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "admissionReviewVersions": ["v1", "v1beta1"],
        "sideEffects": "None",
        "failurePolicy": "Fail",
        "clientConfig": {"service": {"name": "svc", "namespace": "ns", "path": path, "port": 443}},
        "rules": [
            {"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}
        ],
        **extra,
    }


MUTATING_NAME = "koordinator-mutating-webhook-configuration"
VALIDATING_NAME = "koordinator-validating-webhook-configuration"
MUTATING: dict[str, Any] = {
    "apiVersion": "admissionregistration.k8s.io/v1",
    "kind": "MutatingWebhookConfiguration",
    "metadata": {"name": "koordinator-mutating-webhook-configuration"},
    "webhooks": [
        webhook("mpod-create.koordinator.sh", "/mutate-pod"),
        webhook("mnode.koordinator.sh", "/mutate-node-status"),
    ],
}
VALIDATING: dict[str, Any] = {
    "apiVersion": "admissionregistration.k8s.io/v1",
    "kind": "ValidatingWebhookConfiguration",
    "metadata": {"name": "koordinator-validating-webhook-configuration"},
    "webhooks": [webhook("vpod.koordinator.sh", "/validate-pod")],
}


@pytest.mark.parametrize(
    ("check_name", "at", "valid"),
    [
        pytest.param(DNS, NOW, True, id="service-name-now"),
        pytest.param("localhost", NOW, True, id="localhost"),
        pytest.param("other.svc", NOW, False, id="other-name"),
        pytest.param(DNS, NOW + 400 * DAY, False, id="after-expiry"),
    ],
)
def test_certificate_validity(check_name, at, valid):
    bundle = generate_bundle(DNS)
    assert certificate_valid(bundle, check_name, at) is valid


def test_ip_host_gets_an_ip_san():
    bundle = generate_bundle("127.0.0.1")
    assert certificate_valid(bundle, "127.0.0.1")
    san = bundle.serving_certificate().extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["localhost"]


@pytest.mark.parametrize(
    "broken",
    [
        pytest.param("other-key", id="key-does-not-match"),
        pytest.param("other-ca", id="signed-by-another-ca"),
        pytest.param("garbage", id="not-pem"),
    ],
)
def test_invalid_bundles(broken):
    bundle = generate_bundle(DNS)
    other = generate_bundle(DNS)
    if broken == "other-key":
        bundle = CertBundle(bundle.ca_cert, bundle.ca_key, bundle.cert, other.key)
    elif broken == "other-ca":
        bundle = CertBundle(other.ca_cert, other.ca_key, bundle.cert, bundle.key)
    else:
        bundle = CertBundle(b"x", b"y", b"z", b"w")
    assert certificate_valid(bundle, DNS) is False


@pytest.fixture
async def cluster() -> AsyncIterator[ApiClient]:
    async with FakeApiServer() as fake, fake.client() as client:
        await client.ensure_namespace("koordinator-system")
        await client.create(res.MUTATING_WEBHOOK_CONFIGURATIONS, dict(MUTATING))
        await client.create(res.VALIDATING_WEBHOOK_CONFIGURATIONS, dict(VALIDATING))
        yield client


def controller(client: ApiClient, tmp_path: Path, **overrides: Any) -> CertController:
    options: dict[str, Any] = {
        "store": SecretCertStore(client, "koordinator-system", "koordinator-webhook-certs"),
        "dns_name": DNS,
        "cert_dir": tmp_path / "certs",
        "tls": ServingTLS(),
        "served_paths": ["/mutate-pod", "/validate-pod"],
        "target": ClientConfigTarget("koordinator-system", "koordinator-webhook-service"),
        "client": client,
    }
    options.update(overrides)
    return CertController(**options)


async def stored_bundle(client: ApiClient) -> CertBundle:
    bundle = await SecretCertStore(client, "koordinator-system", "koordinator-webhook-certs").read()
    assert bundle is not None
    return bundle


async def ca_bundles(client: ApiClient) -> list[bytes]:
    bundles = []
    for resource, name in (
        (res.MUTATING_WEBHOOK_CONFIGURATIONS, MUTATING_NAME),
        (res.VALIDATING_WEBHOOK_CONFIGURATIONS, VALIDATING_NAME),
    ):
        configuration = await client.get(resource, name)
        bundles += [base64.b64decode(w["clientConfig"]["caBundle"]) for w in configuration["webhooks"]]
    return bundles


async def test_first_sync_creates_secret_and_patches_configurations(cluster, tmp_path):
    certs = controller(cluster, tmp_path)
    await certs.sync()
    secret = await cluster.get(res.SECRETS, "koordinator-webhook-certs", "koordinator-system")
    assert sorted(secret["data"]) == [
        "ca-cert.pem",
        "ca-key.pem",
        "cert.pem",
        "key.pem",
        "tls.crt",
        "tls.key",
    ]
    bundle = await stored_bundle(cluster)
    assert certificate_valid(bundle, DNS)
    assert await ca_bundles(cluster) == [bundle.ca_cert, bundle.ca_cert]
    mutating = await cluster.get(res.MUTATING_WEBHOOK_CONFIGURATIONS, MUTATING_NAME)
    assert [w["name"] for w in mutating["webhooks"]] == ["mpod-create.koordinator.sh"]  # node path not served
    assert mutating["webhooks"][0]["clientConfig"]["service"] == {
        "name": "koordinator-webhook-service",
        "namespace": "koordinator-system",
        "path": "/mutate-pod",
        "port": 443,
    }
    assert "mnode.koordinator.sh" in mutating["metadata"]["annotations"]["template"]
    assert (tmp_path / "certs" / "tls.crt").read_bytes() == bundle.cert
    assert (tmp_path / "certs" / "key.pem").stat().st_mode & 0o777 == 0o600
    assert certs.initialized.is_set()


async def test_sync_is_idempotent(cluster, tmp_path):
    certs = controller(cluster, tmp_path)
    await certs.sync()
    before = [
        (await cluster.get(res.SECRETS, "koordinator-webhook-certs", "koordinator-system"))["metadata"][
            "resourceVersion"
        ],
        (await cluster.get(res.MUTATING_WEBHOOK_CONFIGURATIONS, MUTATING_NAME))["metadata"][
            "resourceVersion"
        ],
    ]
    await certs.sync()
    after = [
        (await cluster.get(res.SECRETS, "koordinator-webhook-certs", "koordinator-system"))["metadata"][
            "resourceVersion"
        ],
        (await cluster.get(res.MUTATING_WEBHOOK_CONFIGURATIONS, MUTATING_NAME))["metadata"][
            "resourceVersion"
        ],
    ]
    assert before == after


async def test_served_paths_come_back_from_the_template(cluster, tmp_path):
    await controller(cluster, tmp_path).sync()
    await controller(
        cluster, tmp_path, served_paths=["/mutate-pod", "/mutate-node-status", "/validate-pod"]
    ).sync()
    mutating = await cluster.get(res.MUTATING_WEBHOOK_CONFIGURATIONS, MUTATING_NAME)
    assert [w["name"] for w in mutating["webhooks"]] == ["mpod-create.koordinator.sh", "mnode.koordinator.sh"]


async def test_webhook_host_turns_services_into_urls(cluster, tmp_path):
    target = ClientConfigTarget("koordinator-system", "svc", host="10.0.0.7", port=9876)
    await controller(cluster, tmp_path, dns_name="10.0.0.7", target=target).sync()
    validating = await cluster.get(res.VALIDATING_WEBHOOK_CONFIGURATIONS, VALIDATING_NAME)
    config = validating["webhooks"][0]["clientConfig"]
    assert config["url"] == "https://10.0.0.7:9876/validate-pod"
    assert "service" not in config


async def test_missing_configuration_is_reported(tmp_path):
    async with FakeApiServer() as fake, fake.client() as client:
        await client.ensure_namespace("koordinator-system")
        with pytest.raises(
            CertError,
            match="not found MutatingWebhookConfiguration koordinator-mutating-webhook-configuration",
        ):
            await controller(client, tmp_path).sync()


async def test_expiring_serving_certificate_is_renewed_with_the_same_ca(cluster, tmp_path):
    ca_cert, ca_key = generate_ca()
    cert, key = issue_serving_certificate(ca_cert, ca_key, DNS, validity=datetime.timedelta(days=30))
    store = SecretCertStore(cluster, "koordinator-system", "koordinator-webhook-certs")
    await store.write(CertBundle(ca_cert, ca_key, cert, key), None)
    await controller(cluster, tmp_path).sync()
    renewed = await stored_bundle(cluster)
    assert renewed.cert != cert
    assert renewed.ca_cert == ca_cert
    assert renewed.serving_certificate().not_valid_after_utc > NOW + 300 * DAY


async def test_ca_rotation_publishes_both_cas_then_only_the_new_one(cluster, tmp_path):
    old_ca, old_key = generate_ca(validity=datetime.timedelta(days=100))
    cert, key = issue_serving_certificate(old_ca, old_key, DNS, validity=datetime.timedelta(days=90))
    await SecretCertStore(cluster, "koordinator-system", "koordinator-webhook-certs").write(
        CertBundle(old_ca, old_key, cert, key), None
    )
    clock = [0.0]
    certs = controller(cluster, tmp_path, clock=lambda: clock[0], ca_overlap=600.0)
    await certs.sync()
    new = await stored_bundle(cluster)
    assert new.ca_cert != old_ca
    assert await ca_bundles(cluster) == [new.ca_cert + old_ca] * 2
    clock[0] = 601.0
    await certs.sync()
    assert await ca_bundles(cluster) == [new.ca_cert] * 2


async def test_concurrent_replicas_end_up_with_one_certificate(cluster, tmp_path):
    first, second = controller(cluster, tmp_path / "a"), controller(cluster, tmp_path / "b")
    await asyncio.gather(first.sync(), second.sync())
    bundle = await stored_bundle(cluster)
    assert first.tls.loaded is not None
    assert second.tls.loaded is not None
    assert first.tls.loaded.cert == second.tls.loaded.cert == bundle.cert


async def test_directory_store_round_trip(tmp_path):
    store = DirectoryCertStore(tmp_path)
    assert await store.read() is None
    bundle = generate_bundle(DNS)
    await store.write(bundle, None)
    assert await store.read() == bundle


async def _get(
    port: int, ca: bytes, reader_writer: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
):
    if reader_writer is None:
        context = ssl.create_default_context(cadata=ca.decode())
        reader_writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=context, server_hostname="localhost"
        )
    reader, writer = reader_writer
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    await reader.readexactly(2)  # "ok"
    peer = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    return reader_writer, x509.load_der_x509_certificate(peer).serial_number


async def test_reload_keeps_open_connections_and_new_ones_see_the_new_certificate(tmp_path):
    app = web.Application()

    async def ok(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    app.router.add_get("/healthz", ok)
    tls = ServingTLS()
    first = generate_bundle("localhost")
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "cert.pem").write_bytes(first.cert)
    (tmp_path / "a" / "key.pem").write_bytes(first.key)
    tls.load(tmp_path / "a" / "cert.pem", tmp_path / "a" / "key.pem", first)
    site = await start_site(app, "127.0.0.1", 0, tls.context)
    try:
        connection, serial = await _get(site.port, first.ca_cert)
        assert serial == first.serving_certificate().serial_number
        second = generate_bundle("localhost", ca=(first.ca_cert, first.ca_key))
        (tmp_path / "b").mkdir()
        (tmp_path / "b" / "cert.pem").write_bytes(second.cert)
        (tmp_path / "b" / "key.pem").write_bytes(second.key)
        tls.load(tmp_path / "b" / "cert.pem", tmp_path / "b" / "key.pem", second)
        _, still = await _get(site.port, first.ca_cert, connection)
        assert still == first.serving_certificate().serial_number  # the open connection carries on
        fresh, serial = await _get(site.port, first.ca_cert)
        assert serial == second.serving_certificate().serial_number
        for _, writer in (connection, fresh):
            writer.close()
    finally:
        await site.stop()


# ---- readiness: the serving context presents a certificate that verifies against the CA -----------


def load_pair(tls: ServingTLS, directory: Path, pair: CertBundle, claimed: CertBundle | None = None) -> None:
    """Load ``pair``'s certificate and key, telling ``tls`` they are ``claimed`` (default: ``pair``)."""
    directory.mkdir(exist_ok=True)
    (directory / "cert.pem").write_bytes(pair.cert)
    (directory / "key.pem").write_bytes(pair.key)
    tls.load(directory / "cert.pem", directory / "key.pem", claimed or pair)


async def served_verdict(tls: ServingTLS, ca: bytes) -> str:
    """What a client connecting to a server on ``tls.context`` finds (the handshake probes used to make)."""
    app = web.Application()
    site = await start_site(app, "127.0.0.1", 0, tls.context)
    try:
        return await probe_tls("127.0.0.1", site.port, ca)
    finally:
        await site.stop()


async def test_presented_certificate_that_verifies_is_ready_as_a_client_finds(tmp_path):
    tls = ServingTLS()
    good = generate_bundle(DNS)
    load_pair(tls, tmp_path / "a", good)
    assert tls.presents_valid() == ""
    assert await served_verdict(tls, good.ca_cert) == ""


@pytest.mark.parametrize(
    "broken",
    [
        pytest.param("other-ca", id="signed-by-another-ca"),
        pytest.param("expired", id="expired"),
        pytest.param("not-yet-valid", id="not-yet-valid"),
    ],
)
async def test_presented_certificate_that_does_not_verify_is_not_ready(tmp_path, broken):
    tls = ServingTLS()
    current = generate_bundle(DNS)
    if broken == "other-ca":
        pair = generate_bundle(DNS)
    elif broken == "expired":
        pair = generate_bundle(
            DNS, CertPolicy(serving_validity=DAY), ca=(current.ca_cert, current.ca_key), now=NOW - 30 * DAY
        )
    else:
        pair = generate_bundle(DNS, ca=(current.ca_cert, current.ca_key), now=NOW + 2 * DAY)
    load_pair(tls, tmp_path / "a", pair, claimed=current)
    problem = tls.presents_valid()
    assert "certificate verify failed" in problem, problem
    assert "certificate verify failed" in await served_verdict(tls, current.ca_cert)


async def test_readiness_follows_each_loaded_certificate(tmp_path):
    tls = ServingTLS()
    first = generate_bundle(DNS)
    load_pair(tls, tmp_path / "a", first)
    assert tls.presents_valid() == ""
    rotated = generate_bundle(DNS)  # a new CA
    load_pair(tls, tmp_path / "b", rotated, claimed=first)  # served, but the current CA is still the old one
    assert "certificate verify failed" in tls.presents_valid()
    load_pair(tls, tmp_path / "b", rotated)  # the current CA is the new one
    assert tls.presents_valid() == ""
    assert await served_verdict(tls, rotated.ca_cert) == ""
    assert "certificate verify failed" in await served_verdict(tls, first.ca_cert)


def test_nothing_loaded_is_not_ready():
    assert ServingTLS().presents_valid() == "no serving certificate loaded"


async def test_controller_is_ready_after_its_first_sync_only(cluster, tmp_path):
    certs = controller(cluster, tmp_path)
    assert certs.serving_valid() == "webhook certificates are not set up yet"
    await certs.sync()
    assert certs.serving_valid() == ""
    assert certs.tls.loaded is not None
    assert await served_verdict(certs.tls, certs.tls.loaded.ca_cert) == ""


def test_loading_a_broken_pair_keeps_the_current_certificate(tmp_path):
    tls = ServingTLS()
    good = generate_bundle("localhost")
    (tmp_path / "cert.pem").write_bytes(good.cert)
    (tmp_path / "key.pem").write_bytes(good.key)
    tls.load(tmp_path / "cert.pem", tmp_path / "key.pem", good)
    (tmp_path / "bad.pem").write_bytes(b"not a certificate")
    with pytest.raises(CertError, match="cannot load"):
        tls.load(tmp_path / "bad.pem", tmp_path / "key.pem", good)
    assert tls.loaded == good
    assert tls.ready


def test_policy_defaults_match_upstream_lifetimes():
    policy = CertPolicy()
    assert (policy.ca_validity, policy.renew_before) == (3650 * DAY, 180 * DAY)
