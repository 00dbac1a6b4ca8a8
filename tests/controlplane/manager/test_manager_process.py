"""The koord-manager process: it stops cleanly on a signal in every phase, and start-up failures
(a port in use, its namespace missing) are told in one line, not a traceback."""

from __future__ import annotations

import signal
import socket

import pytest

from koordinator.kube import resources as res
from tests.controlplane.manager.process import free_port, launch
from tests.controlplane.manager.test_manager_server import fake, seed
from testsupport.fake import FakeApiServer

__all__ = ["fake"]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_a_signal_while_the_caches_cannot_sync_stops_the_manager(tmp_path, signum):
    """An apiserver out of reach keeps the caches from syncing; a signal ends the wait at once."""
    process = await launch(tmp_path, f"http://127.0.0.1:{free_port()}")
    try:
        await process.until_logged("cannot connect")
        process.proc.send_signal(signum)
        assert await process.exit_code() == 0, process.stderr
    finally:
        await process.kill()
    assert "stop requested while starting" in process.stderr
    assert "Traceback" not in process.stderr


async def test_a_signal_while_leading_stops_cleanly_and_releases_the_lease(tmp_path, fake: FakeApiServer):
    async with fake.client() as client:
        await seed(client)
    process = await launch(tmp_path, fake.url, "--leader-election-namespace=koordinator-system")
    try:
        await process.until_ready()
        await process.until_logged("is the leader")
        process.proc.send_signal(signal.SIGTERM)
        assert await process.exit_code() == 0, process.stderr
    finally:
        await process.kill()
    lease = fake.get(res.LEASES, "koordinator-manager", "koordinator-system")
    assert lease["spec"].get("holderIdentity", "") == ""
    assert "Traceback" not in process.stderr


async def test_a_port_in_use_is_one_line(tmp_path, fake: FakeApiServer):
    async with fake.client() as client:
        await seed(client)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        process = await launch(tmp_path, fake.url, f"--metrics-addr=127.0.0.1:{port}")
        assert await process.exit_code() == 1
    errors = [line for line in process.stderr.splitlines() if line.startswith("E")]
    assert len(errors) == 1, process.stderr
    assert errors[0].endswith(
        f"cannot listen on 127.0.0.1:{port}: address already in use (set --metrics-addr)"
    )
    assert "Traceback" not in process.stderr


async def test_a_missing_namespace_is_one_line(tmp_path, fake: FakeApiServer):
    process = await launch(tmp_path, fake.url)
    assert await process.exit_code() == 1
    errors = [line for line in process.stderr.splitlines() if line.startswith("E")]
    assert len(errors) == 1, process.stderr
    assert 'namespaces "koordinator-system" not found' in errors[0]
    assert "--webhook-namespace/POD_NAMESPACE" in errors[0]
    assert "Traceback" not in process.stderr
