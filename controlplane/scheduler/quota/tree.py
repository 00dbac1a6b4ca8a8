"""One quota tree (upstream's ``GroupQuotaManager``): quotas, their pods and the sums over both.

A tree hangs under ``koordinator-root-quota``; the default tree (id ``""``) also holds the
system and default quotas, which take part in no sharing: their runtime is their ``max``.

**Per quota** (all ResourceLists, pods counted with their request masked to the quota's
``max`` keys):

* ``self request`` / ``self used``: the quota's own pods, all of them / the assigned ones
  (bound to a node, or reserved by the scheduler);
* ``child request`` = self request + the children's *limited* requests, a child's limited
  request being ``min(request, max)`` per resource;
* ``request`` = child request, raised to ``min`` when the quota does not lend
  (``allow-lent-resource: "false"``);
* ``used`` = self used + the children's used (no limiting); the non-preemptible sums the
  same way over pods labelled ``preemptible: "false"``;
* under ``ElasticQuotaGuaranteeUsage``: ``allocated`` = self used (on the tree's resource
  keys) + the children's ``guaranteed``, and ``guaranteed = max(allocated, min)``; both are
  empty otherwise.

**Runtime** is computed top-down: the root's total is the tree's total (for the default
tree, the caller's cluster total less what the default and system quotas use), each
parent's children share it per resource with :func:`~.runtime.distribute` over the tree's
resource keys (the union of the quotas' ``max`` keys), after scaling their mins with
:func:`~.runtime.scale_min`, and a child's runtime is the total its own children share.

Sums of pods are kept incrementally; requests and runtimes are recomputed, lazily, only
when something they depend on changed since the last computation (:attr:`QuotaTree.version`).
A quota whose parent is missing (or whose parents form a loop) is an *orphan*: its sums
are kept but it gets no runtime (an empty one, as upstream, which limits nothing).

Upstream's manager adds the default and system quotas to the root's sharing when their
objects are updated but not when it rebuilds the tree; here they never share, whichever
event came last. Upstream's ``RefreshRuntime`` answers ``max`` for them but never stores it,
so their status shows no runtime and PreFilter compares their pods against an empty list
(no limit at all); here their runtime is ``max`` for both.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from controlplane.scheduler.quota.args import ElasticQuotaArgs
from controlplane.scheduler.quota.gates import QuotaGates
from controlplane.scheduler.quota.pods import QuotaPod
from controlplane.scheduler.quota.quantities import (
    add_non_negative,
    add_non_negative_into,
    limited,
    make_quantity,
    max_with,
    quantity_value,
)
from controlplane.scheduler.quota.runtime import ShareRequest, distribute, scale_min
from controlplane.scheduler.quota.spec import QuotaSpec
from koordinator.api.extension.quota import DEFAULT_QUOTA_NAME, ROOT_QUOTA_NAME, SYSTEM_QUOTA_NAME
from koordinator.api.quantity import Quantity
from koordinator.api.resourcelist import ResourceList, add, mask, subtract

__all__ = ["SPECIAL_QUOTAS", "QuotaSummary", "QuotaTree"]

#: quotas outside the sharing: they are limited by their ``max`` only
SPECIAL_QUOTAS = frozenset({SYSTEM_QUOTA_NAME, DEFAULT_QUOTA_NAME})


@dataclass(frozen=True)
class QuotaSummary:
    """A quota's figures at one moment (upstream's ``QuotaInfoSummary``)."""

    name: str
    parent: str
    is_parent: bool
    allow_lent_resource: bool
    tree_id: str
    min: ResourceList
    max: ResourceList
    auto_scale_min: ResourceList
    shared_weight: ResourceList
    request: ResourceList
    child_request: ResourceList
    non_preemptible_request: ResourceList
    used: ResourceList
    non_preemptible_used: ResourceList
    self_request: ResourceList
    self_used: ResourceList
    runtime: ResourceList
    guaranteed: ResourceList
    allocated: ResourceList


@dataclass
class _Entry:
    pod: QuotaPod
    #: the request counted (masked to the quota's max when the pod was added)
    request: ResourceList
    assigned: bool


@dataclass
class _Sums:
    request: ResourceList = field(default_factory=dict)
    np_request: ResourceList = field(default_factory=dict)
    used: ResourceList = field(default_factory=dict)
    np_used: ResourceList = field(default_factory=dict)


@dataclass
class _Figures:
    child_request: ResourceList = field(default_factory=dict)
    request: ResourceList = field(default_factory=dict)
    limited_request: ResourceList = field(default_factory=dict)
    np_request: ResourceList = field(default_factory=dict)
    allocated: ResourceList = field(default_factory=dict)
    guaranteed: ResourceList = field(default_factory=dict)
    auto_scale_min: ResourceList = field(default_factory=dict)
    runtime: ResourceList = field(default_factory=dict)


class QuotaTree:
    """The quotas of one tree and their pods; answers request, used and runtime questions."""

    def __init__(
        self, tree_id: str = "", *, args: ElasticQuotaArgs | None = None, gates: QuotaGates | None = None
    ):
        self.tree_id = tree_id
        self.args = args or ElasticQuotaArgs()
        self.gates = gates or QuotaGates()
        self._specs: dict[str, QuotaSpec] = {}
        if tree_id == "":
            lend = not self.gates.guarantee_usage
            self._specs[SYSTEM_QUOTA_NAME] = QuotaSpec(
                SYSTEM_QUOTA_NAME, allow_lent_resource=lend, max=dict(self.args.system_quota_group_max)
            )
            self._specs[DEFAULT_QUOTA_NAME] = QuotaSpec(
                DEFAULT_QUOTA_NAME, allow_lent_resource=lend, max=dict(self.args.default_quota_group_max)
            )
        self._pods: dict[str, dict[str, _Entry]] = {}
        self._self: dict[str, _Sums] = {}
        self._total: ResourceList = {}
        # structure caches (rebuilt when quotas change)
        self._children: dict[str, list[str]] = {}
        self._chains: dict[str, tuple[str, ...]] = {}
        self._reachable: frozenset[str] = frozenset()
        self._resource_keys: tuple[str, ...] = ()
        self._structure_dirty = True
        # aggregated used (kept incrementally once computed)
        self._used: dict[str, ResourceList] = {}
        self._np_used: dict[str, ResourceList] = {}
        self._used_dirty = True
        # figures computed at _computed
        self._version = 0
        self._computed = -1
        self._figures: dict[str, _Figures] = {}

    # ---- quotas ---------------------------------------------------------------------------
    def upsert(self, spec: QuotaSpec) -> None:
        """Add or replace a quota (the root quota's own object is not a member and is ignored)."""
        if spec.name == ROOT_QUOTA_NAME:
            return
        if spec.name in SPECIAL_QUOTAS:
            # the tree link of the special quotas is fixed: they always hang under the root
            spec = QuotaSpec(
                spec.name,
                namespace=spec.namespace,
                allow_lent_resource=spec.allow_lent_resource,
                min=spec.min,
                max=spec.max,
                shared_weight=spec.shared_weight,
            )
        if self._specs.get(spec.name) == spec:
            return
        self._specs[spec.name] = spec
        self._structure_changed()

    def delete(self, name: str) -> bool:
        """Forget a quota and its pods; False when it was not here (the special quotas stay)."""
        if name in SPECIAL_QUOTAS or name not in self._specs:
            return False
        del self._specs[name]
        self._pods.pop(name, None)
        self._self.pop(name, None)
        self._structure_changed()
        return True

    def has_quota(self, name: str) -> bool:
        return name in self._specs

    def spec(self, name: str) -> QuotaSpec | None:
        return self._specs.get(name)

    def quota_names(self) -> list[str]:
        """Every quota of the tree (sorted), the special ones included, the root excluded."""
        return sorted(self._specs)

    def children(self, name: str) -> list[str]:
        """The quotas whose parent is ``name``, sorted (the root's include the special quotas)."""
        self._ensure_structure()
        return list(self._children.get(name, ()))

    def path_to_root(self, name: str) -> list[str]:
        """``name``, its parent, ... up to the top-level quota (the root itself not listed)."""
        self._ensure_structure()
        return [quota for quota in self._chains.get(name, ()) if quota != ROOT_QUOTA_NAME]

    def is_orphan(self, name: str) -> bool:
        """A quota not reachable from the root: it has no runtime."""
        self._ensure_structure()
        return name in self._specs and name not in SPECIAL_QUOTAS and name not in self._reachable

    @property
    def resource_keys(self) -> tuple[str, ...]:
        """The resources runtime is computed for: every ``max`` key of the shared quotas."""
        self._ensure_structure()
        return self._resource_keys

    @property
    def version(self) -> int:
        """Changes whenever a request, a min, a max, a weight or a total may have changed."""
        return self._version

    # ---- totals ---------------------------------------------------------------------------
    def set_total(self, total: Mapping[str, Quantity]) -> None:
        """The tree's total: Σ node allocatable for the default tree, ``total-resource`` for others."""
        total = dict(total)
        if total != self._total:
            self._total = total
            self._version += 1

    @property
    def total(self) -> ResourceList:
        return dict(self._total)

    def shared_total(self) -> ResourceList:
        """What the tree's quotas share: the total, less the default and system quotas' used."""
        special_used: ResourceList = {}
        for name in sorted(SPECIAL_QUOTAS):
            if name in self._specs:
                special_used = add(special_used, self.used(name))
        if not special_used:
            return dict(self._total)
        return subtract(self._total, special_used)

    # ---- pods -----------------------------------------------------------------------------
    def contains_pod(self, quota: str, key: str) -> bool:
        return key in self._pods.get(quota, {})

    def pods(self, quota: str) -> list[QuotaPod]:
        """The quota's own pods, sorted by key."""
        entries = self._pods.get(quota, {})
        return [entries[key].pod for key in sorted(entries)]

    def assigned_pods(self, quota: str) -> list[QuotaPod]:
        entries = self._pods.get(quota, {})
        return [entries[key].pod for key in sorted(entries) if entries[key].assigned]

    def is_assigned(self, quota: str, key: str) -> bool:
        entry = self._pods.get(quota, {}).get(key)
        return entry is not None and entry.assigned

    def counted_request(self, quota: str, key: str) -> ResourceList | None:
        """The request the quota counts for a pod (masked to its max), None when absent."""
        entry = self._pods.get(quota, {}).get(key)
        return dict(entry.request) if entry is not None else None

    def add_pod(self, quota: str, pod: QuotaPod, *, assigned: bool) -> bool:
        """Count a pod in ``quota``; False when the quota is unknown or already has it."""
        spec = self._specs.get(quota)
        if spec is None or pod.key in self._pods.get(quota, {}):
            return False
        entry = _Entry(pod, mask(pod.request, spec.max), assigned)
        self._pods.setdefault(quota, {})[pod.key] = entry
        self._apply(quota, entry, 1)
        return True

    def update_pod(self, quota: str, pod: QuotaPod, *, assigned: bool | None = None) -> bool:
        """Replace a counted pod's record (its request may have changed); ``assigned`` None keeps it."""
        entries = self._pods.get(quota, {})
        old = entries.get(pod.key)
        spec = self._specs.get(quota)
        if old is None or spec is None:
            return False
        request = mask(pod.request, spec.max)
        now_assigned = old.assigned if assigned is None else assigned
        if request == old.request and pod.non_preemptible == old.pod.non_preemptible:
            # the same figures (a bound confirmation, a status change): the sums and the
            # runtime stand; only the used moves if the pod was assumed or forgotten
            old.pod = pod
            self.set_assigned(quota, pod.key, now_assigned)
            return True
        new = _Entry(pod, request, now_assigned)
        self._apply(quota, old, -1)
        entries[pod.key] = new
        self._apply(quota, new, 1)
        return True

    def remove_pod(self, quota: str, key: str) -> QuotaPod | None:
        """Stop counting a pod; the record removed, or None."""
        entries = self._pods.get(quota, {})
        entry = entries.pop(key, None)
        if entry is None:
            return None
        self._apply(quota, entry, -1)
        return entry.pod

    def set_assigned(self, quota: str, key: str, assigned: bool) -> bool:
        """Reserve (True) or unreserve (False) a counted pod; False when nothing changed."""
        entry = self._pods.get(quota, {}).get(key)
        if entry is None or entry.assigned == assigned:
            return False
        delta = entry.request if assigned else _negated(entry.request)
        np_delta = delta if entry.pod.non_preemptible else {}
        entry.assigned = assigned
        self._add_used(quota, delta, np_delta)
        return True

    def _apply(self, quota: str, entry: _Entry, sign: int) -> None:
        request = entry.request if sign > 0 else _negated(entry.request)
        np_request = request if entry.pod.non_preemptible else {}
        sums = self._self.setdefault(quota, _Sums())
        sums.request = add_non_negative(sums.request, request)
        if np_request:  # sums stay non-negative: adding nothing changes nothing
            sums.np_request = add_non_negative(sums.np_request, np_request)
        self._version += 1
        if entry.assigned:
            self._add_used(quota, request, np_request)

    def _add_used(self, quota: str, delta: ResourceList, np_delta: ResourceList) -> None:
        sums = self._self.setdefault(quota, _Sums())
        sums.used = add_non_negative(sums.used, delta)
        if np_delta:
            sums.np_used = add_non_negative(sums.np_used, np_delta)
        if self.gates.guarantee_usage or quota in SPECIAL_QUOTAS:
            # guaranteed follows used; the default tree's shared total follows theirs
            self._version += 1
        if self._used_dirty or self._structure_dirty:
            return
        # in place: these sums are never handed out (used() returns copies)
        for node in self._chains.get(quota, (quota,)):
            add_non_negative_into(self._used.setdefault(node, {}), delta)
            if np_delta:
                add_non_negative_into(self._np_used.setdefault(node, {}), np_delta)

    # ---- answers --------------------------------------------------------------------------
    def used(self, name: str) -> ResourceList:
        """Σ requests of the assigned pods of the quota and its descendants."""
        self._ensure_used()
        return dict(self._used.get(name, {}))

    def non_preemptible_used(self, name: str) -> ResourceList:
        self._ensure_used()
        return dict(self._np_used.get(name, {}))

    def request(self, name: str) -> ResourceList:
        self._ensure_figures()
        figures = self._figures.get(name)
        return dict(figures.request) if figures else {}

    def limited_request(self, name: str) -> ResourceList:
        """``min(request, max)``: what the quota asks of its parent."""
        self._ensure_figures()
        figures = self._figures.get(name)
        return dict(figures.limited_request) if figures else {}

    def runtime(self, name: str) -> ResourceList:
        """What the quota may use now, on every resource key of the tree.

        The default and system quotas: their ``max``; the root: the shared total; an orphan
        or an unknown quota: empty.
        """
        if name == ROOT_QUOTA_NAME:
            self._ensure_figures()
            return self.shared_total()
        spec = self._specs.get(name)
        if spec is None:
            return {}
        if name in SPECIAL_QUOTAS:
            return dict(spec.max)
        self._ensure_figures()
        return dict(self._figures[name].runtime)

    def summary(self, name: str) -> QuotaSummary | None:
        """Every figure of one quota (the root quota included), or None when it is unknown."""
        self._ensure_figures()
        if name == ROOT_QUOTA_NAME:
            spec = QuotaSpec(ROOT_QUOTA_NAME, parent="", is_parent=True, allow_lent_resource=False)
            runtime: ResourceList = {}
        else:
            found = self._specs.get(name)
            if found is None:
                return None
            spec = found
            runtime = self.runtime(name)
        figures = self._figures.get(name, _Figures())
        sums = self._self.get(name, _Sums())
        return QuotaSummary(
            name=name,
            parent=spec.parent,
            is_parent=spec.is_parent,
            allow_lent_resource=spec.allow_lent_resource,
            tree_id=self.tree_id,
            min=dict(spec.min),
            max=dict(spec.max),
            auto_scale_min=dict(figures.auto_scale_min),
            shared_weight=dict(spec.shared_weight),
            request=dict(figures.request),
            child_request=dict(figures.child_request),
            non_preemptible_request=dict(figures.np_request),
            used=self.used(name),
            non_preemptible_used=self.non_preemptible_used(name),
            self_request=dict(sums.request),
            self_used=dict(sums.used),
            runtime=runtime,
            guaranteed=dict(figures.guaranteed),
            allocated=dict(figures.allocated),
        )

    # ---- computation ----------------------------------------------------------------------
    def _structure_changed(self) -> None:
        self._structure_dirty = True
        self._used_dirty = True
        self._version += 1

    def _ensure_structure(self) -> None:
        if not self._structure_dirty:
            return
        children: dict[str, list[str]] = {}
        for name, spec in self._specs.items():
            parent = ROOT_QUOTA_NAME if name in SPECIAL_QUOTAS else spec.parent
            children.setdefault(parent, []).append(name)
        for names in children.values():
            names.sort()
        chains: dict[str, tuple[str, ...]] = {}
        for name in self._specs:
            chains[name] = tuple(self._walk_up(name))
        self._children = children
        self._chains = chains
        self._reachable = frozenset(
            name
            for name, chain in chains.items()
            if chain[-1] == ROOT_QUOTA_NAME and name not in SPECIAL_QUOTAS
        )
        keys: set[str] = set()
        for name, spec in self._specs.items():
            if name not in SPECIAL_QUOTAS:
                keys.update(spec.max)
        self._resource_keys = tuple(sorted(keys))
        # a quota's max decides which part of its pods' requests counts
        for quota, entries in self._pods.items():
            spec = self._specs[quota]
            for entry in entries.values():
                entry.request = mask(entry.pod.request, spec.max)
            self._self[quota] = _resum(entries.values())
        self._structure_dirty = False

    def _walk_up(self, name: str) -> Iterator[str]:
        """``name`` and its ancestors, ending with the root quota when it is reachable."""
        seen: set[str] = set()
        current = name
        while current not in seen:
            seen.add(current)
            yield current
            parent = ROOT_QUOTA_NAME if current in SPECIAL_QUOTAS else self._specs[current].parent
            if parent == ROOT_QUOTA_NAME:
                yield ROOT_QUOTA_NAME
                return
            if parent not in self._specs:
                return
            current = parent

    def _ensure_used(self) -> None:
        self._ensure_structure()
        if not self._used_dirty:
            return
        used: dict[str, ResourceList] = {}
        np_used: dict[str, ResourceList] = {}
        for quota, sums in self._self.items():
            for node in self._chains.get(quota, (quota,)):
                used[node] = add(used.get(node, {}), sums.used)
                np_used[node] = add(np_used.get(node, {}), sums.np_used)
        self._used = used
        self._np_used = np_used
        self._used_dirty = False

    def _ensure_figures(self) -> None:
        self._ensure_used()
        if self._computed == self._version:
            return
        figures: dict[str, _Figures] = {}
        # every quota, orphans and loops included (memoised: each is computed once)
        for name in sorted(self._specs):
            self._bottom_up(name, figures, set())
        root = _Figures()
        for name in self._children.get(ROOT_QUOTA_NAME, ()):
            child = figures[name]
            root.request = add(root.request, child.limited_request)
            root.np_request = add(root.np_request, child.np_request)
            if self.gates.guarantee_usage:
                root.allocated = add(root.allocated, child.guaranteed)
        figures[ROOT_QUOTA_NAME] = root
        self._figures = figures
        self._top_down(ROOT_QUOTA_NAME, self.shared_total())
        self._computed = self._version

    def _bottom_up(self, name: str, figures: dict[str, _Figures], visiting: set[str]) -> _Figures:
        if name in figures:
            return figures[name]
        visiting.add(name)
        spec = self._specs[name]
        sums = self._self.get(name, _Sums())
        result = _Figures()
        child_request = dict(sums.request)
        np_request = dict(sums.np_request)
        allocated = mask(sums.used, self._resource_keys)
        for child in self._children.get(name, ()):
            if child in visiting:
                continue
            figures_of_child = self._bottom_up(child, figures, visiting)
            child_request = add(child_request, figures_of_child.limited_request)
            np_request = add(np_request, figures_of_child.np_request)
            allocated = add(allocated, figures_of_child.guaranteed)
        result.child_request = child_request
        result.request = child_request if spec.allow_lent_resource else max_with(child_request, spec.min)
        result.limited_request = limited(result.request, spec.max)
        result.np_request = np_request
        if self.gates.guarantee_usage:
            result.allocated = allocated
            result.guaranteed = max_with(allocated, spec.min)
        result.auto_scale_min = dict(spec.min)
        figures[name] = result
        visiting.discard(name)
        return result

    def _top_down(self, parent: str, total: ResourceList) -> None:
        children = [name for name in self._children.get(parent, ()) if name not in SPECIAL_QUOTAS]
        if not children:
            return
        scaled = scale_min(
            total, {name: self._specs[name].min for name in children}, self.args.enable_min_quota_scale
        )
        for name in children:
            self._figures[name].auto_scale_min = scaled[name]
            self._figures[name].runtime = {}
        for resource in self._resource_keys:
            shares = [
                ShareRequest(
                    name=name,
                    request=quantity_value(resource, self._figures[name].limited_request.get(resource)),
                    min=quantity_value(resource, scaled[name].get(resource)),
                    guarantee=quantity_value(resource, self._figures[name].guaranteed.get(resource)),
                    weight=quantity_value(resource, self._specs[name].shared_weight.get(resource)),
                    allow_lent=self._specs[name].allow_lent_resource,
                )
                for name in children
            ]
            values = distribute(quantity_value(resource, total.get(resource)), shares)
            for name in children:
                self._figures[name].runtime[resource] = make_quantity(resource, values[name])
        for name in children:
            self._top_down(name, self._figures[name].runtime)


def _negated(resources: Mapping[str, Quantity]) -> ResourceList:
    return {name: -value for name, value in resources.items()}


def _resum(entries: Iterable[_Entry]) -> _Sums:
    sums = _Sums()
    for entry in sorted(entries, key=lambda item: item.pod.key):
        np_request = entry.request if entry.pod.non_preemptible else {}
        sums.request = add(sums.request, entry.request)
        sums.np_request = add(sums.np_request, np_request)
        if entry.assigned:
            sums.used = add(sums.used, entry.request)
            sums.np_used = add(sums.np_used, np_request)
    return sums
