"""LIST in the fake apiserver: selectors, resourceVersion semantics and pagination.

``resourceVersion`` unset or ``"0"`` lists the current state; ``Exact`` rewinds the event
history to the requested version (410 once that history is gone); a version in the future
is a 504, as the apiserver answers after waiting. ``limit``/``continue`` pages are served
from a snapshot taken by the first page, so a paginated list is consistent; a continue
token outlives neither its snapshot nor a compaction (410).
"""

from __future__ import annotations

import base64
import uuid
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from koordinator.api.selectors import FieldSelector, LabelSelector, SelectorError
from testsupport.fake import status as st
from testsupport.fake.registry import ResourceType

if TYPE_CHECKING:
    from testsupport.fake.state import ClusterState

Obj = dict[str, Any]
Key = tuple[str, str]  # (namespace or "", name)
_MAX_SNAPSHOTS = 64


@dataclass
class ListSnapshot:
    rv: int
    items: list[Obj]
    api_version: str


class Lister:
    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self.snapshots: OrderedDict[str, ListSnapshot] = OrderedDict()

    def filter(
        self,
        rtype: ResourceType,
        items: Iterator[tuple[Key, Obj]] | list[tuple[Key, Obj]],
        namespace: str | None,
        labels: LabelSelector,
        fields: FieldSelector,
    ) -> list[Obj]:
        out = []
        for (ns, _), obj in sorted(items, key=lambda kv: kv[0]):
            if namespace and rtype.namespaced and ns != namespace:
                continue
            if not labels.empty and not labels.matches((obj.get("metadata") or {}).get("labels") or {}):
                continue
            if not fields.empty and not fields.matches(rtype.field_labels(obj)):
                continue
            out.append(obj)
        return out

    def parse_selectors(
        self, rtype: ResourceType, label_selector: str | None, field_selector: str | None
    ) -> tuple[LabelSelector, FieldSelector]:
        try:
            labels = LabelSelector.parse(label_selector)
        except SelectorError as exc:
            raise st.bad_request(f"unable to parse requirement: {exc}") from None
        try:
            fields = FieldSelector.parse(field_selector)
        except SelectorError as exc:
            raise st.bad_request(str(exc)) from None
        unsupported = sorted(fields.fields - rtype.supported_fields())
        if unsupported:
            raise st.bad_request(f"field label not supported: {unsupported[0]}")
        return labels, fields

    def _state_at(self, rtype: ResourceType, rv: int) -> dict[Key, Obj]:
        if rv < max(self.state.compacted_rv, self.state.type_start.get(rtype.storage_key, 0)):
            raise st.gone(
                "The resourceVersion for the provided list is too "
                f"old. Current resourceVersion is {self.state.rv}."
            )
        state = dict(self.state.objects(rtype))
        for event in reversed(self.state.history):
            if event.rv <= rv:
                break
            if event.storage != rtype.storage_key:
                continue
            meta = event.obj["metadata"]
            key = (meta.get("namespace", "") if rtype.namespaced else "", meta["name"])
            if event.type == "ADDED":
                state.pop(key, None)
            elif event.prev is not None:
                state[key] = event.prev
        return state

    def list_objects(
        self,
        rtype: ResourceType,
        namespace: str | None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int = 0,
        continue_token: str | None = None,
        resource_version: str | None = None,
        resource_version_match: str | None = None,
    ) -> Obj:
        if continue_token:
            return self._continue(rtype, continue_token, limit)
        labels, fields = self.parse_selectors(rtype, label_selector, field_selector)
        list_rv = self.state.rv
        source: dict[Key, Obj] = self.state.objects(rtype)
        if resource_version and resource_version != "0":
            try:
                wanted = int(resource_version)
            except ValueError:
                raise st.bad_request(f'invalid resource version "{resource_version}"') from None
            if wanted > self.state.rv:
                raise st.StatusError(
                    504,
                    "Timeout",
                    f"Timeout: Too large resource version: {wanted}, current: {self.state.rv}",
                    {
                        "causes": [
                            {"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}
                        ],
                        "retryAfterSeconds": 1,
                    },
                )
            if resource_version_match == "Exact":
                source = self._state_at(rtype, wanted)
                list_rv = wanted
        elif resource_version_match == "Exact":
            raise st.bad_request('resourceVersionMatch "Exact" requires a non-zero resourceVersion')
        items = self.filter(rtype, list(source.items()), namespace, labels, fields)
        return self._page(rtype, items, list_rv, limit)

    def _page(
        self,
        rtype: ResourceType,
        items: list[Obj],
        list_rv: int,
        limit: int,
        offset: int = 0,
        token_id: str = "",
    ) -> Obj:
        meta: Obj = {"resourceVersion": str(list_rv)}
        page = items[offset:]
        if limit and len(page) > limit:
            page = page[:limit]
            if not token_id:
                token_id = uuid.uuid4().hex
                self.snapshots[token_id] = ListSnapshot(list_rv, items, rtype.resource.api_version)
                while len(self.snapshots) > _MAX_SNAPSHOTS:
                    self.snapshots.popitem(last=False)
            next_offset = offset + limit
            token = {"v": "meta.k8s.io/v1", "rv": list_rv, "id": token_id, "offset": next_offset}
            meta["continue"] = base64.urlsafe_b64encode(orjson.dumps(token)).decode().rstrip("=")
            meta["remainingItemCount"] = len(items) - next_offset
        elif token_id:
            self.snapshots.pop(token_id, None)
        strip = not rtype.crd_name
        rendered = [
            {k: v for k, v in o.items() if k not in ("apiVersion", "kind")}
            if strip
            else self.state.served(rtype, o)
            for o in page
        ]
        if rtype.crd_name:
            # custom resources are encoded from a map, keys sorted: the metadata (and the
            # continue token) comes after the items, as the apiserver sends it
            return {
                "apiVersion": rtype.resource.api_version,
                "items": rendered,
                "kind": f"{rtype.kind}List",
                "metadata": meta,
            }
        return {
            "kind": f"{rtype.kind}List",
            "apiVersion": rtype.resource.api_version,
            "metadata": meta,
            "items": rendered,
        }

    def _continue(self, rtype: ResourceType, token: str, limit: int) -> Obj:
        try:
            data = orjson.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
            token_id, offset, rv = str(data["id"]), int(data["offset"]), int(data["rv"])
        except (ValueError, KeyError, TypeError, orjson.JSONDecodeError):
            raise st.bad_request(f"continue key is not valid: {token!r}") from None
        snapshot = self.snapshots.get(token_id)
        if snapshot is None or rv < self.state.compacted_rv:
            raise st.gone(
                "The provided continue parameter is too old to "
                "display a consistent list result. You can start a "
                "new list without the continue parameter."
            )
        return self._page(rtype, snapshot.items, snapshot.rv, limit, offset, token_id)
