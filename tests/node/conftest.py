"""Fixtures of the node-tier modules."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from koordinator.kube.client import ApiClient
from tests.nodetier import delete_pods


@pytest.fixture
async def pods(node_client: ApiClient) -> AsyncIterator[list[str]]:
    """The names of the pods a test creates (in ``default``), deleted afterwards."""
    names: list[str] = []
    yield names
    await delete_pods(node_client, "default", names)
