"""The scheduler's view of the cluster: nodes as rows of the kernel's table, the per-node
facts mask filters read as byte columns, and the pods placed (bound or assumed) on them.

Everything a filter plug-in needs per node is kept as one byte per row, or as a bit set
per label, so a plug-in builds its mask for a pod with C-speed operations (``bytes.translate``
over a group column, big-integer ANDs and ORs) and never loops over nodes in Python: the
node's taint set becomes a group id (nodes share few distinct taint sets), cordoning one
byte, and each label key and value the set of rows carrying it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from controlplane.scheduler.kernel.table import PODS, NodeTable, PodVector
from controlplane.scheduler.pdbs import PDBRecord
from controlplane.scheduler.podinfo import ANY_IP, HostPort, PodInfo
from controlplane.scheduler.topology import DomainColumn, PodIndex
from controlplane.scheduler.volumes import Volumes
from koordinator.api import resourcelist
from koordinator.nodemetrics import NodeMetricRecord

#: taint effects the filter enforces (PreferNoSchedule only scores)
FILTER_EFFECTS = ("NoSchedule", "NoExecute")
PREFER_NO_SCHEDULE = "PreferNoSchedule"
#: group ids fit one byte; the rest share the last id and are checked node by node
MAX_TAINT_GROUPS = 255
DEFAULT_MAX_PODS = 110


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str


@dataclass(slots=True)
class NodeInfo:
    name: str
    row: int
    labels: Mapping[str, str]
    taints: tuple[Taint, ...]
    unschedulable: bool
    #: the image names ``status.images`` lists
    images: tuple[str, ...] = ()
    #: allocatable as the node reports it (CPU in milli-cores, everything else in units)
    allocatable: Mapping[str, int] = field(default_factory=dict)
    #: the node's Koordinator annotations (``raw-allocatable``, ``usage-thresholds`` ...)
    annotations: Mapping[str, str] = field(default_factory=dict)


#: told of a change on a node (see :meth:`Cluster.subscribe`): node, pod, sign
Listener = Callable[[str | None, PodInfo | None, int], None]

#: one entry of ``status.images``: its names and ``sizeBytes``
NodeImage = tuple[tuple[str, ...], int]


@dataclass(slots=True)
class ImageState:
    """One image name over the nodes (upstream's ``ImageStateSummary``): the size the first
    node listing it reported, and the rows listing it (their count is its spread)."""

    size: int
    rows: int


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """What the scheduler keeps of a Node object (the node informer's transform)."""

    name: str
    labels: Mapping[str, str]
    taints: tuple[Taint, ...]
    unschedulable: bool
    #: allocatable: CPU in milli-cores, everything else in units; pods apart
    allocatable: Mapping[str, int]
    pods: int
    images: tuple[NodeImage, ...] = ()
    annotations: Mapping[str, str] = field(default_factory=dict)


def _node_images(status: Mapping[str, Any]) -> tuple[NodeImage, ...]:
    return tuple(
        (tuple(sys.intern(str(n)) for n in image.get("names") or ()), int(image.get("sizeBytes") or 0))
        for image in status.get("images") or ()
        if isinstance(image, Mapping)
    )


def node_spec(node: Mapping[str, Any]) -> NodeSpec:
    """The compact record of a Node object; ResourceListError for a bad allocatable."""
    meta = node.get("metadata") or {}
    spec = node.get("spec") or {}
    allocatable = resourcelist.parse((node.get("status") or {}).get("allocatable"))
    values = {k: (q.milli_value() if k == "cpu" else q.value()) for k, q in allocatable.items()}
    pods = values.pop(PODS, DEFAULT_MAX_PODS)
    taints = tuple(
        Taint(str(t.get("key") or ""), str(t.get("value") or ""), str(t.get("effect") or ""))
        for t in spec.get("taints") or ()
    )
    return NodeSpec(
        meta["name"],
        dict(meta.get("labels") or {}),
        taints,
        bool(spec.get("unschedulable")),
        values,
        pods,
        _node_images(node.get("status") or {}),
        {str(k): str(v) for k, v in (meta.get("annotations") or {}).items() if "koordinator.sh/" in k},
    )


def same_footprint(placed: PodInfo, new: PodInfo) -> bool:
    """Whether a placed pod's new record leaves the node's counts, the pod indexes and what
    the plug-ins following placed pods keep (LoadAwareScheduling's estimate, the rows' verdicts)
    as they are: the same requests, limits, host ports, volumes, labels, annotations,
    owner, affinity and priority class. A binding's echo only adds ``nodeName`` and the
    PodScheduled condition, so it keeps the footprint of the pod assumed there."""
    return (
        placed.uid == new.uid
        and placed.requests == new.requests
        and placed.limits == new.limits
        and placed.host_ports == new.host_ports
        and placed.volumes == new.volumes
        and placed.labels == new.labels
        and placed.annotations == new.annotations
        and placed.controller == new.controller
        and placed.affinity == new.affinity
        and placed.priority_class == new.priority_class
        and placed.reservation == new.reservation
    )


class Cluster:
    def __init__(self) -> None:
        self.table = NodeTable()
        self.nodes: dict[str, NodeInfo] = {}
        self.by_row: list[NodeInfo | None] = []
        #: per row: 1 when ``spec.unschedulable`` (cordoned)
        self.unschedulable = bytearray()
        #: per row: the id of the node's NoSchedule/NoExecute taint set (0: none)
        self.taint_group = bytearray()
        self.taint_sets: list[tuple[Taint, ...]] = [()]
        self._taint_ids: dict[tuple[Taint, ...], int] = {(): 0}
        #: pod key -> (node, its request vector, the pod): bound and assumed pods
        self.placed: dict[str, tuple[str, PodVector, PodInfo]] = {}
        #: placed pods whose deletion this scheduler asked for (preemption victims), until
        #: they are gone: the preemptor waits for them rather than preempting again
        self.evicting: set[str] = set()
        #: node name -> the keys of the pods placed on it (known node or not)
        self.on_node: dict[str, set[str]] = {}
        #: label key -> value -> the rows carrying it, as an int bit set (bit ``row`` set)
        self.labels: dict[str, dict[str, int]] = {}
        #: label key -> the rows carrying it with any value (bit set)
        self.label_keys: dict[str, int] = {}
        #: topology key -> its per-row domain ids, for the keys a score plug-in asked for
        self.domains: dict[str, DomainColumn] = {}
        #: the placed pods by namespace, label and controller, and their affinity terms
        self.pod_index = PodIndex()
        #: namespace -> its labels, for the namespaces known (InterPodAffinity's namespaceSelector)
        self.namespace_labels: dict[str, Mapping[str, str]] = {}
        #: bumped on every change to nodes, placed pods or namespaces (plug-ins' per-cycle caches)
        self.generation = 0
        #: PreferNoSchedule taint -> the rows carrying it (bit set), for TaintToleration's score
        self.prefer_taints: dict[Taint, int] = {}
        #: (protocol, port) -> host IP -> the rows using it (bit set), for NodePorts
        self.ports: dict[tuple[str, int], dict[str, int]] = {}
        #: (protocol, port, host IP, row) -> how many placed pods there use it
        self._port_users: dict[tuple[str, int, str, int], int] = {}
        #: PodDisruptionBudgets: namespace -> name -> record (DefaultPreemption's victims)
        self.pdbs: dict[str, dict[str, PDBRecord]] = {}
        #: image name -> its size and the rows listing it, for ImageLocality
        self.images: dict[str, ImageState] = {}
        #: PersistentVolumes, claims, StorageClasses, CSINodes and the placed pods' CSI volumes
        self.volumes = Volumes()
        #: node name -> the koordlet's last NodeMetric report (LoadAwareScheduling)
        self.node_metrics: dict[str, NodeMetricRecord] = {}
        #: told the node whose metric, placed pods or object changed; None when nodes came
        #: or went (rows were assigned or freed)
        self._listeners: list[Listener] = []

    def subscribe(self, listener: Listener) -> None:
        """Call ``listener`` on every change of a node's NodeMetric, placed pods or object
        (with the node's name) and whenever nodes are added or removed (with None). For a
        pod placed on or taken off the node, it also gets the pod and +1 or -1."""
        self._listeners.append(listener)

    def _changed(self, node: str | None, pod: PodInfo | None = None, sign: int = 0) -> None:
        for listener in self._listeners:
            listener(node, pod, sign)

    def touched(self, node: str) -> None:
        """Tell the listeners that something about ``node`` changed (its requests seen
        differently for one pod, by :meth:`Framework.restored`)."""
        self._changed(node)

    def set_node_metric(self, record: NodeMetricRecord) -> None:
        self.node_metrics[record.node] = record
        self._changed(record.node)

    def remove_node_metric(self, node: str) -> None:
        if self.node_metrics.pop(node, None) is not None:
            self._changed(node)

    # --- nodes --------------------------------------------------------------------------

    def set_node(self, node: Mapping[str, Any]) -> NodeInfo:
        """Add or update a node from its object; ResourceListError for a bad allocatable."""
        return self.set_node_spec(node_spec(node))

    def set_node_spec(self, spec: NodeSpec) -> NodeInfo:
        """Add or update a node from its compact record (a node seen for the first time, or
        again, gets the pods already placed on it counted)."""
        arriving = spec.name not in self.nodes
        row = self.table.set_node(spec.name, spec.allocatable, spec.pods)
        old = self.by_row[row] if row < len(self.by_row) else None
        if old is not None:
            self._unindex(old)
        names = tuple(dict.fromkeys(name for names, _ in spec.images for name in names))
        info = NodeInfo(
            spec.name,
            row,
            spec.labels,
            spec.taints,
            spec.unschedulable,
            names,
            spec.allocatable,
            spec.annotations,
        )
        for image_names, size in spec.images:  # upstream's addNodeImageStates
            for name in image_names:
                state = self.images.get(name)
                if state is None:
                    self.images[name] = ImageState(size, 1 << row)
                else:
                    state.rows |= 1 << row
        for key, value in spec.labels.items():
            values = self.labels.setdefault(key, {})
            values[value] = values.get(value, 0) | (1 << row)
            self.label_keys[key] = self.label_keys.get(key, 0) | (1 << row)
        for column in self.domains.values():
            column.set(row, spec.labels.get(column.key))
        self.generation += 1
        for taint in spec.taints:
            if taint.effect == PREFER_NO_SCHEDULE:
                self.prefer_taints[taint] = self.prefer_taints.get(taint, 0) | (1 << row)
        self._columns(row)
        self.by_row[row] = info
        self.nodes[spec.name] = info
        self.unschedulable[row] = 1 if info.unschedulable else 0
        self.taint_group[row] = self._taint_group(tuple(t for t in spec.taints if t.effect in FILTER_EFFECTS))
        if arriving:
            for key in self.on_node.get(spec.name, ()):
                _, vector, placed = self.placed[key]
                self.account(row, vector, placed.host_ports, 1)
        self.volumes.node_set(spec.name, row)
        self._changed(spec.name if not arriving else None)
        return info

    def remove_node(self, name: str) -> None:
        """Forget a node; the pods placed on it stay recorded (counted again if it returns)."""
        info = self.nodes.get(name)
        if info is None:
            return
        for key in self.on_node.get(name, ()):
            _, vector, placed = self.placed[key]
            self.account(info.row, vector, placed.host_ports, -1)
        del self.nodes[name]
        self.table.remove_node(name)
        self._unindex(info)
        self.by_row[info.row] = None
        self.unschedulable[info.row] = 0
        self.taint_group[info.row] = 0
        for column in self.domains.values():
            column.set(info.row, None)
        self.generation += 1
        self.volumes.node_removed(name)
        self._changed(None)

    def _unindex(self, info: NodeInfo) -> None:
        clear = ~(1 << info.row)
        for key, value in info.labels.items():
            values = self.labels.get(key)
            if values is None or value not in values:
                continue
            values[value] &= clear
            if not values[value]:
                del values[value]
                if not values:
                    del self.labels[key]
            rows = self.label_keys.get(key, 0) & clear
            if rows:
                self.label_keys[key] = rows
            else:
                self.label_keys.pop(key, None)
        for taint in info.taints:
            if taint in self.prefer_taints:
                self.prefer_taints[taint] &= clear
                if not self.prefer_taints[taint]:
                    del self.prefer_taints[taint]
        for name in info.images:  # upstream's removeNodeImageStates
            state = self.images.get(name)
            if state is not None:
                state.rows &= clear
                if not state.rows:
                    del self.images[name]

    def rows_with(self, key: str, value: str | None = None) -> int:
        """The rows whose node has label ``key`` (with ``value`` when given), as a bit set."""
        if value is None:
            return self.label_keys.get(key, 0)
        values = self.labels.get(key)
        return values.get(value, 0) if values else 0

    def domain_column(self, key: str) -> DomainColumn:
        """The per-row domain ids of topology key ``key`` (built on first use, then kept)."""
        column = self.domains.get(key)
        if column is None:
            column = self.domains[key] = DomainColumn(key)
            column.grow(len(self.by_row))
            for info in self.nodes.values():
                if key in info.labels:
                    column.set(info.row, info.labels[key])
        return column

    def set_namespace(self, name: str, labels: Mapping[str, str]) -> None:
        self.namespace_labels[name] = labels
        self.generation += 1

    def remove_namespace(self, name: str) -> None:
        if self.namespace_labels.pop(name, None) is not None:
            self.generation += 1

    def names_of(self, mask: bytes | bytearray) -> set[str]:
        """The nodes of the rows a mask passes (1 bytes)."""
        return {node.name for node, ok in zip(self.by_row, mask, strict=False) if ok and node is not None}

    def _columns(self, row: int) -> None:
        missing = row + 1 - len(self.by_row)
        if missing > 0:
            self.by_row.extend([None] * missing)
            self.unschedulable.extend(bytes(missing))
            self.taint_group.extend(bytes(missing))

    def _taint_group(self, taints: tuple[Taint, ...]) -> int:
        found = self._taint_ids.get(taints)
        if found is not None:
            return found
        if len(self.taint_sets) >= MAX_TAINT_GROUPS:
            return MAX_TAINT_GROUPS  # checked node by node (see TaintToleration)
        self.taint_sets.append(taints)
        self._taint_ids[taints] = len(self.taint_sets) - 1
        return len(self.taint_sets) - 1

    # --- PodDisruptionBudgets ----------------------------------------------------------

    def set_pdb(self, pdb: PDBRecord) -> None:
        self.pdbs.setdefault(pdb.namespace, {})[pdb.name] = pdb

    def remove_pdb(self, namespace: str, name: str) -> None:
        in_namespace = self.pdbs.get(namespace)
        if in_namespace is not None:
            in_namespace.pop(name, None)
            if not in_namespace:
                del self.pdbs[namespace]

    # --- pods ---------------------------------------------------------------------------

    def place(self, pod: PodInfo, node: str) -> None:
        """Account ``pod`` on ``node`` (bound, or assumed by this scheduler); placing it again
        moves it. A pod on a node not known yet (the pod informer can be ahead of the node
        informer) is kept and counted once the node arrives; so are the pods of a node that
        went away and comes back."""
        found = self.placed.get(pod.key)
        if found is not None and found[0] == node and same_footprint(found[2], pod):
            # the binding's echo, a status update: the counts, indexes and listeners'
            # views stay as they are; only the record is new
            self.placed[pod.key] = (node, found[1], pod)
            self.evicting.discard(pod.key)
            self.generation += 1
            return
        self.unplace(pod.key)
        vector = self.table.pod_vector(pod.requests)
        self.placed[pod.key] = (node, vector, pod)
        self.on_node.setdefault(node, set()).add(pod.key)
        self.volumes.pod_placed(pod, node)
        self.pod_index.add(pod, node)
        self.generation += 1
        info = self.nodes.get(node)
        if info is not None:
            self.account(info.row, vector, pod.host_ports, 1)
        if self._listeners:
            self._changed(node, pod, 1)

    def unplace(self, key: str) -> None:
        """Forget a placed pod (deleted, or an assumed pod whose binding failed)."""
        found = self.placed.pop(key, None)
        self.evicting.discard(key)
        if found is None:
            return
        node, vector, placed = found
        keys = self.on_node.get(node)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self.on_node[node]
        self.volumes.pod_unplaced(placed, node)
        self.pod_index.remove(placed, node)
        self.generation += 1
        info = self.nodes.get(node)
        if info is not None:
            self.account(info.row, vector, placed.host_ports, -1)
        if self._listeners:
            self._changed(node, placed, -1)

    def account(self, row: int, vector: PodVector, ports: tuple[HostPort, ...], sign: int) -> None:
        """Add (``sign=1``) or remove a pod's requests and host ports on a row."""
        self.table.add_pod(row, vector, sign)
        for protocol, ip, port in ports:
            user = (protocol, port, ip, row)
            count = self._port_users.get(user, 0) + sign
            by_ip = self.ports.setdefault((protocol, port), {})
            if count > 0:
                self._port_users[user] = count
                by_ip[ip] = by_ip.get(ip, 0) | (1 << row)
                continue
            self._port_users.pop(user, None)
            bits = by_ip.get(ip, 0) & ~(1 << row)
            if bits:
                by_ip[ip] = bits
            else:
                by_ip.pop(ip, None)
                if not by_ip:
                    self.ports.pop((protocol, port), None)

    def rows_using_port(self, protocol: str, port: int, ip: str) -> int:
        """Rows where a placed pod's host port conflicts with (protocol, ip, port): the same
        protocol and port on the same IP, or either side on every address."""
        by_ip = self.ports.get((protocol, port))
        if not by_ip:
            return 0
        out = 0
        for used_ip, bits in by_ip.items():
            if ip == ANY_IP or used_ip in (ANY_IP, ip):
                out |= bits
        return out
