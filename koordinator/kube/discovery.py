"""API discovery: find the :class:`~koordinator.kube.resources.Resource` serving a kind or plural.

Reads ``/api/v1`` and ``/apis/<group>/<version>`` (``APIResourceList``) and caches each
group-version. A miss re-reads the group-version once, so a CRD established after the
first lookup is still found.
"""

from __future__ import annotations

from typing import Any

from koordinator.kube.client import ApiClient
from koordinator.kube.errors import KubeError, NotFoundError
from koordinator.kube.resources import Resource


class ResourceNotFoundError(KubeError):
    """No resource with that kind or plural is served in that group-version."""


def _split(api_version: str) -> tuple[str, str]:
    group, sep, version = api_version.rpartition("/")
    return (group, version) if sep else ("", api_version)


class Discovery:
    def __init__(self, client: ApiClient) -> None:
        self.client = client
        self._cache: dict[str, list[Resource]] = {}

    async def _fetch(self, api_version: str) -> list[Resource]:
        group, version = _split(api_version)
        path = f"/apis/{group}/{version}" if group else f"/api/{version}"
        try:
            listing = await self.client.request("GET", path)
        except NotFoundError:
            listing = {"resources": []}
        resources = []
        for entry in listing.get("resources") or ():
            name = str(entry.get("name", ""))
            if not name or "/" in name:
                continue
            resources.append(
                Resource(group, version, name, str(entry.get("kind", "")), bool(entry.get("namespaced")))
            )
        self._cache[api_version] = resources
        return resources

    async def resources(self, api_version: str, refresh: bool = False) -> list[Resource]:
        """Every top-level resource served in ``api_version`` (subresources left out)."""
        if refresh or api_version not in self._cache:
            return await self._fetch(api_version)
        return self._cache[api_version]

    async def _find(self, api_version: str, match: str, by_kind: bool) -> Resource:
        for refresh in (False, True):
            for res in await self.resources(api_version, refresh=refresh):
                if (res.kind if by_kind else res.plural) == match:
                    return res
        what = "kind" if by_kind else "resource"
        raise ResourceNotFoundError(f"no {what} {match!r} is served in {api_version}")

    async def for_kind(self, api_version: str, kind: str) -> Resource:
        return await self._find(api_version, kind, by_kind=True)

    async def for_plural(self, api_version: str, plural: str) -> Resource:
        return await self._find(api_version, plural, by_kind=False)

    async def for_object(self, obj: dict[str, Any]) -> Resource:
        return await self.for_kind(str(obj.get("apiVersion", "")), str(obj.get("kind", "")))

    async def groups(self) -> list[dict[str, Any]]:
        """The ``APIGroupList`` of ``/apis`` plus the core group."""
        listing = await self.client.request("GET", "/apis")
        core = {"name": "", "versions": [{"groupVersion": "v1", "version": "v1"}]}
        return [core, *(listing.get("groups") or [])]
