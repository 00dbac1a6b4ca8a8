"""Where a PCI device sits: its NUMA node and PCIe root, from sysfs (upstream's
``metricsadvisor/devices/helper/topology.go``).

* NUMA node: ``<sys>/bus/pci/devices/<bdf>/numa_node``; -1 (no affinity) is reported as 0,
  as upstream does; None when the file cannot be read.
* PCIe root: the ``pciDDDD:BB`` component of the device directory's resolved path (the host
  bridge it hangs off, e.g. ``pci0000:00``); "" when there is none.

``bdf`` is the lower-case ``dddd:bb:dd.f`` address.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

__all__ = ["device_dir", "numa_node", "pcie_root", "read_hex"]

_ROOT = re.compile(r"pci[0-9]{4}:[0-9a-fA-F]{2}")


def device_dir(sys_root: Path, bdf: str) -> Path:
    return sys_root / "bus" / "pci" / "devices" / bdf


def numa_node(sys_root: Path, bdf: str) -> int | None:
    try:
        value = int((device_dir(sys_root, bdf) / "numa_node").read_text().strip())
    except (OSError, ValueError):
        return None
    return 0 if value < 0 else value


def pcie_root(sys_root: Path, bdf: str) -> str:
    try:
        resolved = os.path.realpath(device_dir(sys_root, bdf), strict=True)
    except OSError:
        return ""
    found = _ROOT.search(resolved)
    return found.group(0) if found else ""


def read_hex(path: Path) -> int | None:
    """A sysfs hex attribute (``0x020000``); None when unreadable."""
    try:
        return int(path.read_text().strip(), 16)
    except (OSError, ValueError):
        return None
