"""Every control-plane gate the manager accepts changes what it does or is reported; WebhookFramework."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import aiohttp
import pytest

from controlplane.manager.gates import NOT_BUILT, OTHER_COMPONENTS
from controlplane.manager.manager import Manager
from koordinator.api.features import CONTROL_PLANE_FEATURES, FeatureGates
from koordinator.kube import resources as res
from tests.controlplane.manager.test_manager_server import fake, options, seed, site_url
from testsupport.fake import FakeApiServer

__all__ = ["fake"]

ROOT = Path(__file__).resolve().parents[3]
MANAGER = ROOT / "controlplane" / "manager"


def gates_read_by_the_manager() -> set[str]:
    """Gate names that appear as string literals in the manager's code (its gate tables aside)."""
    found: set[str] = set()
    for source in MANAGER.rglob("*.py"):
        if source.name == "gates.py" and source.parent == MANAGER:
            continue
        found |= set(re.findall(r"[\"']([A-Z][A-Za-z0-9]+)[\"']", source.read_text()))
    return found & set(CONTROL_PLANE_FEATURES)


@pytest.mark.parametrize("gate", sorted(CONTROL_PLANE_FEATURES))
def test_every_gate_is_read_or_reported(gate):
    groups = [
        name
        for name, member in (
            ("read", gate in gates_read_by_the_manager()),
            ("not built", gate in NOT_BUILT),
            ("other component", gate in OTHER_COMPONENTS),
        )
        if member
    ]
    assert len(groups) == 1, f"{gate}: {groups or 'accepted and ignored'}"


async def test_foreign_gates_are_reported_at_start(fake: FakeApiServer, tmp_path, caplog):
    gates = FeatureGates(CONTROL_PLANE_FEATURES, {"SyncBarrier": True, "WebhookFramework": False})
    caplog.set_level(logging.INFO, logger="controlplane.manager.manager")
    async with fake.client() as client:
        manager = Manager(options(tmp_path, gates=gates), client)
        try:
            await manager.start()
        finally:
            await manager.stop()
    messages = [r.getMessage() for r in caplog.records]
    assert not any("is not implemented in this release" in m for m in messages)
    assert (
        "feature gate SyncBarrier=true has no effect on koord-manager (koord-scheduler reads it)" in messages
    )


async def test_webhook_framework_off_serves_no_webhooks_and_writes_no_certificates(
    fake: FakeApiServer, tmp_path
):
    gates = FeatureGates(CONTROL_PLANE_FEATURES, {"WebhookFramework": False})
    async with fake.client() as client:
        await seed(client)
        fake.record_requests = True
        manager = Manager(options(tmp_path, gates=gates), client)
        try:
            await manager.start()
            assert await manager.readiness() == ""
            assert manager.webhook_site is None
            assert [site.port for site in manager._sites] != []  # health and metrics still serve
            async with (
                aiohttp.ClientSession() as session,
                session.get(site_url(manager, 0, "/readyz")) as response,
            ):
                assert (response.status, await response.text()) == (200, "ok")
        finally:
            await manager.stop()
    touched = {r.path for r in fake.requests}
    assert not any("/secrets" in p or "webhookconfigurations" in p for p in touched), touched
    assert not any(p.endswith("/namespaces") or "/elasticquotas" in p for p in touched), touched
    assert fake.list_objects(res.SECRETS, "koordinator-system") == []
    assert not (tmp_path / "certs").exists()
