"""A fake sysfs tree laid out the way the kernel does it, for the device discovery tests.

Real device directories live under ``sys/devices/pci<dom>:<bus>/<bridge>/<bdf>``;
``sys/bus/pci/devices/<bdf>`` is a relative symlink to them; SR-IOV VFs are siblings of
their PF, linked both ways (``<pf>/virtfn<N> -> ../<vf>``, ``<vf>/physfn -> ../<pf>``);
``sys/class/infiniband/<ibdev>`` links to ``<device dir>/infiniband/<ibdev>``, where the
``ports/<N>/state`` files live.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

MELLANOX = 0x15B3
CX5 = 0x1017
CX5_VF = 0x1018
NETWORK = 0x020000
INFINIBAND = 0x020700
DISPLAY = 0x030200


class FakeSysfs:
    """Builds ``<root>/sys``; ``sys_root`` is what discovery is pointed at."""

    def __init__(self, root: Path) -> None:
        self.sys_root = root / "sys"
        (self.sys_root / "bus" / "pci" / "devices").mkdir(parents=True, exist_ok=True)

    def pci(
        self,
        bdf: str,
        *,
        parent: str = "pci0000:3a/0000:3a:00.0",
        cls: int = NETWORK,
        vendor: int = MELLANOX,
        device: int = CX5,
        numa: int | None = 0,
        ib: Sequence[str] = (),
        numvfs: str | None = None,
    ) -> Path:
        """A PCI device directory plus its ``bus/pci/devices`` link; returns the directory."""
        directory = self.sys_root / "devices" / parent / bdf
        directory.mkdir(parents=True)
        (directory / "class").write_text(f"0x{cls:06x}\n")
        (directory / "vendor").write_text(f"0x{vendor:04x}\n")
        (directory / "device").write_text(f"0x{device:04x}\n")
        if numa is not None:
            (directory / "numa_node").write_text(f"{numa}\n")
        if numvfs is not None:
            (directory / "sriov_numvfs").write_text(numvfs)
        for name in ib:
            (directory / "infiniband" / name).mkdir(parents=True)
            klass = self.sys_root / "class" / "infiniband"
            klass.mkdir(parents=True, exist_ok=True)
            os.symlink(f"../../devices/{parent}/{bdf}/infiniband/{name}", klass / name)
        self.bus_link(bdf, f"../../../devices/{parent}/{bdf}")
        return directory

    def bus_link(self, bdf: str, target: str) -> None:
        os.symlink(target, self.sys_root / "bus" / "pci" / "devices" / bdf)

    def vfs(
        self,
        pf: str,
        vfs: Sequence[str],
        *,
        parent: str = "pci0000:3a/0000:3a:00.0",
        ib: Sequence[str] = (),
    ) -> None:
        """SR-IOV VFs of ``pf`` (``virtfn<i>`` for the i-th, with ib device ``ib[i]`` if
        given), and ``sriov_numvfs`` set to their count."""
        pf_dir = self.sys_root / "devices" / parent / pf
        (pf_dir / "sriov_numvfs").write_text(f"{len(vfs)}\n")
        for index, vf in enumerate(vfs):
            vf_ib = (ib[index],) if index < len(ib) else ()
            vf_dir = self.pci(vf, parent=parent, device=CX5_VF, ib=vf_ib)
            os.symlink(f"../{pf}", vf_dir / "physfn")
            os.symlink(f"../{vf}", pf_dir / f"virtfn{index}")

    def port(self, ib_device: str, port: int, state: str) -> None:
        """``class/infiniband/<ib_device>/ports/<port>/state``, e.g. ``4: ACTIVE`` (written
        through the class link when the device has one)."""
        directory = self.sys_root / "class" / "infiniband" / ib_device / "ports" / str(port)
        directory.mkdir(parents=True)
        (directory / "state").write_text(state + "\n")
