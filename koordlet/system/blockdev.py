"""Block devices as sysfs describes them, and the device behind a mount point.

What upstream learns from ``lsblk``, ``vgs`` and ``findmnt`` is read here from files:

* ``<sys>/block/<disk>/dev`` gives a disk's ``major:minor``; a partition is a child directory
  with a ``partition`` file (``<sys>/block/sdb/sdb1``);
* a device-mapper device (``dm-N``) names its mapping in ``dm/name`` and ``dm/uuid``
  (``LVM-...`` for logical volumes, named ``<vg>-<lv>`` with every ``-`` inside a name
  doubled) and its underlying devices in ``slaves/``;
* ``<proc>/1/mountinfo`` (the host's mount namespace; ``self`` when that is not readable)
  gives the ``major:minor`` of the filesystem mounted at a path.

A volume group is visible only through its active logical volumes; an inactive one is not
found (``vgs`` would know it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from koordlet.system.paths import HostPaths

_LVM_NAME = re.compile(r"^((?:[^-]|--)+)-((?:[^-]|--)+)$")
_OCTAL = re.compile(r"\\([0-7]{3})")


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def lvm_volume_group(dm_name: str) -> str | None:
    """The volume group of an LVM mapping name (``vg--a-lv`` -> ``vg-a``)."""
    match = _LVM_NAME.match(dm_name)
    return match.group(1).replace("--", "-") if match else None


@dataclass
class BlockDevices:
    #: disk name -> major:minor (whole disks and device-mapper devices)
    disks: dict[str, str] = field(default_factory=dict)
    #: partition name -> disk name
    partitions: dict[str, str] = field(default_factory=dict)
    #: major:minor of every device and partition -> its name
    names: dict[str, str] = field(default_factory=dict)
    #: dm-N -> (mapping name, uuid, underlying device names)
    mappings: dict[str, tuple[str, str, tuple[str, ...]]] = field(default_factory=dict)

    @classmethod
    def scan(cls, paths: HostPaths) -> BlockDevices:
        devices = cls()
        try:
            entries = sorted(paths.sys("block").iterdir())
        except OSError:
            return devices
        for entry in entries:
            number = _read(entry / "dev")
            if number is None:
                continue
            devices.disks[entry.name] = number
            devices.names[number] = entry.name
            for child in sorted(entry.iterdir()) if entry.is_dir() else ():
                part_number = _read(child / "dev")
                if part_number is not None and (child / "partition").exists():
                    devices.partitions[child.name] = entry.name
                    devices.names[part_number] = child.name
            if (entry / "dm").is_dir():
                try:
                    slaves = tuple(sorted(p.name for p in (entry / "slaves").iterdir()))
                except OSError:
                    slaves = ()
                devices.mappings[entry.name] = (
                    _read(entry / "dm" / "name") or "",
                    _read(entry / "dm" / "uuid") or "",
                    slaves,
                )
        return devices

    def disks_of(self, device: str, _depth: int = 0) -> list[str]:
        """The whole disks under ``device`` (``/dev/sdb``, ``sdb1``, ``dm-0``, ``/dev/mapper/vg-lv``)."""
        name = device.removeprefix("/dev/")
        if name.startswith("mapper/"):
            mapped = name.removeprefix("mapper/")
            name = next((dm for dm, (n, _, _) in self.mappings.items() if n == mapped), name)
        if name in self.partitions:
            return [self.partitions[name]]
        if name in self.mappings and _depth < 8:
            out: list[str] = []
            for slave in self.mappings[name][2]:
                out += [d for d in self.disks_of(slave, _depth + 1) if d not in out]
            return out
        return [name] if name in self.disks else []

    def volume_group_disks(self, volume_group: str) -> list[str]:
        """The disks under the active logical volumes of ``volume_group``."""
        out: list[str] = []
        for dm, (name, uuid, _) in sorted(self.mappings.items()):
            if uuid.startswith("LVM-") and lvm_volume_group(name) == volume_group:
                out += [d for d in self.disks_of(dm) if d not in out]
        return out


def mount_device_number(paths: HostPaths, mount_point: str) -> str | None:
    """``major:minor`` of the filesystem mounted at ``mount_point`` (the last such mount)."""
    text = _read(paths.proc("1", "mountinfo")) or _read(paths.proc("self", "mountinfo")) or ""
    found = None
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 5:
            continue
        point = _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), fields[4])
        if point == mount_point:
            found = fields[2]
    return found
