"""Model checkpoints on disk: one JSON file per model, named after the model's UID.

Upstream's ``fileCheckpointer`` and its ``ModelCheckpoint`` JSON::

    {"UID": "<uid>", "CPU": <HistogramCheckpoint>, "Memory": <HistogramCheckpoint>,
     "LastUpdated": "2024-01-02T03:04:05Z"}

A save writes ``<uid>.tmp`` and renames it over ``<uid>``, so a crash leaves either the old
or the new file. On restore, leftover ``.tmp`` files are removed, and a file that cannot be
read or decoded comes back as a checkpoint with an ``error`` (the caller logs it and
removes it); the UID is always the file's name, whatever the file says.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

log = logging.getLogger(__name__)

TMP_SUFFIX = ".tmp"


class UnsafeUIDError(ValueError):
    """A model UID that cannot be a file name in the checkpoint directory."""


@dataclass(slots=True)
class ModelCheckpoint:
    uid: str
    cpu: dict[str, Any] | None = None
    memory: dict[str, Any] | None = None
    #: ``LastUpdated`` as written (RFC 3339, seconds)
    last_updated: str = ""
    #: why the file could not be read or decoded, or None
    error: str | None = field(default=None)

    def to_json(self) -> dict[str, Any]:
        return {"UID": self.uid, "CPU": self.cpu, "Memory": self.memory, "LastUpdated": self.last_updated}


def _safe_name(uid: str) -> str:
    if not uid or uid in (".", "..") or "/" in uid or "\0" in uid or uid.endswith(TMP_SUFFIX):
        raise UnsafeUIDError(f"model UID {uid!r} cannot name a checkpoint file")
    return uid


class FileCheckpointer:
    """Checkpoints as files in ``directory`` (created on the first save)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def save(self, checkpoint: ModelCheckpoint) -> None:
        """Write one checkpoint atomically; raises OSError or :class:`UnsafeUIDError`."""
        path = self.directory / _safe_name(checkpoint.uid)
        self.directory.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + TMP_SUFFIX)
        with open(tmp, "wb") as out:
            out.write(orjson.dumps(checkpoint.to_json()) + b"\n")
        os.replace(tmp, path)

    def remove(self, uid: str) -> None:
        """Delete a model's checkpoint; a missing one is fine."""
        (self.directory / _safe_name(uid)).unlink(missing_ok=True)

    def restore(self) -> list[ModelCheckpoint]:
        """Every checkpoint in the directory, in file-name order (none when it does not exist)."""
        try:
            entries = sorted(self.directory.iterdir())
        except FileNotFoundError:
            return []
        out = []
        for path in entries:
            if not path.is_file():
                continue
            if path.name.endswith(TMP_SUFFIX):
                log.info("removing the unfinished checkpoint %s", path)
                path.unlink(missing_ok=True)
                continue
            out.append(_read(path))
        return out


def _read(path: Path) -> ModelCheckpoint:
    checkpoint = ModelCheckpoint(uid=path.name)
    try:
        data = orjson.loads(path.read_bytes())
    except OSError as exc:
        checkpoint.error = f"cannot read: {exc.strerror or exc}"
        return checkpoint
    except orjson.JSONDecodeError as exc:
        checkpoint.error = f"not JSON: {exc}"
        return checkpoint
    if not isinstance(data, dict):
        checkpoint.error = "not a JSON object"
        return checkpoint
    cpu, memory, updated = data.get("CPU"), data.get("Memory"), data.get("LastUpdated")
    if not isinstance(cpu, dict | None) or not isinstance(memory, dict | None):
        checkpoint.error = "CPU and Memory must be objects"
        return checkpoint
    if not isinstance(updated, str | None):
        checkpoint.error = "LastUpdated must be a timestamp"
        return checkpoint
    checkpoint.cpu, checkpoint.memory, checkpoint.last_updated = cpu, memory, updated or ""
    return checkpoint
