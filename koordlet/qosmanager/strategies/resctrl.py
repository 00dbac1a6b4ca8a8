"""ResctrlReconcile: last-level cache ways and memory bandwidth per QoS class (gate RdtResctrl).

Runs where the CPU has ``cat_l3`` and ``mba`` and resctrl is mounted (the root ``schemata``
parses and validates). On such a CPU, when the root schemata is missing or invalid, the
strategy mounts resctrl at ``<sys-fs-root>/resctrl`` (``mount -t resctrl resctrl``, as
upstream) and validates it again. It tries once: a failed mount is logged once and the
strategy stays off until the schemata validates (someone else mounted it). The mount
function is given by the agent; without one (``koordlet plan``, tests) nothing is mounted.
Each round:

* the groups ``LSR``, ``LS`` and ``BE`` are made when missing;
* each group's ``L3`` line gives every cache id of the root schemata the mask of the ways
  ``[ceil(w * start%), ceil(w * end%))`` of the ``w`` ways in ``info/L3/cbm_mask``, from the
  class's ``resctrlQOS`` (LSR for the LSR group, LS for LS, BE for BE; a disabled class has
  been reset to 0-100 % by the NodeSLO merge, so its group gets the whole cache back);
* each group's ``MB`` line (when the root schemata has one) gives every MB domain
  ``mbaPercent`` rounded up to a multiple of ten on Intel, and on AMD 2048 for 100 % or
  ``int(160 * percent / 100)``; 0 or over 100 is skipped;
* the tasks of the containers and the sandbox of every pending or running pod whose class has
  ``resctrlQOS.enable`` go to the class's group (LSE and LSR pods to LSR), only those not there
  yet; pods with their own group (annotation ``node.koordinator.sh/resctrl``) are left to the
  runtime hook.

The executor writes a schemata line only when it differs from the group's current one, and
appends task ids one write each (never cached: ids are reused).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from koordinator.api.extension.qos import QoSClass
from koordinator.api.extension.topology import ANNOTATION_RESCTRL
from koordinator.api.types.slo import ResourceQOS, ResourceQOSStrategy
from koordlet.executor import ResctrlGroupUpdate, ResctrlSchemataUpdate, ResctrlTasksUpdate
from koordlet.qosmanager.framework import GatedStrategy, Plan, Snapshot
from koordlet.qosmanager.strategies import podspec
from koordlet.statesinformer.podmeta import PodMeta
from koordlet.system.cgroup.registry import CPU_TASKS, Subsystem
from koordlet.system.errors import HostError
from koordlet.system.proc import parse_id_list
from koordlet.system.resctrl import QOS_GROUPS, Resctrl, Schemata, cpu_supports_resctrl, l3_mask, mba_value

log = logging.getLogger(__name__)

NAME = "ResctrlReconcile"
GATE = "RdtResctrl"
GROUP_OF_QOS = {QoSClass.LSE: "LSR", QoSClass.LSR: "LSR", QoSClass.LS: "LS", QoSClass.BE: "BE"}

#: mounts resctrl at the root of the given :class:`Resctrl` (:meth:`Resctrl.mount`), raising
#: HostError on failure
MountResctrl = Callable[[Resctrl], None]


def class_config(strategy: ResourceQOSStrategy, group: str) -> ResourceQOS | None:
    return {"LSR": strategy.lsr_class, "LS": strategy.ls_class, "BE": strategy.be_class}.get(group)


class ResctrlReconcile(GatedStrategy):
    NAME = NAME
    GATE = GATE

    def __init__(self, interval: float = 1.0, *, mount: MountResctrl | None = None) -> None:
        super().__init__(interval)
        #: how to mount resctrl where the CPU supports it and it is not mounted; None: never
        self.mount = mount
        #: why the one mount tried failed (or left an invalid schemata); "" before any try
        #: or after a successful one
        self._mount_failed = ""
        self._mount_tried = False

    def enabled(self, snapshot: Snapshot) -> tuple[bool, str]:
        gated, why = super().enabled(snapshot)
        if not gated:
            return gated, why
        info = snapshot.host.cpu_info
        if info is None:
            return False, "CPU information not collected yet"
        supported, why = cpu_supports_resctrl(info.basic.flags)
        if not supported:
            return False, f"no resctrl: {why}"
        resctrl = Resctrl(snapshot.host_paths)
        try:
            resctrl.root_schemata()
        except HostError as err:
            invalid = f"resctrl is not mounted at {resctrl.root}: {err.strerror}"
        else:
            return True, ""
        if self.mount is None:
            return False, invalid
        if not self._mount_tried:
            self._mount_tried = True
            self._try_mount(resctrl, invalid)
            if not self._mount_failed:
                return True, ""
        return False, f"{invalid} ({self._mount_failed})" if self._mount_failed else invalid

    def _try_mount(self, resctrl: Resctrl, invalid: str) -> None:
        """Mount resctrl and validate its root schemata again; a failure is logged here,
        once, and kept in :attr:`_mount_failed`."""
        assert self.mount is not None
        try:
            self.mount(resctrl)
        except HostError as err:
            self._mount_failed = f"mounting it failed: {err.strerror}; not tried again"
            log.warning("%s, and mounting it failed: %s; %s stays off", invalid, err.strerror, NAME)
            return
        try:
            resctrl.root_schemata()
        except HostError as err:
            self._mount_failed = f"mounted by the koordlet, but its schemata is invalid: {err.strerror}"
            log.warning(
                "resctrl mounted at %s, but its schemata is invalid: %s; %s stays off",
                resctrl.root,
                err.strerror,
                NAME,
            )
            return
        log.info("resctrl mounted at %s", resctrl.root)

    def plan(self, snapshot: Snapshot) -> Plan:
        plan = Plan(NAME)
        strategy = snapshot.node_slo.resource_qos_strategy
        if strategy is None:
            return plan.note("no resourceQOSStrategy in the NodeSLO")
        resctrl = Resctrl(snapshot.host_paths)
        try:
            root = resctrl.root_schemata()
        except HostError as err:
            return plan.note(f"resctrl root schemata unreadable: {err.strerror}")
        info = snapshot.host.cpu_info
        cbm = (info.cat_l3_cbm_mask if info is not None else "") or resctrl.detect().cbm_mask
        vendor = (info.basic.vendor_id if info is not None else "") or snapshot.host.vendor_id
        existing = set(resctrl.groups())
        for group in QOS_GROUPS:
            if group not in existing:
                plan.updates.append(ResctrlGroupUpdate(group, NAME))
        for group in QOS_GROUPS:
            self._schemata(plan, group, class_config(strategy, group), root, cbm, vendor)
        self._tasks(snapshot, plan, strategy, resctrl, existing)
        return plan

    def _schemata(
        self, plan: Plan, group: str, config: ResourceQOS | None, root: Schemata, cbm: str, vendor: str
    ) -> None:
        qos = config.resctrl_qos if config is not None else None
        if qos is None:
            plan.note(f"{group}: no resctrlQOS config")
            return
        start, end = qos.cat_range_start_percent, qos.cat_range_end_percent
        if start is None or end is None:
            plan.note(f"{group}: L3 range not set")
        elif not cbm:
            plan.note(f"{group}: L3 cbm mask unknown")
        else:
            try:
                mask = l3_mask(cbm, start, end)
            except HostError as err:
                plan.note(f"{group}: {err.strerror}")
            else:
                line = Schemata(l3=dict.fromkeys(sorted(root.l3), mask)).l3_line()
                plan.updates.append(ResctrlSchemataUpdate(group, line, NAME))
        if not root.mb:
            plan.note(f"{group}: no MB domains in the root schemata")
            return
        percent = qos.mba_percent
        value = mba_value(percent, vendor) if percent is not None else None
        if value is None:
            plan.note(f"{group}: MBA percent {percent} not in [1, 100]")
            return
        line = Schemata(mb=dict.fromkeys(sorted(root.mb), value)).mb_line()
        plan.updates.append(ResctrlSchemataUpdate(group, line, NAME))

    def _tasks(
        self,
        snapshot: Snapshot,
        plan: Plan,
        strategy: ResourceQOSStrategy,
        resctrl: Resctrl,
        existing: set[str],
    ) -> None:
        current: dict[str, set[int]] = {}
        for group in QOS_GROUPS:
            try:
                current[group] = set(resctrl.read_tasks(group)) if group in existing else set()
            except HostError:
                current[group] = set()
        new: dict[str, list[int]] = {group: [] for group in QOS_GROUPS}
        for pod in snapshot.pods:
            if ANNOTATION_RESCTRL in pod.annotations or not podspec.is_active(pod):
                continue
            group = GROUP_OF_QOS.get(pod.qos, "")
            config = class_config(strategy, group)
            qos = config.resctrl_qos if config is not None else None
            if qos is None or not qos.enable:
                continue
            for directory in self._task_dirs(snapshot, pod, plan):
                tids = parse_id_list(str(snapshot.cgroups.read(CPU_TASKS, directory) or ""))
                fresh = [t for t in tids if t not in current[group]]
                new[group] += fresh
                current[group].update(fresh)
        for group in QOS_GROUPS:
            if new[group]:
                plan.updates.append(ResctrlTasksUpdate(group, tuple(new[group]), NAME))

    @staticmethod
    def _task_dirs(snapshot: Snapshot, pod: PodMeta, plan: Plan) -> list[str]:
        """The cgroups of the pod's containers, then of its sandbox (the one child cgroup that
        is not a known container's)."""
        containers = [c for c in pod.containers if not c.init]
        dirs = [c.cgroup_dir for c in containers]
        known = {c.cgroup_dir.rsplit("/", 1)[-1] for c in pod.containers}
        others = [d for d in snapshot.cgroups.children(Subsystem.CPU, pod.cgroup_dir) if d not in known]
        if len(others) == 1:
            dirs.append(f"{pod.cgroup_dir}/{others[0]}")
        elif others:
            plan.note(f"{pod.key}: {len(others)} unknown child cgroups, no sandbox tasks moved")
        return dirs
