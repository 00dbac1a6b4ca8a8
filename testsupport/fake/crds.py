"""CustomResourceDefinitions in the fake apiserver: serving a CRD's kinds once it is created
(Established at once, with the conditions and accepted names the apiserver writes) and
deleting every custom resource when the CRD goes."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from koordinator.kube.resources import CUSTOM_RESOURCE_DEFINITIONS
from testsupport.fake import status as st
from testsupport.fake.objects import meta_of
from testsupport.fake.registry import ResourceType

if TYPE_CHECKING:
    from testsupport.fake.state import ClusterState

Obj = dict[str, Any]


def establish_crd(state: ClusterState, rtype: ResourceType, crd: Obj) -> None:
    try:
        added = state.registry.register_crd(crd, state.schema_validator)
    except ValueError as exc:
        raise st.invalid(
            rtype.kind,
            rtype.group,
            str(meta_of(crd).get("name") or ""),
            [st.Cause("FieldValueInvalid", str(exc), "spec")],
        ) from None
    for served in added:
        state.type_start.setdefault(served.storage_key, state.rv)
    names = (crd.get("spec") or {}).get("names") or {}
    now = state.now()
    updated = copy.deepcopy(crd)
    updated["status"] = {
        "conditions": [
            {
                "type": "NamesAccepted",
                "status": "True",
                "lastTransitionTime": now,
                "reason": "NoConflicts",
                "message": "no conflicts found",
            },
            {
                "type": "Established",
                "status": "True",
                "lastTransitionTime": now,
                "reason": "InitialNamesAccepted",
                "message": "the initial names have been accepted",
            },
        ],
        "acceptedNames": {
            k: v
            for k, v in names.items()
            if k in ("plural", "singular", "kind", "listKind", "shortNames", "categories")
        },
        "storedVersions": [
            v["name"] for v in (crd.get("spec") or {}).get("versions") or () if v.get("storage")
        ],
    }
    state.commit(rtype, "MODIFIED", updated, crd)


def register_crd(state: ClusterState, crd: Obj) -> Obj:
    """Create a CRD object as a client would (it is established at once)."""
    rtype = state.registry.for_resource(CUSTOM_RESOURCE_DEFINITIONS)
    body = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", **crd}
    body["metadata"] = {
        k: v
        for k, v in (crd.get("metadata") or {}).items()
        if k not in ("resourceVersion", "uid", "creationTimestamp")
    }
    state.create(rtype, None, body, manager="koordinator-fake")
    return state.objects(rtype)[("", str(body["metadata"]["name"]))]


def remove_crd(state: ClusterState, crd: Obj) -> None:
    name = str(meta_of(crd).get("name") or "")
    types = state.registry.remove_crd(name)
    for rtype in types:
        for obj in list(state.objects(rtype).values()):
            gone = copy.deepcopy(obj)
            state.commit(rtype, "DELETED", gone, obj)
        for watcher in list(state.watchers_by_type.pop(rtype.storage_key, ())):
            watcher.close()
