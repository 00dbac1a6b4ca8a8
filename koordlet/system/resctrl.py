"""resctrl (Intel RDT / AMD PQoS): detection, schemata, groups, task assignment, monitoring.

The filesystem lives at ``<sys_fs_root>/resctrl``. It counts as mounted when the root
``schemata`` parses and validates (at least one L3 domain with a non-zero mask; an MB line,
when present, with non-zero values), as upstream decides. Groups are directories: the
QoS classes ``LSR``, ``LS``, ``BE`` and per-pod ``koordlet-<pod uid>``. Schemata are
written one line per write (only the changed resource), tasks one id per write with
O_APPEND (the kernel moves a task out of its previous group).

Mask arithmetic follows upstream: a class gets the cache ways ``[ceil(w*start%),
ceil(w*end%))`` of the ``w`` ways in ``info/L3/cbm_mask``; memory bandwidth is a percent
rounded up to a multiple of ten on Intel, and on AMD ``2048`` for unlimited or
``int(160 * percent / 100)`` otherwise.
"""

from __future__ import annotations

import ctypes
import errno
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from koordlet.system import kernel
from koordlet.system.cgroup import io
from koordlet.system.errors import HostError, InvalidValueError, MalformedContentError, from_errno
from koordlet.system.paths import HostPaths
from koordlet.system.proc import parse_id_list

QOS_GROUPS = ("LSR", "LS", "BE")
POD_GROUP_PREFIX = "koordlet-"
AMD_MBA_UNLIMITED = 2048
_MS_RELATIME = 1 << 21


class SchemataError(MalformedContentError):
    """Schemata text that does not parse or validate."""


@dataclass(frozen=True)
class ResctrlInfo:
    mounted: bool
    l3_cat: bool
    mba: bool
    cmt: bool
    mbm: bool
    cbm_mask: str
    num_closids: int
    reason: str


@dataclass
class Schemata:
    """Per-cache-id L3 masks and MB values, plus lines of other resources kept as they are."""

    l3: dict[int, int] = field(default_factory=dict)
    mb: dict[int, int] = field(default_factory=dict)
    other: list[str] = field(default_factory=list)

    def l3_line(self) -> str:
        return "L3:" + ";".join(f"{i}={m:x}" for i, m in sorted(self.l3.items()))

    def mb_line(self) -> str:
        return "MB:" + ";".join(f"{i}={v}" for i, v in sorted(self.mb.items()))

    def validate(self) -> None:
        if not self.l3 or any(m <= 0 for m in self.l3.values()):
            raise SchemataError(errno.EBADMSG, "schemata needs at least one non-zero L3 mask", "schemata")
        if any(v <= 0 for v in self.mb.values()):
            raise SchemataError(errno.EBADMSG, "schemata MB values must be positive", "schemata")


def parse_schemata(text: str) -> Schemata:
    """``L3:0=7ff;1=7ff`` and ``MB:0=100;1=100`` lines (padding and a trailing ';' accepted)."""
    out = Schemata()
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        name, sep, domains = line.partition(":")
        name = name.strip()
        if not sep:
            raise SchemataError(errno.EBADMSG, f"schemata line without ':': {line!r}", "schemata")
        if name not in ("L3", "MB"):
            out.other.append(line)
            continue
        target = out.l3 if name == "L3" else out.mb
        for domain in domains.split(";"):
            domain = domain.strip()
            if not domain:
                continue
            ident, eq, value = domain.partition("=")
            try:
                target[int(ident)] = int(value, 16) if name == "L3" else int(value)
            except ValueError:
                raise SchemataError(errno.EBADMSG, f"bad {name} domain {domain!r}", "schemata") from None
            if not eq:
                raise SchemataError(errno.EBADMSG, f"bad {name} domain {domain!r}", "schemata")
    return out


def l3_mask(cbm_mask: str, start_percent: int, end_percent: int) -> int:
    """The ways ``[ceil(w*start/100), ceil(w*end/100))`` of the cache as a bitmask."""
    try:
        cbm = int(cbm_mask, 16)
    except ValueError:
        raise InvalidValueError(errno.EINVAL, f"cbm_mask {cbm_mask!r} is not hex", "cbm_mask") from None
    if cbm <= 0 or cbm & (cbm + 1):
        raise InvalidValueError(
            errno.EINVAL, f"cbm_mask {cbm_mask!r} is not contiguous ones from bit 0", "cbm_mask"
        )
    if not 0 <= start_percent < end_percent <= 100:
        raise InvalidValueError(
            errno.EINVAL, f"L3 range [{start_percent}, {end_percent}) is not within 0-100", "schemata"
        )
    ways = cbm.bit_length()
    start = math.ceil(ways * start_percent / 100)
    end = math.ceil(ways * end_percent / 100)
    mask = (1 << end) - (1 << start)
    if mask <= 0:
        raise InvalidValueError(
            errno.EINVAL, f"L3 range [{start_percent}%, {end_percent}%) selects no way of {ways}", "schemata"
        )
    return mask


def mba_value(percent: int, vendor_id: str) -> int | None:
    """The MB schemata value for ``percent``; None for values the kernel would refuse (0, >100)."""
    if percent <= 0 or percent > 100:
        return None
    if vendor_id == "AuthenticAMD":
        return AMD_MBA_UNLIMITED if percent == 100 else int(25 * 8 * 0.8 * percent / 100)
    return min(100, math.ceil(percent / 10) * 10)


def cpu_supports_resctrl(flags: frozenset[str] | set[str]) -> tuple[bool, str]:
    missing = [f for f in ("cat_l3", "mba") if f not in flags]
    if missing:
        return False, f"CPU lacks {', '.join(missing)}"
    return True, "CPU has cat_l3 and mba"


