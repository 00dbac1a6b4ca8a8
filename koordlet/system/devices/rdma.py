"""RDMA NICs and their SR-IOV virtual functions, discovered from sysfs.

The koordlet's twin of upstream's RDMA device collector (``metricsadvisor/devices/rdma`` with
``util/system/{rdma,sriov}.go``). It reports one :class:`RDMADevice` per physical function;
the Device reporter turns each into a ``type: rdma`` entry whose ``vfGroups`` list the VFs.

Discovery (:func:`discover`), all under the configured sysfs root:

* candidates: every entry of ``<sys>/bus/pci/devices/`` whose ``class`` is a network
  controller (``0x02xxxx``) and that is not itself a VF (no ``physfn`` link);
* RDMA: the PF must have at least one entry under ``<bdf>/infiniband/`` (e.g. ``mlx5_0``);
* SR-IOV: when ``sriov_numvfs`` > 0, the ``virtfn<N>`` links, in numeric order of N, resolved
  to the VF's BDF (``sriov_totalvfs`` is never read, as upstream);
* health: every ``<sys>/class/infiniband/<ibdev>/ports/*/state`` says ``ACTIVE``; no ports
  or any read error means unhealthy;
* NUMA node and PCIe root via :mod:`koordlet.system.devices.pci`.

Nothing here raises into the agent: an unreadable or vanished entry is skipped (logged at
debug) and the scan goes on.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path

from koordlet.system.devices import pci

__all__ = ["RDMADevice", "VirtualFunction", "devices", "discover", "supported"]

log = logging.getLogger(__name__)

_NETWORK_CLASS = 0x02
_MLX_NAME = re.compile(r"^mlx\d+_(\d+)$")
_VIRTFN = re.compile(r"^virtfn(\d+)$")


@dataclass(frozen=True)
class VirtualFunction:
    """One SR-IOV VF of an RDMA PF; ``minor`` is -1 as upstream reports it."""

    bus_id: str
    minor: int = -1


@dataclass(frozen=True)
class RDMADevice:
    """One RDMA physical function.

    ``minor`` is the ``<minor>`` of the first (sorted) ib device name ``mlx<N>_<minor>``,
    else the device's index in BDF order among the discovered devices. ``numa_node`` is None
    when ``numa_node`` cannot be read (-1 is reported as 0); ``pcie_root`` is the
    ``pciDDDD:BB`` host bridge, "" when unknown.
    """

    bus_id: str
    ib_devices: tuple[str, ...]
    minor: int
    healthy: bool
    numa_node: int | None
    pcie_root: str
    vendor_id: int | None
    device_id: int | None
    vfs: tuple[VirtualFunction, ...]


def _pci_devices_dir(sys_root: Path) -> Path:
    return sys_root / "bus" / "pci" / "devices"


def _ib_class_dir(sys_root: Path) -> Path:
    return sys_root / "class" / "infiniband"


def devices(sys_root: Path) -> list[str]:
    """The RDMA device names under ``<sys>/class/infiniband`` (e.g. ``mlx5_0``), sorted."""
    try:
        return sorted(p.name for p in _ib_class_dir(sys_root).iterdir())
    except OSError:
        return []


def supported(sys_root: Path) -> tuple[bool, str]:
    """Whether the host has RDMA devices, and why (for ``koordlet probe``)."""
    found = devices(sys_root)
    if found:
        return True, f"{len(found)} device(s): {', '.join(found)}"
    pfs = discover(sys_root)
    if pfs:
        names = ", ".join(f"{d.bus_id} ({'/'.join(d.ib_devices)})" for d in pfs)
        return True, f"{len(pfs)} PCI device(s): {names}"
    return False, f"no RDMA devices under {_ib_class_dir(sys_root)} or {_pci_devices_dir(sys_root)}"


def discover(sys_root: Path) -> list[RDMADevice]:
    """Every RDMA PF under ``<sys_root>``, sorted by bus id; never raises."""
    try:
        names = sorted(p.name for p in _pci_devices_dir(sys_root).iterdir())
    except OSError as err:
        log.debug("rdma: cannot list %s: %s", _pci_devices_dir(sys_root), err)
        return []
    found: list[tuple[str, str, tuple[str, ...]]] = []  # (bus id, dir name, ib devices)
    for name in names:
        ib = _rdma_pf(sys_root, name)
        if ib:
            found.append((name.lower(), name, ib))
    found.sort()
    result = []
    for index, (bus_id, name, ib) in enumerate(found):
        directory = pci.device_dir(sys_root, name)
        result.append(
            RDMADevice(
                bus_id=bus_id,
                ib_devices=ib,
                minor=_minor(ib[0], index),
                healthy=all(_ib_healthy(sys_root, dev) for dev in ib),
                numa_node=pci.numa_node(sys_root, name),
                pcie_root=pci.pcie_root(sys_root, name),
                vendor_id=pci.read_hex(directory / "vendor"),
                device_id=pci.read_hex(directory / "device"),
                vfs=tuple(VirtualFunction(vf) for vf in _vfs(directory)),
            )
        )
    return result


def _rdma_pf(sys_root: Path, name: str) -> tuple[str, ...]:
    """The sorted ib device names of PCI device ``name`` if it is an RDMA PF, else ()."""
    directory = pci.device_dir(sys_root, name)
    klass = pci.read_hex(directory / "class")
    if klass is None:
        log.debug("rdma: %s: no readable class (vanished?), skipped", name)
        return ()
    if klass >> 16 != _NETWORK_CLASS:
        return ()
    if os.path.lexists(directory / "physfn"):
        return ()  # an SR-IOV VF: reported under its PF
    try:
        ib = tuple(sorted(p.name for p in (directory / "infiniband").iterdir()))
    except OSError as err:
        log.debug("rdma: %s: network device without infiniband entries: %s", name, err)
        return ()
    if not ib:
        log.debug("rdma: %s: network device without infiniband entries", name)
    return ib


def _minor(ib_device: str, index: int) -> int:
    # upstream treats a non-mlx name as an error that aborts the scan; here it falls back to
    # the index in BDF order (what upstream's Device reporter renumbers to anyway)
    match = _MLX_NAME.match(ib_device)
    return int(match.group(1)) if match else index


def _vfs(directory: Path) -> list[str]:
    """The VF BDFs of a PF, in ``virtfn<N>`` order; [] without SR-IOV configured."""
    try:
        numvfs = int((directory / "sriov_numvfs").read_text().strip())
    except (OSError, ValueError):
        numvfs = 0  # as upstream: a read or parse error counts as "not configured"
    if numvfs <= 0:
        return []
    try:
        entries = [(int(m.group(1)), p) for p in directory.iterdir() if (m := _VIRTFN.match(p.name))]
    except OSError as err:
        log.debug("rdma: cannot list %s: %s", directory, err)
        return []
    vfs = []
    for _, link in sorted(entries):
        try:
            target = os.readlink(link)
        except OSError as err:  # not a symlink, or gone
            log.debug("rdma: %s: not a VF link: %s", link, err)
            continue
        vfs.append(os.path.basename(os.path.normpath(target)).lower())
    return vfs


def _ib_healthy(sys_root: Path, ib_device: str) -> bool:
    # Upstream (IsRDMADeviceHealthy) hard-codes /sys/class/infiniband even when its sysfs
    # root is remapped (--sys-root-dir=/host-sys/); here the configured sys_root (the
    # koordlet's host paths) is used for health as for everything else.
    ports = _ib_class_dir(sys_root) / ib_device / "ports"
    try:
        states = [(port / "state").read_text() for port in ports.iterdir()]
    except OSError as err:
        log.debug("rdma: %s: port state unreadable: %s", ib_device, err)
        return False
    return bool(states) and all("ACTIVE" in state for state in states)
