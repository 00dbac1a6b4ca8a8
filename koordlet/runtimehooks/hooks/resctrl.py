"""Resctrl: a resctrl group of its own for each pod that asks for one.

A pod with the annotation ``node.koordinator.sh/resctrl`` gets the group ``koordlet-<pod UID>``
under the resctrl root:

* pod level: the group is made (``mkdir``) and its schemata written, one line per resource:
  ``L3`` from ``llc.schemata.range`` ``[start%, end%)`` (every cache id) and
  ``llc.schemataPerCache`` (``{"cacheid": n, "range": [s, e]}``, that cache id), turned into
  way masks of the node's ``cbm_mask`` as the QoS-class groups are (``ceil(w * s%)`` to
  ``ceil(w * e%)``); ``MB`` from ``mb.schemata.percent`` and ``mb.schemataPerCache``
  (``{"cacheid": n, "percent": p}``), a percent rounded up to a multiple of ten on Intel and
  on AMD 2048 for 100 % or ``int(160 * p / 100)``. Cache ids the annotation does not name keep
  the root group's value (upstream leaves them 0, which makes the whole line invalid and
  skipped); a resource the annotation does not mention is not written; a range or percent the
  kernel would refuse is skipped with a warning;
* container level: the container's threads (``tasks``, ``cgroup.threads`` on v2) not in the
  group yet are appended to the group's ``tasks``;
* PostStopPodSandbox (NRI / proxy transports) and the all-pods level: groups
  ``koordlet-<uid>`` of pods that are gone, or no longer ask for a group, are removed
  (``rmdir``; their tasks return to the default group). While the hook is disabled the
  all-pods level removes every ``koordlet-`` group, so turning the gate off undoes it.

The node's ``cbm_mask`` and CPU vendor come from the NodeResourceTopology annotation
``node.koordinator.sh/cpu-basic-info`` (what the koordlet reports), else from resctrl's
``info/L3/cbm_mask`` and ``/proc/cpuinfo``. The hook is enabled with the ``Resctrl`` gate when
resctrl is mounted with L3 allocation (the root schemata validates); it does not mount
resctrl itself. Upstream's NRI path also hands the runtime the group as the container's RDT
class; the reconciler moves tasks instead, and the class will be the NRI transport's job.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from koordinator.api.extension.annotations import AnnotationError
from koordinator.api.extension.topology import (
    ANNOTATION_RESCTRL,
    ResctrlSpec,
    get_cpu_basic_info,
    get_resctrl,
)
from koordinator.api.extension.topology import Resctrl as ResctrlAnnotation
from koordinator.kube.clock import SYSTEM_CLOCK, Now
from koordlet.executor import (
    ResctrlGroupRemoveUpdate,
    ResctrlGroupUpdate,
    ResctrlSchemataUpdate,
    ResctrlTasksUpdate,
    Update,
)
from koordlet.runtimehooks.framework import HookBase
from koordlet.runtimehooks.protocol import ContainerContext, NodeFacts, PodContext
from koordlet.statesinformer.podmeta import PodMeta
from koordlet.system.cgroup.registry import CPU_TASKS
from koordlet.system.errors import HostError
from koordlet.system.paths import HostPaths
from koordlet.system.proc import parse_id_list
from koordlet.system.resctrl import POD_GROUP_PREFIX, ResctrlInfo, Schemata, l3_mask, mba_value
from koordlet.system.resctrl import Resctrl as ResctrlFS
from koordlet.system.topology import read_cpu_basic_info

log = logging.getLogger(__name__)

NAME = "Resctrl"
DETECT_TTL = 30.0


def group_of(pod: PodMeta) -> str:
    return POD_GROUP_PREFIX + pod.uid


def pod_spec(pod: PodMeta) -> ResctrlAnnotation | None:
    """The pod's annotation; None when it has none or it does not parse (logged)."""
    if ANNOTATION_RESCTRL not in pod.annotations:
        return None
    try:
        return get_resctrl(pod.annotations)
    except (AnnotationError, ValueError) as err:
        log.warning("pod %s: resctrl annotation ignored: %s", pod.key, err)
        return None


@dataclass(frozen=True)
class HostResctrl:
    """What the schemata need from the node: detection, the root schemata, mask and vendor."""

    info: ResctrlInfo
    root: Schemata | None
    cbm_mask: str
    vendor_id: str


def l3_line(spec: ResctrlSpec | None, root: Schemata, cbm_mask: str) -> str | None:
    if spec is None or not root.l3:
        return None
    masks = dict(root.l3)
    changed = False
    ranges: list[tuple[list[int], list[int]]] = []
    if spec.schemata is not None and len(spec.schemata.range) == 2:
        ranges.append((sorted(root.l3), spec.schemata.range))
    for entry in spec.schemata_per_cache:
        if len(entry.range) != 2:
            continue
        if entry.cache_id not in root.l3:
            log.warning("resctrl: L3 cache id %d not on this node", entry.cache_id)
            continue
        ranges.append(([entry.cache_id], entry.range))
    for ids, (start, end) in ranges:
        try:
            mask = l3_mask(cbm_mask, start, end)
        except HostError as err:
            log.warning("resctrl: L3 range [%d, %d) skipped: %s", start, end, err.strerror)
            continue
        masks.update(dict.fromkeys(ids, mask))
        changed = True
    return Schemata(l3=masks).l3_line() if changed else None


