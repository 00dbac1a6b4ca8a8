"""Pod subresources of the fake apiserver: ``binding`` and ``eviction`` (with PodDisruptionBudgets).

Eviction follows the apiserver's rules: pods that are not running (or already deleting)
are deleted without consulting budgets; otherwise the single matching budget must have
been observed by its controller (else 429 with a retry hint), must allow a disruption
(else 429 with a ``DisruptionBudget`` cause), and is decremented, recording the pod in
``status.disruptedPods``. More than one matching budget is a 500, as upstream.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from koordinator.api.selectors import LabelSelector, SelectorError
from koordinator.kube.resources import POD_DISRUPTION_BUDGETS, PODS
from testsupport.fake import status as st
from testsupport.fake.objects import copy_obj, meta_of
from testsupport.fake.registry import ResourceType

if TYPE_CHECKING:
    from testsupport.fake.state import ClusterState

Obj = dict[str, Any]


def _is_ready(pod: Obj) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or ()
    )


def bind(state: ClusterState, namespace: str, name: str, binding: Obj) -> None:
    pods = state.registry.for_resource(PODS)
    meta = meta_of(binding)
    if meta.get("name") and meta["name"] != name:
        raise st.bad_request(
            f"the name of the object ({meta['name']}) does not match the name on the URL ({name})"
        )
    target = binding.get("target") or {}
    node = target.get("name")
    if not node:
        raise st.invalid(
            "Binding", "", name, [st.Cause("FieldValueRequired", "Required value", "target.name")]
        )
    old = state.require(pods, namespace, name)
    old_meta = old["metadata"]
    if meta.get("uid") and meta["uid"] != old_meta.get("uid"):
        raise st.conflict(
            "pods/binding",
            "",
            name,
            f"Precondition failed: UID in precondition: {meta['uid']}, "
            f"UID in object meta: {old_meta.get('uid')}",
        )
    if old_meta.get("deletionTimestamp"):
        raise st.conflict(
            "pods/binding", "", name, f"pod {name} is being deleted, cannot be assigned to a host"
        )
    assigned = (old.get("spec") or {}).get("nodeName")
    if assigned:
        raise st.conflict("pods/binding", "", name, f'pod {name} is already assigned to node "{assigned}"')
    new = copy_obj(old)
    new["spec"]["nodeName"] = node
    if meta.get("annotations"):
        new["metadata"].setdefault("annotations", {}).update(meta["annotations"])
    status = new.setdefault("status", {})
    conditions = [c for c in status.get("conditions") or () if c.get("type") != "PodScheduled"]
    conditions.append(
        {
            "type": "PodScheduled",
            "status": "True",
            "lastProbeTime": None,
            "lastTransitionTime": state.now(),
        }
    )
    status["conditions"] = conditions
    state.commit(pods, "MODIFIED", new, old)


def pdbs_for(state: ClusterState, pod: Obj) -> list[tuple[ResourceType, Obj]]:
    rtype = state.registry.for_resource(POD_DISRUPTION_BUDGETS)
    namespace = pod["metadata"].get("namespace", "")
    labels = pod["metadata"].get("labels") or {}
    found = []
    for (ns, _), pdb in sorted(state.objects(rtype).items()):
        selector = (pdb.get("spec") or {}).get("selector")
        if ns != namespace or selector is None:
            continue
        try:
            if LabelSelector.from_dict(selector).matches(labels):
                found.append((rtype, pdb))
        except SelectorError:
            continue
    return found


def evict(state: ClusterState, namespace: str, name: str, eviction: Obj) -> None:
    pods = state.registry.for_resource(PODS)
    meta = meta_of(eviction)
    if meta.get("name") and meta["name"] != name:
        raise st.bad_request(f"name in URL does not match name in Eviction object: {name} != {meta['name']}")
    options = eviction.get("deleteOptions") or {}
    pod = state.require(pods, namespace, name)
    phase = (pod.get("status") or {}).get("phase")
    if phase in ("Succeeded", "Failed", "Pending") or pod["metadata"].get("deletionTimestamp"):
        state.delete(pods, namespace, name, options)
        return
    pdbs = pdbs_for(state, pod)
    if len(pdbs) > 1:
        raise st.internal(
            "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
        )
    if not pdbs:
        state.delete(pods, namespace, name, options)
        return
    pdb_type, pdb = pdbs[0]
    spec, status = pdb.get("spec") or {}, pdb.get("status") or {}
    ready = _is_ready(pod)
    if not ready and spec.get("unhealthyPodEvictionPolicy") == "AlwaysAllow":
        state.delete(pods, namespace, name, options)
        return
    desired, healthy = int(status.get("desiredHealthy") or 0), int(status.get("currentHealthy") or 0)
    if not ready and healthy >= desired > 0:
        state.delete(pods, namespace, name, options)
        return
    pdb_name = pdb["metadata"]["name"]
    refusal = "Cannot evict pod as it would violate the pod's disruption budget."
    if int(status.get("observedGeneration") or 0) < int(pdb["metadata"].get("generation") or 0):
        raise st.too_many_requests(
            refusal,
            [
                st.Cause(
                    "DisruptionBudget",
                    f"The disruption budget {pdb_name} is still being processed by the server.",
                )
            ],
            retry_after=10,
        )
    allowed = int(status.get("disruptionsAllowed") or 0)
    if allowed < 0:
        raise st.forbidden("poddisruptionbudgets", "policy", pdb_name, "pdb disruptions allowed is negative")
    if len(status.get("disruptedPods") or {}) > 2000:
        raise st.forbidden(
            "poddisruptionbudgets",
            "policy",
            pdb_name,
            "DisruptedPods map too big - too many evictions not confirmed by PDB controller",
        )
    if allowed == 0:
        raise st.too_many_requests(
            refusal,
            [
                st.Cause(
                    "DisruptionBudget",
                    f"The disruption budget {pdb_name} needs {desired} "
                    f"healthy pods and has {healthy} currently",
                )
            ],
        )
    if options.get("dryRun"):
        return
    new_pdb = copy_obj(pdb)
    new_status = new_pdb.setdefault("status", {})
    new_status["disruptionsAllowed"] = allowed - 1
    new_status.setdefault("disruptedPods", {})[name] = state.now()
    if allowed - 1 == 0:
        conditions = [c for c in new_status.get("conditions") or () if c.get("type") != "DisruptionAllowed"]
        conditions.append(
            {
                "type": "DisruptionAllowed",
                "status": "False",
                "observedGeneration": status.get("observedGeneration", 0),
                "lastTransitionTime": state.now(),
                "reason": "InsufficientPods",
                "message": "",
            }
        )
        new_status["conditions"] = conditions
    state.commit(pdb_type, "MODIFIED", new_pdb, pdb)
    state.delete(pods, namespace, name, options)
