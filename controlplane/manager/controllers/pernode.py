"""Objects kept one per Node (NodeMetric, NodeSLO): their cached form and the convergence of
one of them to the spec its node should have.

:func:`converge_spec` deletes the object when its Node is gone (only the one the cache saw,
by uid), creates it named after the node when missing, and replaces its spec (a JSON patch)
when it differs -- on the resourceVersion the cache showed, so a write decided on an old
version (a paused former leader's, say) is refused with a Conflict instead of undoing a
newer one, as upstream's ``Update`` of the cached object is; it counts the outcome in the
controller's reconcile counter and turns conflicts and not-yet-cached objects into
temporary errors the reactor retries.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, NamedTuple

from controlplane.manager.controllers.context import FIELD_MANAGER, ControllerContext
from controlplane.manager.controllers.metrics import FAILED, SUCCEEDED, GoCounter
from controlplane.reactor import TemporaryError
from koordinator.kube.client import PatchType, Preconditions
from koordinator.kube.errors import AlreadyExistsError, ConflictError, NotFoundError
from koordinator.kube.resources import Resource

__all__ = ["ObjectSpec", "converge_spec", "object_spec", "spec_patch"]

log = logging.getLogger(__name__)

Obj = dict[str, Any]


class ObjectSpec(NamedTuple):
    """A NodeMetric or NodeSLO as the controllers keep it: identity, version and spec."""

    name: str
    uid: str
    spec: Obj
    resource_version: str = ""


def object_spec(obj: Obj) -> ObjectSpec:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec")
    return ObjectSpec(
        str(meta.get("name") or ""),
        str(meta.get("uid") or ""),
        spec if isinstance(spec, dict) else {},
        str(meta.get("resourceVersion") or ""),
    )


def spec_patch(spec: Obj, resource_version: str = "") -> list[Obj]:
    """A JSON patch replacing the whole spec (``add`` replaces an existing member).

    With ``resource_version`` the patch also sets ``metadata.resourceVersion``, which makes
    it conditional: the apiserver answers 409 Conflict when the object is at another version.
    """
    patch: list[Obj] = [{"op": "add", "path": "/spec", "value": spec}]
    if resource_version:
        patch.append({"op": "replace", "path": "/metadata/resourceVersion", "value": resource_version})
    return patch


async def converge_spec(
    ctx: ControllerContext,
    resource: Resource,
    name: str,
    current: ObjectSpec | None,
    desired: Callable[[], Obj] | None,
    reconciles: GoCounter,
) -> None:
    """Bring the object ``name`` of ``resource`` to ``desired()`` (None: its Node is gone).

    ``reconciles`` is the controller's ``{status, reason}`` counter; deleting (or finding
    nothing to delete) is not counted, as upstream.
    """
    client, kind = ctx.client, resource.kind
    try:
        if desired is None:
            if current is not None:
                await client.delete(resource, name, preconditions=Preconditions(uid=current.uid))
                log.info("deleted %s %s (node gone)", kind, name)
            return
        spec = desired()
        if current is None:
            body = {
                "apiVersion": resource.api_version,
                "kind": kind,
                "metadata": {"name": name},
                "spec": spec,
            }
            await client.create(resource, body, field_manager=FIELD_MANAGER)
            log.info("created %s %s", kind, name)
        elif current.spec != spec:
            await client.patch(
                resource,
                name,
                spec_patch(spec, current.resource_version),
                patch_type=PatchType.JSON,
                field_manager=FIELD_MANAGER,
            )
            log.info("updated the spec of %s %s", kind, name)
    except AlreadyExistsError:
        reconciles.inc(FAILED, "alreadyExists")
        raise TemporaryError(f"{kind} {name} exists but is not in the cache yet") from None
    except (NotFoundError, ConflictError) as exc:
        if desired is None:
            return  # already gone, or replaced by the object of a new node: the watch tells
        reconciles.inc(FAILED, "updateFailed")
        raise TemporaryError(f"{kind} {name}: {exc}") from exc
    except Exception:
        reconciles.inc(FAILED, "updateFailed")
        raise
    reconciles.inc(SUCCEEDED, "reconciled")
