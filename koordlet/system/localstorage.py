"""Local storage layout: disks, partitions, LVM volume groups and volumes, mount points.

Read as upstream reads it, from four commands: ``lsblk -P -o NAME,TYPE,MAJ:MIN`` (disks
and partitions with their device numbers), ``vgs --noheadings --options
vg_name,pv_count,pv_name``, ``lvs --noheadings --options lv_name,vg_name`` and
``findmnt -P -o TARGET,SOURCE``. A partition's disk is the disk whose device number is the
partition's with the minor rounded down to a multiple of 16 (upstream's rule); a volume
group maps to its disk only when it has a single physical volume; a logical volume is
named by its device-mapper path (``/dev/mapper/<vg>-<lv>``, dashes doubled).

The commands run through an injectable runner. A host without LVM tools (``vgs``/``lvs``
absent) has no volume groups, which is not an error; output that does not parse is. By
default the four commands of one reading share :data:`SCAN_TIMEOUT_SECONDS` (``vgs`` and
``lvs`` wait on the LVM lock while volumes are created): a command still running when the
time is spent is killed, and one not yet started is not run; the reading then fails.
"""

from __future__ import annotations

import logging
import re
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

LSBLK = ("lsblk", "-P", "-o", "NAME,TYPE,MAJ:MIN")
VGS = ("vgs", "--noheadings", "--options", "vg_name,pv_count,pv_name")
LVS = ("lvs", "--noheadings", "--options", "lv_name,vg_name")
FINDMNT = ("findmnt", "-P", "-o", "TARGET,SOURCE")
#: the seconds one reading of the layout (its four commands together) may take
SCAN_TIMEOUT_SECONDS = 10.0

_PAIRS = re.compile(r'([A-Z:]+)="(.*?)"')
_DEVICE_NUMBER = re.compile(r"^(\d+):(\d+)$")

#: runs a command and returns its standard output; None when the program is not installed
CommandRunner = Callable[[Sequence[str]], "str | None"]


class LocalStorageError(Exception):
    """A command failed or printed something that does not parse."""


def run_command(args: Sequence[str], timeout: float = SCAN_TIMEOUT_SECONDS) -> str | None:
    """Run ``args`` (no shell) and return its output; None when the program is absent.
    A command still running after ``timeout`` seconds is killed (LocalStorageError)."""
    try:
        done = subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, check=False)
    except FileNotFoundError:
        return None
    except subprocess.TimeoutExpired:
        raise LocalStorageError(f"{args[0]} did not finish within {timeout:.3g} s (killed)") from None
    except OSError as err:
        raise LocalStorageError(f"{args[0]}: {err}") from None
    if done.returncode != 0:
        raise LocalStorageError(f"{args[0]} exited with {done.returncode}: {done.stderr.strip()[:200]}")
    return done.stdout


def scan_runner(
    timeout: float = SCAN_TIMEOUT_SECONDS, clock: Callable[[], float] = time.monotonic
) -> CommandRunner:
    """A runner for one reading: its commands share ``timeout`` seconds, counted from now."""
    deadline = clock() + timeout

    def run(args: Sequence[str]) -> str | None:
        left = deadline - clock()
        if left <= 0:
            raise LocalStorageError(f"{args[0]} not run: the reading's {timeout:.3g} s are spent")
        return run_command(args, timeout=left)

    return run


@dataclass
class NodeLocalStorageInfo:
    """Upstream's ``NodeLocalStorageInfo`` (the ``node_local_storage_info`` value)."""

    #: disk -> device number, e.g. ``/dev/vda`` -> ``253:0``
    disk_number_map: dict[str, str] = field(default_factory=dict)
    #: device number -> disk, e.g. ``253:0`` -> ``/dev/vda``
    number_disk_map: dict[str, str] = field(default_factory=dict)
    #: partition -> its disk, e.g. ``/dev/vdb3`` -> ``/dev/vdb``
    partition_disk_map: dict[str, str] = field(default_factory=dict)
    #: volume group -> its disk, e.g. ``yoda-pool0`` -> ``/dev/vdb``
    vg_disk_map: dict[str, str] = field(default_factory=dict)
    #: logical volume (device-mapper path) -> its volume group
    lv_mapper_vg_map: dict[str, str] = field(default_factory=dict)
    #: mount point -> its source (disk, partition or logical volume)
    mp_disk_map: dict[str, str] = field(default_factory=dict)


