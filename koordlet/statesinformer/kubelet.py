"""The kubelet client: ``GET /pods`` (and ``/configz``) on the node's own kubelet.

Upstream talks to ``https://<node address>:<kubelet port>/pods/`` with the credentials it
has for the apiserver (the service-account token in a pod; a kubeconfig's token or client
certificate) and without verifying the kubelet's serving certificate (it is usually self-signed),
or to the read-only port over plain HTTP with ``--kubelet-insecure-tls``. The address is
the node's address of ``--kubelet-preferred-address-type`` (InternalIP), the port the
node's ``status.daemonEndpoints.kubeletEndpoint.Port``. Each request has a 3 s timeout
and is timed in ``koordlet_kubelet_request_duration_seconds``.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

from koordinator.kube.config import TokenSource
from koordlet.metrics import KoordletMetrics


class KubeletError(Exception):
    """The kubelet did not answer with what was asked for (error status, garbage, timeout)."""


@dataclass(frozen=True)
class KubeletEndpoint:
    url: str  # scheme://host:port, no trailing slash

    @classmethod
    def for_node(
        cls,
        node: Mapping[str, Any],
        *,
        preferred_address_type: str = "InternalIP",
        read_only_port: int = 10255,
        insecure: bool = False,
    ) -> KubeletEndpoint:
        status = node.get("status") or {}
        addresses = {a.get("type"): a.get("address") for a in status.get("addresses") or ()}
        address = (
            addresses.get(preferred_address_type) or addresses.get("InternalIP") or addresses.get("Hostname")
        )
        if not address:
            raise KubeletError(f"node has no {preferred_address_type} address")
        host = f"[{address}]" if ":" in address else address
        if insecure:
            return cls(f"http://{host}:{read_only_port}")
        port = ((status.get("daemonEndpoints") or {}).get("kubeletEndpoint") or {}).get("Port") or 10250
        return cls(f"https://{host}:{port}")


class KubeletClient:
    def __init__(
        self,
        endpoint: KubeletEndpoint,
        token: TokenSource | None = None,
        *,
        client_cert: tuple[str, str | None] | None = None,
        timeout: float = 3.0,
        metrics: KoordletMetrics | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.token = token
        #: (certificate file, key file) shown to the kubelet's x509 authentication
        self.client_cert = client_cert
        self.timeout = timeout
        self.metrics = metrics
        self._session: aiohttp.ClientSession | None = None

    def _ssl(self) -> ssl.SSLContext | bool:
        if not self.endpoint.url.startswith("https"):
            return False
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE  # upstream: the kubelet's serving cert is not verified
        if self.client_cert is not None:
            context.load_cert_chain(*self.client_cert)
        return context

    async def _get(self, path: str) -> Any:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=self._ssl()),
                timeout=aiohttp.ClientTimeout(total=self.timeout),
            )
        headers = {"Accept": "application/json"}
        if self.token is not None and self.endpoint.url.startswith("https"):
            bearer = await self.token.token()
            if bearer:
                headers["Authorization"] = f"Bearer {bearer}"
        started = time.monotonic()
        code = "error"
        try:
            async with self._session.get(self.endpoint.url + path, headers=headers) as response:
                code = str(response.status)
                body = await response.read()
                if response.status == 401 and self.token is not None:
                    self.token.invalidate()
                if response.status != 200:
                    raise KubeletError(f"GET {path}: HTTP {response.status}: {body[:200]!r}")
        except (aiohttp.ClientError, TimeoutError) as err:
            raise KubeletError(f"GET {path}: {err or type(err).__name__}") from err
        finally:
            if self.metrics is not None:
                self.metrics.kubelet_request_duration_seconds.labels("GET", path, code).observe(
                    time.monotonic() - started
                )
        try:
            return orjson.loads(body)
        except orjson.JSONDecodeError as err:
            raise KubeletError(f"GET {path}: not JSON: {err}") from err

    async def get_pods(self) -> list[dict[str, Any]]:
        """The kubelet's PodList items; KubeletError when the answer is not a PodList.

        A kubelet without pods answers ``"items": null`` (Go's nil slice): no pods."""
        data = await self._get("/pods/")
        if not isinstance(data, dict) or not isinstance(data.get("items") or [], list):
            raise KubeletError("GET /pods/: not a PodList")
        return [p for p in data.get("items") or [] if isinstance(p, dict)]

    async def get_configz(self) -> dict[str, Any]:
        """The kubelet's running configuration (``kubeletconfig`` of ``/configz``)."""
        data = await self._get("/configz")
        if not isinstance(data, dict) or not isinstance(data.get("kubeletconfig"), dict):
            raise KubeletError("GET /configz: no kubeletconfig")
        return dict(data["kubeletconfig"])

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