def mb_line(spec: ResctrlSpec | None, root: Schemata, vendor_id: str) -> str | None:
    if spec is None or not root.mb:
        return None
    values = dict(root.mb)
    changed = False
    percents: list[tuple[list[int], int]] = []
    if spec.schemata is not None and spec.schemata.percent:
        percents.append((sorted(root.mb), spec.schemata.percent))
    for entry in spec.schemata_per_cache:
        if not entry.percent:
            continue
        if entry.cache_id not in root.mb:
            log.warning("resctrl: MB domain %d not on this node", entry.cache_id)
            continue
        percents.append(([entry.cache_id], entry.percent))
    for ids, percent in percents:
        value = mba_value(percent, vendor_id)
        if value is None:
            log.warning("resctrl: memory bandwidth %d%% is not within 1-100, skipped", percent)
            continue
        values.update(dict.fromkeys(ids, value))
        changed = True
    return Schemata(mb=values).mb_line() if changed else None


def schemata_lines(spec: ResctrlAnnotation, host: HostResctrl) -> list[str]:
    if host.root is None:
        return []
    lines = [l3_line(spec.llc, host.root, host.cbm_mask)]
    if host.info.mba:
        lines.append(mb_line(spec.mb, host.root, host.vendor_id))
    return [line for line in lines if line is not None]


class Resctrl(HookBase):
    NAME = NAME
    GATE = NAME

    def __init__(self, *, detect_ttl: float = DETECT_TTL, clock: Now = SYSTEM_CLOCK.monotonic) -> None:
        self.detect_ttl = detect_ttl
        self.clock = clock
        self._lock = threading.Lock()
        self._detected: tuple[float, HostPaths, ResctrlInfo, Schemata | None] | None = None
        self._vendor: str | None = None

    def _detect(self, paths: HostPaths) -> tuple[ResctrlInfo, Schemata | None]:
        """resctrl's state, read at most every ``detect_ttl`` seconds."""
        now = self.clock()
        with self._lock:
            cached = self._detected
            if cached is not None and cached[1] == paths and now - cached[0] < self.detect_ttl:
                return cached[2], cached[3]
        fs = ResctrlFS(paths)
        info = fs.detect()
        try:
            root = fs.root_schemata() if info.mounted else None
        except HostError:
            root = None
        with self._lock:
            self._detected = (now, paths, info, root)
        return info, root

    def host(self, node: NodeFacts) -> HostResctrl:
        info, root = self._detect(node.cgroups.paths)
        try:
            basic = get_cpu_basic_info(node.topology_annotations)
        except (AnnotationError, ValueError):
            basic = None
        cbm = (basic.cat_l3_cbm_mask if basic is not None else "") or info.cbm_mask
        vendor = basic.vendor_id if basic is not None else ""
        if not vendor:
            if self._vendor is None:
                try:
                    self._vendor = read_cpu_basic_info(node.cgroups.paths).vendor_id
                except (OSError, ValueError):
                    self._vendor = ""
            vendor = self._vendor
        return HostResctrl(info, root, cbm, vendor)

    def enabled(self, node: NodeFacts) -> tuple[bool, str]:
        gated, why = super().enabled(node)
        if not gated:
            return gated, why
        info, _ = self._detect(node.cgroups.paths)
        if not info.mounted:
            return False, f"resctrl is {info.reason}"
        if not info.l3_cat:
            return False, "resctrl has no L3 cache allocation (info/L3)"
        return True, ""

    def pod(self, ctx: PodContext) -> None:
        spec = pod_spec(ctx.pod)
        if spec is None:
            return
        group = group_of(ctx.pod)
        ctx.response.extra.append(ResctrlGroupUpdate(group, NAME))
        for line in schemata_lines(spec, self.host(ctx.node)):
            ctx.response.extra.append(ResctrlSchemataUpdate(group, line, NAME))

    def container(self, ctx: ContainerContext) -> None:
        if pod_spec(ctx.pod) is None:
            return
        try:
            tids = parse_id_list(ctx.node.cgroups.read_text(CPU_TASKS, ctx.container.cgroup_dir))
        except HostError:
            return  # the container is gone or not started
        group = group_of(ctx.pod)
        fs = ResctrlFS(ctx.node.cgroups.paths)
        try:
            present = set(fs.read_tasks(group))
        except HostError:
            present = set()  # the group is made in this pass
        fresh = tuple(t for t in tids if t not in present)
        if fresh:
            ctx.response.extra.append(ResctrlTasksUpdate(group, fresh, NAME))

    def remove_pod(self, ctx: PodContext) -> None:
        if ANNOTATION_RESCTRL in ctx.pod.annotations:
            ctx.response.extra.append(ResctrlGroupRemoveUpdate(group_of(ctx.pod), NAME))

    def all_pods(self, pods: Sequence[PodMeta], node: NodeFacts) -> list[Update]:
        """Remove the groups of pods that are gone (all of them while the hook is disabled)."""
        ok, _ = self.enabled(node)
        wanted = {group_of(p) for p in pods if ANNOTATION_RESCTRL in p.annotations} if ok else set()
        groups = ResctrlFS(node.cgroups.paths).groups()
        return [
            ResctrlGroupRemoveUpdate(group, NAME)
            for group in groups
            if group.startswith(POD_GROUP_PREFIX) and group not in wanted
        ]
