"""Device-info records: the JSON files koord-device-daemon writes and the koordlet reads
(upstream's ``koordletutil.XPUDevices``), one list of records per file.

A record: ``{vendor, model, uuid, minor (a decimal string), resources {name: quantity},
topology {p2pLinks [{peerMinor, type}], mustHonorPartition, socketID, nodeID, pcieID,
busID}, status {healthy, errCode, errMessage}}``. :func:`read_dir` reads every regular file
of a directory (a file that is not such a list is skipped with a warning, so one bad file
loses nothing else); :func:`write_atomically` writes a file whole or not at all.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["DeviceRecord", "from_dict", "from_json", "read_dir", "to_json", "write_atomically"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DeviceRecord:
    vendor: str
    model: str
    uuid: str
    minor: int
    resources: Mapping[str, str] = field(default_factory=dict)
    socket_id: int = -1
    node_id: int = -1
    pcie_id: str = ""
    bus_id: str = ""
    healthy: bool = True
    err_code: str = ""
    err_message: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "vendor": self.vendor,
            "model": self.model,
            "uuid": self.uuid,
            "minor": str(self.minor),
            "resources": dict(self.resources),
            "topology": {
                "p2pLinks": [],
                "mustHonorPartition": False,
                "socketID": str(self.socket_id),
                "nodeID": str(self.node_id),
                "pcieID": self.pcie_id,
                "busID": self.bus_id,
            },
            "status": {"healthy": self.healthy, "errCode": self.err_code, "errMessage": self.err_message},
        }


def _int(value: Any, default: int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def from_dict(raw: Mapping[str, Any]) -> DeviceRecord:
    """A record (ValueError without a uuid or with a minor that is not a number)."""
    uuid = str(raw.get("uuid") or "")
    if not uuid:
        raise ValueError("a device record without uuid")
    try:
        minor = int(str(raw.get("minor", "")))
    except ValueError:
        raise ValueError(f"device {uuid}: minor {raw.get('minor')!r} is not a number") from None
    topology = raw.get("topology") or {}
    status = raw.get("status") or {}
    resources = raw.get("resources") or {}
    return DeviceRecord(
        vendor=str(raw.get("vendor") or ""),
        model=str(raw.get("model") or ""),
        uuid=uuid,
        minor=minor,
        resources={str(k): str(v) for k, v in resources.items()} if isinstance(resources, Mapping) else {},
        socket_id=_int(topology.get("socketID"), -1),
        node_id=_int(topology.get("nodeID"), -1),
        pcie_id=str(topology.get("pcieID") or ""),
        bus_id=str(topology.get("busID") or ""),
        healthy=bool(status.get("healthy", True)),
        err_code=str(status.get("errCode") or ""),
        err_message=str(status.get("errMessage") or ""),
    )


def to_json(records: Sequence[DeviceRecord]) -> str:
    return json.dumps([r.to_dict() for r in records], indent=2) + "\n"


def from_json(text: str, source: str = "") -> list[DeviceRecord]:
    """The records of one file's text; ValueError naming ``source`` when it is not a list of
    records."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"{source}: not JSON: {err}") from None
    if not isinstance(data, list):
        raise ValueError(f"{source}: not a list of device records")
    records = []
    for item in data:
        if not isinstance(item, Mapping):
            raise ValueError(f"{source}: a device record is not an object")
        try:
            records.append(from_dict(item))
        except ValueError as err:
            raise ValueError(f"{source}: {err}") from None
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
            log.warning("device-info file skipped: %s", err)
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