def _disk_number(device_number: str) -> str | None:
    match = _DEVICE_NUMBER.match(device_number)
    if match is None:
        return None
    major, minor = match.group(1), int(match.group(2))
    return f"{major}:{minor - minor % 16}"


def mapper_name(vg_name: str, lv_name: str) -> str:
    """The device-mapper path of a logical volume (``-`` in either name becomes ``--``)."""
    return f"/dev/mapper/{vg_name.replace('-', '--')}-{lv_name.replace('-', '--')}"


def parse_lsblk(text: str, info: NodeLocalStorageInfo) -> None:
    partitions: list[tuple[str, str]] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        fields = dict(_PAIRS.findall(line))
        if not {"NAME", "TYPE", "MAJ:MIN"} <= fields.keys():
            raise LocalStorageError(f"lsblk line without NAME, TYPE and MAJ:MIN: {line!r}")
        device = f"/dev/{fields['NAME']}"
        if fields["TYPE"] == "disk":
            info.disk_number_map[device] = fields["MAJ:MIN"]
            info.number_disk_map[fields["MAJ:MIN"]] = device
        elif fields["TYPE"] == "part":
            partitions.append((device, fields["MAJ:MIN"]))
    for device, number in partitions:  # after every disk, whatever the line order
        disk = info.number_disk_map.get(_disk_number(number) or "")
        if disk is None:
            log.debug("partition %s (%s): no disk with its device number", device, number)
            continue
        info.partition_disk_map[device] = disk


def parse_vgs(text: str, info: NodeLocalStorageInfo) -> None:
    for line in text.splitlines():
        words = line.split()
        if not words:
            continue
        if len(words) != 3:
            raise LocalStorageError(f"vgs line is not 'vg_name pv_count pv_name': {line!r}")
        vg_name, pv_count, pv_name = words
        if pv_count != "1":
            log.debug(
                "volume group %s has %s physical volumes: only single-PV groups map to a disk",
                vg_name,
                pv_count,
            )
            continue
        disk = pv_name if pv_name in info.disk_number_map else info.partition_disk_map.get(pv_name)
        if disk is None:
            log.debug(
                "volume group %s: physical volume %s is not a known disk or partition", vg_name, pv_name
            )
            continue
        info.vg_disk_map[vg_name] = disk


def parse_lvs(text: str, info: NodeLocalStorageInfo) -> None:
    for line in text.splitlines():
        words = line.split()
        if not words:
            continue
        if len(words) != 2:
            raise LocalStorageError(f"lvs line is not 'lv_name vg_name': {line!r}")
        lv_name, vg_name = words
        info.lv_mapper_vg_map[mapper_name(vg_name, lv_name)] = vg_name


def parse_findmnt(text: str, info: NodeLocalStorageInfo) -> None:
    for line in text.splitlines():
        if not line.strip():
            continue
        fields = dict(_PAIRS.findall(line))
        if not {"TARGET", "SOURCE"} <= fields.keys():
            raise LocalStorageError(f"findmnt line without TARGET and SOURCE: {line!r}")
        info.mp_disk_map[fields["TARGET"]] = fields["SOURCE"]


def read_local_storage_info(run: CommandRunner | None = None) -> NodeLocalStorageInfo:
    """The node's storage layout; raises LocalStorageError when lsblk or findmnt fails (or
    the reading runs out of time). ``run`` runs the commands; by default a
    :func:`scan_runner` started now."""
    if run is None:
        run = scan_runner()
    info = NodeLocalStorageInfo()
    steps: tuple[tuple[Sequence[str], Callable[[str, NodeLocalStorageInfo], None], bool], ...] = (
        (LSBLK, parse_lsblk, True),
        (VGS, parse_vgs, False),
        (LVS, parse_lvs, False),
        (FINDMNT, parse_findmnt, True),
    )
    for args, parse, required in steps:
        output = run(args)
        if output is None:
            if required:
                raise LocalStorageError(f"{args[0]} is not installed")
            continue  # no LVM tools: no volume groups or logical volumes
        parse(output, info)
    return info
