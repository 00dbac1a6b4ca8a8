"""What the scheduler keeps of a PodDisruptionBudget, and upstream's split of preemption
victims by whether evicting them would violate one.

The PDB informer's transform turns a ``policy/v1`` object into a :class:`PDBRecord`: its
namespace, its label selector, ``status.disruptionsAllowed`` and the names in
``status.disruptedPods``. The scheduler never writes a PDB: upstream's preemption deletes
its victims (a plain DELETE, not the Eviction API), and the disruption controller updates
the budgets' status.

:func:`split_by_pdb_violation` is upstream's ``filterPodsWithPDBViolation``
(``pkg/scheduler/framework/plugins/defaultpreemption``):

* a pod without labels matches no PDB;
* a PDB matches the pods of its namespace that its selector selects, but a nil or empty
  selector matches nothing here (the scheduler skips it, although ``policy/v1`` gives an
  empty selector every pod of the namespace), and so does one that does not parse;
* a pod listed in the PDB's ``disruptedPods`` is already being disrupted through the API
  and neither consumes nor violates that PDB;
* otherwise every matching PDB's allowance (``disruptionsAllowed``, copied per call) goes
  down by one, and the pod violates if any of them goes below zero.

The pods keep their order in both groups.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from controlplane.scheduler.podinfo import PodInfo
from koordinator.api.selectors import LabelSelector, SelectorError


@dataclass(frozen=True, slots=True)
class PDBRecord:
    namespace: str
    name: str
    #: None when it matches no pod: a nil or empty selector, or one that does not parse
    selector: LabelSelector | None
    #: ``status.disruptionsAllowed``
    disruptions_allowed: int
    #: the pod names in ``status.disruptedPods``
    disrupted_pods: frozenset[str] = frozenset()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def _selector(raw: Any) -> LabelSelector | None:
    if not isinstance(raw, Mapping):
        return None  # nil: labels.Nothing()
    try:
        selector = LabelSelector.from_dict(raw)
    except SelectorError:
        return None
    return None if selector.empty else selector  # {} selects everything: skipped upstream


def pdb_record(obj: Mapping[str, Any]) -> PDBRecord:
    """The compact record of a PodDisruptionBudget object."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    disrupted = status.get("disruptedPods")  # pod name -> when the eviction was admitted
    return PDBRecord(
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta.get("name") or ""),
        selector=_selector(spec.get("selector")),
        disruptions_allowed=allowed if isinstance(allowed := status.get("disruptionsAllowed"), int) else 0,
        disrupted_pods=frozenset(map(str, disrupted)) if isinstance(disrupted, Mapping) else frozenset(),
    )


def split_by_pdb_violation(
    pods: Iterable[PodInfo], pdbs: Mapping[str, Mapping[str, PDBRecord]]
) -> tuple[list[PodInfo], list[PodInfo]]:
    """The pods whose eviction (in this order, together) would violate a PDB, and the
    others. ``pdbs``: namespace -> name -> record."""
    allowed: dict[str, int] = {}
    violating: list[PodInfo] = []
    others: list[PodInfo] = []
    for pod in pods:
        violated = False
        in_namespace = pdbs.get(pod.namespace) if pod.labels else None
        for pdb in (in_namespace or {}).values():
            if pdb.selector is None or not pdb.selector.matches(pod.labels):
                continue
            if pod.name in pdb.disrupted_pods:
                continue
            left = allowed.get(pdb.key, pdb.disruptions_allowed) - 1
            allowed[pdb.key] = left
            if left < 0:
                violated = True
        (violating if violated else others).append(pod)
    return violating, others
