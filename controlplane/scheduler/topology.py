"""Topology domains and placed pods, indexed for PodTopologySpread and InterPodAffinity.

* :class:`DomainColumn`: one topology key's domains as a per-row column of domain ids,
  for the kernel's score lookups (a row's domain id indexes a per-domain score array).
  The cluster creates one the first time a plug-in asks for its key and keeps it current
  as nodes come, change and go.
* :class:`PodIndex`: the placed pods by namespace and label (and controller UID), so a
  label selector is answered from its most selective requirement instead of by walking
  every pod; and the (anti-)affinity terms placed pods carry, grouped by identical term
  with the nodes they sit on, so a cycle evaluates each distinct term once.

Both are updated incrementally by the cluster (``set_node_spec``, ``remove_node``,
``place``, ``unplace``); nothing here walks all nodes or all pods per scheduling cycle.
"""

from __future__ import annotations

from array import array
from collections.abc import Collection

from controlplane.scheduler.podinfo import PodInfo
from controlplane.scheduler.podterms import IN, AffinityTerm, Selector

#: the kinds of terms placed pods carry, as the term index keys them
REQUIRED_AFFINITY, REQUIRED_ANTI, PREFERRED_AFFINITY, PREFERRED_ANTI = "ra", "rn", "pa", "pn"


class DomainColumn:
    """Per row, the id of the node's value of one label key (-1: the node lacks the key)."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.ids = array("q")
        #: domain id -> label value ("" for a freed id)
        self.values: list[str] = []
        self._id: dict[str, int] = {}
        self._rows: list[int] = []  # domain id -> how many rows have it
        self._free: list[int] = []

    def id_of(self, value: str) -> int:
        """The id of a value some node has (-1: none has it)."""
        return self._id.get(value, -1)

    def grow(self, rows: int) -> None:
        if rows > len(self.ids):
            self.ids.extend(array("q", [-1]) * (rows - len(self.ids)))

    def set(self, row: int, value: str | None) -> None:
        """Row ``row`` now has ``value`` (None: no such label, or no node)."""
        self.grow(row + 1)
        old = self.ids[row]
        if old >= 0:
            self._rows[old] -= 1
            if not self._rows[old]:
                del self._id[self.values[old]]
                self.values[old] = ""
                self._free.append(old)
        if value is None:
            self.ids[row] = -1
            return
        found = self._id.get(value)
        if found is None:
            if self._free:
                found = self._free.pop()
                self.values[found] = value
            else:
                found = len(self.values)
                self.values.append(value)
                self._rows.append(0)
            self._id[value] = found
        self._rows[found] += 1
        self.ids[row] = found


def _add(index: dict[str, set[str]], name: str, key: str) -> None:
    index.setdefault(name, set()).add(key)


def _discard(index: dict[str, set[str]], name: str, key: str) -> None:
    keys = index.get(name)
    if keys is not None:
        keys.discard(key)
        if not keys:
            del index[name]


class PodIndex:
    """The placed pods by namespace, label and controller, and their affinity terms."""

    def __init__(self) -> None:
        #: namespace -> keys of its placed pods
        self.in_namespace: dict[str, set[str]] = {}
        #: namespace -> label key -> value -> keys of the placed pods carrying it
        self.by_label: dict[str, dict[str, dict[str, set[str]]]] = {}
        #: controller UID -> keys of the placed pods it controls
        self.by_controller: dict[str, set[str]] = {}
        #: kind -> (weight, term) -> node -> how many placed pods there carry the term
        #: (weight 0 for required terms)
        self.terms: dict[str, dict[tuple[int, AffinityTerm], dict[str, int]]] = {
            kind: {} for kind in (REQUIRED_AFFINITY, REQUIRED_ANTI, PREFERRED_AFFINITY, PREFERRED_ANTI)
        }

    def add(self, pod: PodInfo, node: str) -> None:
        key = pod.key
        _add(self.in_namespace, pod.namespace, key)
        by_key = self.by_label.setdefault(pod.namespace, {})
        for label, value in pod.labels.items():
            _add(by_key.setdefault(label, {}), value, key)
        if pod.controller is not None:
            _add(self.by_controller, pod.controller.uid, key)
        for kind, use in _term_uses(pod):
            nodes = self.terms[kind].setdefault(use, {})
            nodes[node] = nodes.get(node, 0) + 1

    def remove(self, pod: PodInfo, node: str) -> None:
        key = pod.key
        _discard(self.in_namespace, pod.namespace, key)
        by_key = self.by_label.get(pod.namespace, {})
        for label, value in pod.labels.items():
            values = by_key.get(label)
            if values is not None:
                _discard(values, value, key)
                if not values:
                    del by_key[label]
        if not by_key:
            self.by_label.pop(pod.namespace, None)
        if pod.controller is not None:
            _discard(self.by_controller, pod.controller.uid, key)
        for kind, use in _term_uses(pod):
            of_kind = self.terms[kind]
            nodes = of_kind.get(use)
            if nodes is None:
                continue
            left = nodes.get(node, 0) - 1
            if left > 0:
                nodes[node] = left
            else:
                nodes.pop(node, None)
                if not nodes:
                    del of_kind[use]

    def select(self, namespace: str, selector: Selector) -> tuple[Collection[str], bool]:
        """Keys of the placed pods of ``namespace`` that may match ``selector``: those its
        most selective ``In`` requirement (or its controller) admits; and whether they all
        do (the selector is that one requirement). When not, callers check the full
        selector on each (``Selector.matches``)."""
        requirements = selector.requirements
        if selector.controller:
            return self.by_controller.get(selector.controller, ()), not requirements
        by_key = self.by_label.get(namespace)
        if by_key is None:
            return (), True
        best: Collection[str] | None = None
        for req in requirements:
            if req.operator != IN:
                continue
            values = by_key.get(req.key)
            if values is None:
                return (), True
            if len(req.values) == 1:
                (value,) = req.values
                found: Collection[str] = values.get(value, ())
            else:
                found = set().union(*(values.get(v, ()) for v in req.values))
            if not found:
                return (), True
            if best is None or len(found) < len(best):
                best = found
        if best is None:
            return self.in_namespace.get(namespace, ()), not requirements
        return best, len(requirements) == 1


def _term_uses(pod: PodInfo) -> list[tuple[str, tuple[int, AffinityTerm]]]:
    affinity = pod.affinity
    if affinity is None:
        return []
    out = [(REQUIRED_AFFINITY, (0, t)) for t in affinity.required]
    out += [(REQUIRED_ANTI, (0, t)) for t in affinity.required_anti]
    out += [(PREFERRED_AFFINITY, (w.weight, w.term)) for w in affinity.preferred]
    out += [(PREFERRED_ANTI, (w.weight, w.term)) for w in affinity.preferred_anti]
    return out
