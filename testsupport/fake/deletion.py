"""DELETE in the fake apiserver: preconditions, propagation policies, finalizers, graceful pod
deletion and namespace termination.

An object with finalizers (including ``foregroundDeletion``/``orphan`` added by the policy)
only gets ``deletionTimestamp`` and stays until an update removes the last finalizer. A pod
bound to a node is deleted gracefully (``deletionGracePeriodSeconds``, the kubelet would
finish it); an unbound or finished pod goes at once, after a final MODIFIED event, as on
the apiserver. A namespace turns Terminating and stays, as no namespace controller runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from koordinator.kube.resources import CUSTOM_RESOURCE_DEFINITIONS, NAMESPACES
from koordinator.kube.timeutil import format_time
from testsupport.fake import crds
from testsupport.fake import status as st
from testsupport.fake.objects import copy_obj
from testsupport.fake.registry import ResourceType

if TYPE_CHECKING:
    from testsupport.fake.state import ClusterState

Obj = dict[str, Any]


def delete(
    state: ClusterState, rtype: ResourceType, namespace: str | None, name: str, options: Obj | None = None
) -> tuple[Obj, bool]:
    """Returns what the apiserver returns and whether the object is gone now."""
    options = options or {}
    old = state.require(rtype, namespace, name)
    meta = old["metadata"]
    pre = options.get("preconditions") or {}
    if pre.get("uid") and pre["uid"] != meta.get("uid"):
        raise st.conflict(
            rtype.kind,
            rtype.group,
            name,
            f"the UID in the precondition ({pre['uid']}) does "
            f"not match the UID in record ({meta.get('uid')}). "
            "The object might have been deleted and then recreated",
        )
    if pre.get("resourceVersion") and pre["resourceVersion"] != meta.get("resourceVersion"):
        raise st.conflict(
            rtype.kind,
            rtype.group,
            name,
            "the ResourceVersion in the precondition "
            f"({pre['resourceVersion']}) does not match the ResourceVersion "
            f"in record ({meta.get('resourceVersion')}). The object might have been modified",
        )
    dry_run = bool(options.get("dryRun"))
    policy = options.get("propagationPolicy")
    if policy is None and options.get("orphanDependents") is not None:
        policy = "Orphan" if options["orphanDependents"] else "Background"
    if policy not in (None, "Orphan", "Background", "Foreground"):
        raise st.invalid(
            "DeleteOptions",
            "meta.k8s.io",
            "",
            [
                st.Cause(
                    "FieldValueNotSupported",
                    f'Unsupported value: "{policy}": supported values: "Foreground", "Background", "Orphan"',
                    "propagationPolicy",
                )
            ],
        )
    new = copy_obj(old)
    new_meta = new["metadata"]
    finalizers = list(new_meta.get("finalizers") or [])
    if policy == "Foreground" and "foregroundDeletion" not in finalizers:
        finalizers.append("foregroundDeletion")
    if policy == "Orphan" and "orphan" not in finalizers:
        finalizers.append("orphan")
    grace = 0
    if rtype.graceful_delete:
        requested = options.get("gracePeriodSeconds")
        spec = old.get("spec") or {}
        grace = int(
            requested if requested is not None else spec.get("terminationGracePeriodSeconds", 30) or 0
        )
        if not spec.get("nodeName") or (old.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            grace = 0
    if meta.get("deletionTimestamp"):
        current_grace = int(meta.get("deletionGracePeriodSeconds") or 0)
        if not (rtype.graceful_delete and grace < current_grace):
            return state.served(rtype, old), False
    if rtype.resource == NAMESPACES:
        new_meta["deletionTimestamp"] = state.now()
        new["status"] = {**(new.get("status") or {}), "phase": "Terminating"}
        if dry_run:
            return new, False
        return state.served(rtype, state.commit(rtype, "MODIFIED", new, old)), False
    if finalizers or rtype.graceful_delete:
        new_meta["finalizers"] = finalizers
        if not finalizers:
            new_meta.pop("finalizers")
        new_meta["deletionTimestamp"] = format_time(state.clock.time() + grace)
        new_meta["deletionGracePeriodSeconds"] = grace
        if new_meta.get("generation"):
            new_meta["generation"] = int(new_meta["generation"]) + 1
        if dry_run:
            return new, False
        committed = state.commit(rtype, "MODIFIED", new, old)
        if finalizers or grace > 0:
            return state.served(rtype, committed), False
        return finish_delete(state, rtype, committed), True
    if dry_run:
        return state.served(rtype, old), True
    return finish_delete(state, rtype, new), True


def finish_delete(state: ClusterState, rtype: ResourceType, obj: Obj) -> Obj:
    prev = state.objects(rtype).get(
        state.key(rtype, obj["metadata"].get("namespace"), obj["metadata"]["name"])
    )
    final = copy_obj(obj)
    state.commit(rtype, "DELETED", final, prev)
    if rtype.resource == CUSTOM_RESOURCE_DEFINITIONS:
        crds.remove_crd(state, final)
    if rtype.returns_deleted_object:
        return state.served(rtype, final)
    details: Obj = {"name": final["metadata"]["name"]}
    if rtype.group:
        details["group"] = rtype.group
    details["kind"] = rtype.plural
    details["uid"] = final["metadata"].get("uid")
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}


def delete_collection(
    state: ClusterState,
    rtype: ResourceType,
    namespace: str | None,
    label_selector: str | None,
    field_selector: str | None,
    options: Obj | None = None,
) -> Obj:
    labels, fields = state.parse_selectors(rtype, label_selector, field_selector)
    victims = state.lister.filter(rtype, list(state.objects(rtype).items()), namespace, labels, fields)
    items = []
    for obj in victims:
        meta = obj["metadata"]
        result, _ = delete(state, rtype, meta.get("namespace"), meta["name"], options)
        if result.get("kind") != "Status":
            items.append(result)
    return {
        "kind": f"{rtype.kind}List",
        "apiVersion": rtype.resource.api_version,
        "metadata": {"resourceVersion": str(state.rv)},
        "items": items,
    }
