"""Device-info records: the JSON files koord-device-daemon writes and the koordlet reads
(upstream's ``koordletutil.XPUDevices``), one list of records per file.

A record: ``{vendor, model, uuid, minor (a decimal string), resources {name: quantity},
topology {p2pLinks [{peerMinor, type}], mustHonorPartition, socketID, nodeID, pcieID,
busID}, status {healthy, errCode, errMessage}}``, written as upstream's Go structs marshal
it: ``resources``, ``topology``, ``status``, ``p2pLinks``, ``mustHonorPartition`` and the
empty strings are left out when empty (a ``p2pLinks`` present, even ``[]``, is what makes the
koordlet label a partition policy, so it is written only for a device that has links).

:func:`read_dir` reads every regular file of a directory: a file that is not a JSON list is
skipped, and within a file a record is skipped alone (not an object, or no ``uuid``), as is a
field of the wrong kind (a resource that is not a string or number, a ``p2pLinks`` entry that
is not an object); a ``minor`` that is not a number is read as 0, as upstream. Each problem is
logged once as a warning. :func:`write_atomically` writes a file whole or not at all.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "DeviceRecord",
    "P2PLink",
    "from_dict",
    "from_json",
    "read_dir",
    "to_json",
    "warn_once",
    "write_atomically",
]

log = logging.getLogger(__name__)

_warned: set[str] = set()


def warn_once(message: str) -> None:
    """Log a problem with the device-info files the first time this process meets it (the
    koordlet reads them every few seconds)."""
    if message not in _warned:
        _warned.add(message)
        log.warning("%s", message)


@dataclass(frozen=True)
class P2PLink:
    """A device's link to its peers: ``peerMinor`` is one minor or several, comma-separated
    (``"1,2,3"``); ``type`` the link, as ``NVLink`` or ``HCCS``."""

    peer_minor: str
    type: str

    def to_dict(self) -> dict[str, str]:
        return {"peerMinor": self.peer_minor, "type": self.type}


@dataclass(frozen=True)
class DeviceRecord:
    vendor: str
    model: str
    uuid: str
    minor: int  # 0 when the file's minor is not a number (upstream's)
    resources: Mapping[str, str] = field(default_factory=dict)
    socket_id: int = -1
    node_id: int = -1
    pcie_id: str = ""
    bus_id: str = ""
    healthy: bool = True
    err_code: str = ""
    err_message: str = ""
    #: None: the record has no ``p2pLinks`` (Go's nil); ``()``: present and empty
    p2p_links: tuple[P2PLink, ...] | None = None
    must_honor_partition: bool = False
    #: whether the record has a ``topology`` / ``status`` object (upstream reports no
    #: topology, and no Healthy condition, for a device without one)
    has_topology: bool = True
    has_status: bool = True
    #: the ``minor`` as the file wrote it, when it is not the decimal of :attr:`minor`
    minor_text: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "vendor": self.vendor,
            "model": self.model,
            "uuid": self.uuid,
            "minor": str(self.minor) if self.minor_text is None else self.minor_text,
        }
        if self.resources:
            out["resources"] = dict(self.resources)
        if self.has_topology:
            topology: dict[str, Any] = {}
            if self.p2p_links:
                topology["p2pLinks"] = [link.to_dict() for link in self.p2p_links]
            if self.must_honor_partition:
                topology["mustHonorPartition"] = True
            topology["socketID"] = str(self.socket_id)
            topology["nodeID"] = str(self.node_id)
            if self.pcie_id:
                topology["pcieID"] = self.pcie_id
            if self.bus_id:
                topology["busID"] = self.bus_id
            out["topology"] = topology
        if self.has_status:
            status: dict[str, Any] = {"healthy": self.healthy}
            if self.err_code:
                status["errCode"] = self.err_code
            if self.err_message:
                status["errMessage"] = self.err_message
            out["status"] = status
        return out


def _int(value: Any, default: int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


_MINOR = re.compile(r"[+-]?[0-9]+")


def _minor(raw: Any, where: str) -> tuple[int, str | None]:
    """The minor and, when it differs from the number's decimal, the text the file has
    (upstream's ``strconv.ParseInt(minor, 10, 32)``, 0 when it fails)."""
    if isinstance(raw, int) and not isinstance(raw, bool) and -(2**31) <= raw < 2**31:
        return raw, None
    text = raw if isinstance(raw, str) else ""
    if _MINOR.fullmatch(text) and -(2**31) <= int(text) < 2**31:
        return int(text), None if str(int(text)) == text else text
    warn_once(f"{where}: minor {raw!r} is not a number; reported as 0")
    return 0, text


def _resources(raw: Any, where: str) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        warn_once(f"{where}: resources are not an object; left out")
        return {}
    resources: dict[str, str] = {}
    for name, value in raw.items():
        if isinstance(value, str):
            resources[str(name)] = value
        elif isinstance(value, int | float) and not isinstance(value, bool):
            resources[str(name)] = str(value)
        else:
            warn_once(f"{where}: resource {name} {value!r} is not a quantity; left out")
    return resources


def _p2p_links(raw: Any, where: str) -> tuple[P2PLink, ...] | None:
    if raw is None:
        return None
    if not isinstance(raw, list):
        warn_once(f"{where}: p2pLinks is not a list; left out")
        return None
    links = []
    for link in raw:
        if not isinstance(link, Mapping):
            warn_once(f"{where}: a p2pLinks entry is not an object; left out")
            continue
        links.append(P2PLink(_text(link.get("peerMinor")), _text(link.get("type"))))
    return tuple(links)


def from_dict(raw: Mapping[str, Any], source: str = "") -> DeviceRecord:
    """A record (ValueError without a uuid); fields of the wrong kind are left out and
    logged once (see the module's docstring)."""
    uuid = raw.get("uuid")
    if not isinstance(uuid, str) or not uuid:
        raise ValueError("a device record without uuid")
    where = f"{source}: device {uuid}" if source else f"device {uuid}"
    minor, minor_text = _minor(raw.get("minor"), where)
    topology = raw.get("topology")
    if topology is not None and not isinstance(topology, Mapping):
        warn_once(f"{where}: topology is not an object; left out")
        topology = None
    status = raw.get("status")
    if status is not None and not isinstance(status, Mapping):
        warn_once(f"{where}: status is not an object; left out")
        status = None
    topo: Mapping[str, Any] = topology or {}
    stat: Mapping[str, Any] = status or {}
    return DeviceRecord(
        vendor=_text(raw.get("vendor")),
        model=_text(raw.get("model")),
        uuid=uuid,
        minor=minor,
        resources=_resources(raw.get("resources"), where),
        socket_id=_int(topo.get("socketID"), -1),
        node_id=_int(topo.get("nodeID"), -1),
        pcie_id=_text(topo.get("pcieID")),
        bus_id=_text(topo.get("busID")),
        healthy=stat.get("healthy", True) is not False,
        err_code=_text(stat.get("errCode")),
        err_message=_text(stat.get("errMessage")),
        p2p_links=_p2p_links(topo.get("p2pLinks"), where),
        must_honor_partition=topo.get("mustHonorPartition") is True,
        has_topology=topology is not None,
        has_status=status is not None,
        minor_text=minor_text,
    )


def to_json(records: Sequence[DeviceRecord]) -> str:
    return json.dumps([r.to_dict() for r in records], indent=2) + "\n"


def from_json(text: str, source: str = "") -> list[DeviceRecord]:
    """The records of one file's text; ValueError naming ``source`` when it is not a JSON
    list. A record that cannot be used is left out alone, with a warning (once)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"{source}: not JSON: {err}") from None
    if not isinstance(data, list):
        raise ValueError(f"{source}: not a list of device records")
    records = []
    for index, item in enumerate(data):
        if not isinstance(item, Mapping):
            warn_once(f"{source}: device record {index} is not an object; left out")
            continue
        try:
            records.append(from_dict(item, source))
        except ValueError as err:
            warn_once(f"{source}: device record {index} left out: {err}")
    return records


def read_dir(directory: Path) -> list[DeviceRecord]:
    """Every record of the regular files of ``directory`` (none when it does not exist)."""
    try:
        entries = sorted(p for p in directory.iterdir() if p.is_file())
    except OSError:
        return []
    records: list[DeviceRecord] = []
    for path in entries:
        try:
            records.extend(from_json(path.read_text(), str(path)))
        except (OSError, ValueError) as err:
            warn_once(f"device-info file skipped: {err}")
    return records


def write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file renamed over it (mode 0644)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