@dataclass(frozen=True)
class MonData:
    """One cache domain's monitoring counters (bytes; MBM values are cumulative)."""

    llc_occupancy: int | None
    mbm_local_bytes: int | None
    mbm_total_bytes: int | None


class Resctrl:
    def __init__(self, paths: HostPaths) -> None:
        self.paths = paths
        self.root = paths.resctrl_root

    # --- detection -----------------------------------------------------------------------

    def root_schemata(self) -> Schemata:
        schemata = parse_schemata(self._read(self.root / "schemata"))
        schemata.validate()
        return schemata

    def detect(self) -> ResctrlInfo:
        info = self.root / "info"
        try:
            self.root_schemata()
            mounted, reason = True, f"mounted at {self.root}"
        except HostError as err:
            mounted, reason = False, f"not mounted at {self.root}: {err.strerror}"
        try:
            features = (info / "L3_MON" / "mon_features").read_text().split()
        except OSError:
            features = []
        cbm = ""
        closids = 0
        if mounted:
            try:
                cbm = (info / "L3" / "cbm_mask").read_text().strip()
                closids = int((info / "L3" / "num_closids").read_text().strip())
            except (OSError, ValueError):
                pass
        return ResctrlInfo(
            mounted=mounted,
            l3_cat=mounted and (info / "L3").is_dir(),
            mba=mounted and (info / "MB").is_dir(),
            cmt=mounted and "llc_occupancy" in features,
            mbm=mounted and ("mbm_total_bytes" in features or "mbm_local_bytes" in features),
            cbm_mask=cbm,
            num_closids=closids,
            reason=reason,
        )

    def mount(self) -> None:
        """``mount -t resctrl resctrl <root>`` (upstream does it when the CPU supports RDT)."""
        libc = kernel.libc()
        rc = libc.mount(b"resctrl", os.fsencode(self.root), b"resctrl", ctypes.c_ulong(_MS_RELATIME), None)
        if rc != 0:
            raise from_errno(ctypes.get_errno(), self.root)

    # --- groups --------------------------------------------------------------------------

    def group_dir(self, group: str) -> Path:
        if not group or "/" in group or group in (".", "..", "info", "mon_groups", "mon_data"):
            raise InvalidValueError(errno.EINVAL, f"invalid resctrl group name {group!r}", str(self.root))
        return self.root / group

    def groups(self) -> list[str]:
        try:
            entries = os.scandir(self.root)
        except OSError:
            return []
        with entries:
            return sorted(
                e.name
                for e in entries
                if e.is_dir(follow_symlinks=False) and e.name not in ("info", "mon_groups", "mon_data")
            )

    def create_group(self, group: str) -> bool:
        """mkdir the group; False when it already existed."""
        path = self.group_dir(group)
        try:
            path.mkdir()
        except FileExistsError:
            return False
        except OSError as err:
            raise from_errno(err.errno or errno.EIO, path, directory=self.root) from None
        return True

    def delete_group(self, group: str) -> bool:
        """rmdir the group (its tasks return to the default group); False when it was gone."""
        path = self.group_dir(group)
        try:
            path.rmdir()
        except FileNotFoundError:
            return False
        except OSError as err:
            raise from_errno(err.errno or errno.EIO, path, directory=self.root) from None
        return True

    # --- schemata and tasks --------------------------------------------------------------

    def read_schemata(self, group: str = "") -> Schemata:
        directory = self.group_dir(group) if group else self.root
        return parse_schemata(self._read(directory / "schemata"))

    def write_schemata_line(self, group: str, line: str) -> None:
        """Write one resource's line (``L3:...`` or ``MB:...``) of a group's schemata."""
        if not line.startswith(("L3:", "MB:")):
            raise InvalidValueError(errno.EINVAL, f"schemata line {line!r} is not L3 or MB", group)
        parse_schemata(line)  # refuse what would not parse before the kernel sees it
        io.write_file(self.group_dir(group), "schemata", line + "\n")

    def read_tasks(self, group: str = "") -> list[int]:
        directory = self.group_dir(group) if group else self.root
        return parse_id_list(self._read(directory / "tasks"))

    def add_tasks(self, group: str, tids: list[int]) -> list[int]:
        """Append each tid not already in the group, one write each; returns the tids added.

        A tid that exited meanwhile (ESRCH) is skipped without failing the others.
        """
        current = set(self.read_tasks(group))
        added: list[int] = []
        for tid in tids:
            if tid in current or tid <= 0:
                continue
            try:
                io.append_values(self.group_dir(group), "tasks", [f"{tid}\n"])
            except HostError as err:
                if err.errno == errno.ESRCH:
                    continue
                raise
            added.append(tid)
            current.add(tid)
        return added

    def mon_data(self, group: str) -> dict[int, MonData]:
        """Monitoring counters per L3 cache id (``mon_data/mon_L3_<NN>``)."""
        base = self.group_dir(group) / "mon_data"
        out: dict[int, MonData] = {}
        try:
            domains = sorted(p for p in base.iterdir() if p.name.startswith("mon_L3_"))
        except OSError as err:
            raise from_errno(err.errno or errno.EIO, base, directory=self.group_dir(group)) from None
        for domain in domains:
            try:
                cache_id = int(domain.name.split("_", 2)[2])
            except (IndexError, ValueError):
                continue
            values = io.read_raw([domain], ["llc_occupancy", "mbm_local_bytes", "mbm_total_bytes"])[0]
            numbers = [int(v) if isinstance(v, bytes) and v.strip().isdigit() else None for v in values]
            out[cache_id] = MonData(*numbers)
        return out

    @staticmethod
    def _read(path: Path) -> str:
        return io.read_file(path.parent, path.name).decode(errors="replace")
