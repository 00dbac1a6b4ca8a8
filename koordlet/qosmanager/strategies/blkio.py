"""BlkIOReconcile: block I/O throttles and weights of BE pods (gate BlkIOReconcile).

Block configs name a disk three ways: ``device`` (``/dev/sdb``, a partition or a mapper
device: the disks under it), ``volumegroup`` (the disks under the volume group's active
logical volumes) and ``podvolume`` (a volume of the pod: the disks under the filesystem
mounted at ``<kubelet>/pods/<uid>/volumes/kubernetes.io~csi/<name>/mount``). Disks are
found from sysfs and the host's mount table (:mod:`koordlet.system.blockdev`), not from
``lsblk``/``vgs``/``findmnt``; what that cannot resolve is skipped with a note: volume groups
without an active logical volume, and PVC-backed pod volumes (their PV name comes from the
PVC, which this snapshot does not carry — CSI inline volumes work).

* **BE class** (``beClass.blkioQOS``, reset to no blocks when disabled): on the BE QoS
  directory, per disk ``blkio.throttle.{read_iops,read_bps,write_iops,write_bps}_device``
  ``"maj:min N"`` (0 = unlimited; on v2 the ``rbps``/``wbps``/``riops``/``wiops`` fields of
  ``io.max``, 0 written as ``max``) and ``blkio.cost.weight`` ``"maj:min <ioWeightPercent>"``
  (100 by default; v2 ``io.weight``, Anolis ``blkio.cost.weight`` on v1, where present).
* **Root** (``cgroupRoot.blkioQOS``, iocost where the kernel has it): ``blkio.cost.qos``
  (v2 ``io.cost.qos``) ``"maj:min enable=1 ctrl=user rpct=95 rlat=3000 wpct=95 wlat=3000"``
  from the latency settings, and ``blkio.cost.model`` ``"maj:min ctrl=auto"`` or, with
  ``enableUserModel``, ``"ctrl=user rbps= rseqiops= rrandiops= wbps= wseqiops= wrandiops="``.
* **Pods** with a koordinator QoS label, running, with a ``koordinator.sh/blkioQOS`` annotation:
  the same throttles and weight on the pod's cgroup.
* **Removal**: a disk limited in a cgroup's files but no longer configured is reset
  (throttles 0, weight 100; iocost ``enable=0``) — unless a configured block could not be
  resolved this round, since it may be that disk.

LSR and LS block configs are not supported (as upstream) and only noted.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from koordinator.api.extension.annotations import AnnotationError
from koordinator.api.extension.podqos import get_pod_blkio_qos
from koordinator.api.extension.qos import QoSClass, get_pod_qos_class_raw
from koordinator.api.kubeqos import KubeQOSClass
from koordinator.api.types.slo import BlockCfg, IOCfg
from koordlet.executor import CgroupUpdate
from koordlet.qosmanager.framework import GatedStrategy, Plan, Snapshot
from koordlet.statesinformer.podmeta import PodMeta
from koordlet.system.blockdev import BlockDevices, mount_device_number
from koordlet.system.cgroup.registry import (
    BLKIO_COST_MODEL,
    BLKIO_COST_QOS,
    BLKIO_COST_WEIGHT,
    BLKIO_READ_BPS,
    BLKIO_READ_IOPS,
    BLKIO_WRITE_BPS,
    BLKIO_WRITE_IOPS,
)

NAME = "BlkIOReconcile"
GATE = "BlkIOReconcile"
DEFAULT_WEIGHT = 100
DEFAULT_LATENCY = 3000
DEFAULT_LATENCY_PERCENT = 95
THROTTLES = (BLKIO_READ_IOPS, BLKIO_READ_BPS, BLKIO_WRITE_IOPS, BLKIO_WRITE_BPS)
_DISK = re.compile(r"^(\d+:\d+)\s+(.*)$")


def _active_disks(text: object, idle: Callable[[list[str]], bool]) -> set[str]:
    """Disks of a device file (``maj:min`` lines) whose settings are not ``idle``."""
    out: set[str] = set()
    for line in str(text or "").splitlines():
        match = _DISK.match(line.strip())
        if match is not None and not idle(match.group(2).split()):
            out.add(match.group(1))
    return out


def throttle_idle(tokens: list[str]) -> bool:
    """``8:16 0`` (v1) or ``8:16 rbps=max wbps=max riops=max wiops=max`` (v2): no limit."""
    return all((t.partition("=")[2] or t) in ("0", "max") for t in tokens)


def weight_idle(tokens: list[str]) -> bool:
    return tokens == [str(DEFAULT_WEIGHT)]


def iocost_idle(tokens: list[str]) -> bool:
    return "enable=1" not in tokens


def throttle_values(io: IOCfg) -> list[tuple[str, int]]:
    values = (io.read_iops, io.read_bps, io.write_iops, io.write_bps)
    return [(key, value if value is not None else 0) for key, value in zip(THROTTLES, values, strict=True)]


def cost_qos(number: str, io: IOCfg) -> str:
    rpct = io.read_latency_percent if io.read_latency_percent is not None else DEFAULT_LATENCY_PERCENT
    wpct = io.write_latency_percent if io.write_latency_percent is not None else DEFAULT_LATENCY_PERCENT
    rlat = io.read_latency if io.read_latency is not None else DEFAULT_LATENCY
    wlat = io.write_latency if io.write_latency is not None else DEFAULT_LATENCY
    return f"{number} enable=1 ctrl=user rpct={rpct} rlat={rlat} wpct={wpct} wlat={wlat}"


def cost_model(number: str, io: IOCfg) -> str:
    if not io.enable_user_model:
        return f"{number} ctrl=auto"
    values = (
        ("rbps", io.model_read_bps),
        ("rseqiops", io.model_read_seq_iops),
        ("rrandiops", io.model_read_rand_iops),
        ("wbps", io.model_write_bps),
        ("wseqiops", io.model_write_seq_iops),
        ("wrandiops", io.model_write_rand_iops),
    )
    return f"{number} ctrl=user " + " ".join(f"{k}={v or 0}" for k, v in values)


class BlkIOReconcile(GatedStrategy):
    NAME = NAME
    GATE = GATE

    def plan(self, snapshot: Snapshot) -> Plan:
        plan = Plan(NAME)
        strategy = snapshot.node_slo.resource_qos_strategy
        if strategy is None:
            return plan.note("no resourceQOSStrategy in the NodeSLO")
        devices = BlockDevices.scan(snapshot.host_paths)
        for name, qos in (("lsrClass", strategy.lsr_class), ("lsClass", strategy.ls_class)):
            blkio = qos.blkio_qos if qos is not None else None
            if blkio is not None and blkio.enable and blkio.blocks:
                plan.note(f"{name}: block I/O configs are only supported for BE pods")
        be = strategy.be_class.blkio_qos if strategy.be_class is not None else None
        if be is not None:
            blocks = be.blocks if be.enable else []
            be_dir = snapshot.host.layout.qos_dir(KubeQOSClass.BEST_EFFORT)
            self._throttles(snapshot, plan, devices, blocks, be_dir, None)
        root = strategy.cgroup_root.blkio_qos if strategy.cgroup_root is not None else None
        if root is not None:
            self._iocost(snapshot, plan, devices, root.blocks if root.enable else [])
        for pod in snapshot.pods:
            if get_pod_qos_class_raw(pod.pod) is QoSClass.NONE or not pod.is_running:
                continue
            try:
                config = get_pod_blkio_qos(pod.annotations)
            except AnnotationError as err:
                plan.note(f"{pod.key}: blkioQOS annotation ignored ({err})")
                continue
            if config is not None:
                self._throttles(snapshot, plan, devices, config.blocks, pod.cgroup_dir, pod)
        return plan

    # --- disks ---------------------------------------------------------------------------------

    def _disk_numbers(
        self, snapshot: Snapshot, plan: Plan, devices: BlockDevices, block: BlockCfg, pod: PodMeta | None
    ) -> list[str]:
        where = f"{pod.key}: " if pod is not None else ""
        if block.block_type == "device":
            disks = devices.disks_of(block.name)
        elif block.block_type == "volumegroup":
            disks = devices.volume_group_disks(block.name)
        elif block.block_type == "podvolume":
            if pod is None:
                plan.note(f"podvolume {block.name!r} outside a pod annotation")
                return []
            disks = self._pod_volume_disks(snapshot, plan, devices, block.name, pod)
        else:
            plan.note(f"{where}block type {block.block_type!r} of {block.name!r} not supported")
            return []
        if not disks:
            plan.note(f"{where}{block.block_type} {block.name!r}: no disk found")
        return [devices.disks[d] for d in disks]

    def _pod_volume_disks(
        self, snapshot: Snapshot, plan: Plan, devices: BlockDevices, volume: str, pod: PodMeta
    ) -> list[str]:
        spec = next(
            (v for v in (pod.pod.get("spec") or {}).get("volumes") or () if v.get("name") == volume), None
        )
        if spec is None:
            return []
        if spec.get("persistentVolumeClaim") is not None:
            plan.note(f"{pod.key}: volume {volume!r} is a PVC; its PV name is not known here, skipped")
            return []
        if spec.get("csi") is None:
            return []
        mount = (
            snapshot.host_paths.var_lib_kubelet / "pods" / pod.uid / "volumes" / "kubernetes.io~csi" / volume
        )
        number = mount_device_number(snapshot.host_paths, str(mount / "mount"))
        name = devices.names.get(number or "")
        return devices.disks_of(name) if name else []

    # --- throttles and weights ------------------------------------------------------------------

    def _throttles(
        self,
        snapshot: Snapshot,
        plan: Plan,
        devices: BlockDevices,
        blocks: Sequence[BlockCfg],
        relative: str,
        pod: PodMeta | None,
    ) -> None:
        weight = snapshot.cgroups.supported(BLKIO_COST_WEIGHT)
        recorded: set[str] = set()
        for key in THROTTLES:
            recorded |= _active_disks(snapshot.cgroups.read(key, relative), throttle_idle)
        if weight:
            recorded |= _active_disks(snapshot.cgroups.read(BLKIO_COST_WEIGHT, relative), weight_idle)
        configured: set[str] = set()
        unresolved = False
        for block in blocks:
            numbers = self._disk_numbers(snapshot, plan, devices, block, pod)
            unresolved |= not numbers
            for number in numbers:
                configured.add(number)
                io = block.io_cfg
                for key, value in throttle_values(io):
                    plan.updates.append(CgroupUpdate(key, relative, f"{number} {value}", NAME))
                if weight:
                    percent = io.io_weight_percent if io.io_weight_percent is not None else DEFAULT_WEIGHT
                    plan.updates.append(
                        CgroupUpdate(BLKIO_COST_WEIGHT, relative, f"{number} {percent}", NAME)
                    )
        stale = sorted(recorded - configured)
        if stale and unresolved:
            plan.note(f"{relative}: disks {', '.join(stale)} not reset while a block is unresolved")
            return
        for number in stale:
            for key in THROTTLES:
                plan.updates.append(CgroupUpdate(key, relative, f"{number} 0", NAME))
            if weight:
                plan.updates.append(
                    CgroupUpdate(BLKIO_COST_WEIGHT, relative, f"{number} {DEFAULT_WEIGHT}", NAME)
                )

    def _iocost(
        self, snapshot: Snapshot, plan: Plan, devices: BlockDevices, blocks: Sequence[BlockCfg]
    ) -> None:
        if not snapshot.cgroups.supported(BLKIO_COST_QOS):
            if blocks:
                plan.note("cgroupRoot: this kernel has no iocost (blkio.cost.qos / io.cost.qos)")
            return
        recorded = _active_disks(snapshot.cgroups.read(BLKIO_COST_QOS, ""), iocost_idle)
        configured: set[str] = set()
        unresolved = False
        model = snapshot.cgroups.supported(BLKIO_COST_MODEL)
        for block in blocks:
            numbers = self._disk_numbers(snapshot, plan, devices, block, None)
            unresolved |= not numbers
            for number in numbers:
                configured.add(number)
                plan.updates.append(CgroupUpdate(BLKIO_COST_QOS, "", cost_qos(number, block.io_cfg), NAME))
                if model:
                    plan.updates.append(
                        CgroupUpdate(BLKIO_COST_MODEL, "", cost_model(number, block.io_cfg), NAME)
                    )
        stale = sorted(recorded - configured)
        if stale and unresolved:
            plan.note(f"cgroupRoot: disks {', '.join(stale)} not reset while a block is unresolved")
            return
        for number in stale:
            plan.updates.append(CgroupUpdate(BLKIO_COST_QOS, "", f"{number} enable=0", NAME))
