"""A koordlet in cluster mode for envtest tests: a stub kubelet serving a PodList, the
Node registered on the real apiserver, and the agent running until the test is done."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

from aiohttp import web

from koordinator.api.features import KOORDLET_FEATURES, FeatureGates
from koordinator.kube import resources as res
from koordinator.kube.client import ApiClient
from koordlet.agent import Agent, AgentConfig
from tests.fakes.host import FakeHost
from tests.polling import eventually

CRDS = Path(__file__).resolve().parents[2] / "crds"
KOORDLET_CRDS = [
    CRDS / "slo.koordinator.sh_nodeslos.yaml",
    CRDS / "slo.koordinator.sh_nodemetrics.yaml",
    CRDS / "topology.node.k8s.io_noderesourcetopologies.yaml",
]


class StubKubelet:
    """``GET /pods/`` answering with ``pods`` (a list the test may change), and
    ``GET /configz`` with ``config`` (a kubelet's defaults unless the test changes it)."""

    def __init__(self) -> None:
        self.pods: list[dict[str, Any]] = []
        self.config: dict[str, Any] = {
            "cpuManagerPolicy": "none",
            "topologyManagerPolicy": "none",
            "topologyManagerScope": "container",
        }
        self._runner: web.AppRunner | None = None
        self.port = 0

    async def start(self) -> StubKubelet:
        async def handler(_request: web.Request) -> web.Response:
            return web.json_response({"kind": "PodList", "apiVersion": "v1", "items": self.pods})

        async def configz(_request: web.Request) -> web.Response:
            return web.json_response({"kubeletconfig": self.config})

        app = web.Application()
        app.router.add_get("/pods/", handler)
        app.router.add_get("/configz", configz)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


async def register_node(client: ApiClient, name: str, capacity: Mapping[str, str] | None = None) -> None:
    """The Node with its address (and capacity) in status, as a kubelet would register it."""
    await client.create(res.NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
    node = await client.get(res.NODES, name)
    resources = dict(capacity or {})
    node["status"] = {
        "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
        "capacity": resources,
        "allocatable": resources,
    }
    await client.replace_status(res.NODES, node)


def agent_config(node_name: str, host: FakeHost, kubelet: StubKubelet, **gates: bool) -> AgentConfig:
    return AgentConfig(
        node_name=node_name,
        paths=host.paths,
        gates=FeatureGates(KOORDLET_FEATURES, gates),
        host="127.0.0.1",
        port=0,
        kubelet_insecure_tls=True,
        kubelet_read_only_port=kubelet.port,
    )


@contextlib.asynccontextmanager
async def running_agent(config: AgentConfig, client: ApiClient) -> AsyncIterator[Agent]:
    """The agent, once it is ready; stopped (and checked to stop cleanly) afterwards."""
    agent = Agent(config, client=client)
    stop = asyncio.Event()
    run = asyncio.create_task(agent.run(stop))
    try:
        await eventually(lambda: agent.ready or run.done(), within=60)
        if run.done():
            run.result()
        yield agent
    finally:
        stop.set()
        await asyncio.wait_for(run, 30)
