"""Pack local files into a one-layer OCI image archive that ``ctr images import`` accepts.

No registry is reachable from the node tier, so its images are made here: the sandbox
image (a static pause program, under the name containerd pins) and a busybox image (Debian's
static busybox with a link per applet). The archive is an OCI image layout (``oci-layout``,
``index.json``, ``blobs/sha256/``) whose index names the image in the
``io.containerd.image.name`` annotation. The layer is an uncompressed tar with every mtime
and owner zero, so the same inputs give the same bytes.

Standard library only: ``hack/node-tier.sh`` runs it with the system Python::

    python3 testsupport/nodetier/image.py pause|busybox BINARY OUT.tar
"""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys
import tarfile
from collections.abc import Iterable, Sequence
from pathlib import Path

#: containerd 2.2's pinned sandbox image; the kubelet's pods need it under exactly this name.
SANDBOX_IMAGE = "registry.k8s.io/pause:3.10.1"
BUSYBOX_IMAGE = "localhost/koordinator/busybox:1.35"
_EMPTY_DIRS = ("dev", "etc", "proc", "sys", "tmp")
_LAYER = "application/vnd.oci.image.layer.v1.tar"


def _entry(name: str, **fields: object) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.mtime, info.uid, info.gid = 0, 0, 0
    for key, value in fields.items():
        setattr(info, key, value)
    return info


def layer(files: Iterable[tuple[Path, str]], links: Iterable[tuple[str, str]] = ()) -> bytes:
    """A tar of ``files`` (source, path in the image; mode 0755) and symlinks (path, target)."""
    buf = io.BytesIO()
    dirs: set[str] = set()

    def parents(tar: tarfile.TarFile, name: str) -> None:
        parts = name.split("/")[:-1]
        for depth in range(1, len(parts) + 1):
            directory = "/".join(parts[:depth])
            if directory not in dirs:
                dirs.add(directory)
                tar.addfile(_entry(directory, type=tarfile.DIRTYPE, mode=0o755))

    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for directory in _EMPTY_DIRS:
            parents(tar, f"{directory}/.")
        for source, name in files:
            data = source.read_bytes()
            parents(tar, name)
            tar.addfile(_entry(name, size=len(data), mode=0o755), io.BytesIO(data))
        for name, target in sorted(set(links)):
            parents(tar, name)
            tar.addfile(_entry(name, type=tarfile.SYMTYPE, linkname=target, mode=0o777))
    return buf.getvalue()


def _blob(tar: tarfile.TarFile, data: bytes) -> str:
    digest = hashlib.sha256(data).hexdigest()
    tar.addfile(_entry(f"blobs/sha256/{digest}", size=len(data), mode=0o644), io.BytesIO(data))
    return f"sha256:{digest}"


def archive(out: Path, name: str, layer_tar: bytes, entrypoint: Sequence[str]) -> None:
    """Write the OCI layout of one image (``name``: the full reference) to ``out``."""
    layer_digest = "sha256:" + hashlib.sha256(layer_tar).hexdigest()
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Entrypoint": list(entrypoint), "Env": ["PATH=/bin:/sbin"], "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
    }
    with tarfile.open(out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        config_bytes = json.dumps(config, sort_keys=True).encode()
        config_digest = _blob(tar, config_bytes)
        _blob(tar, layer_tar)
        manifest = json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": {
                    "mediaType": "application/vnd.oci.image.config.v1+json",
                    "digest": config_digest,
                    "size": len(config_bytes),
                },
                "layers": [{"mediaType": _LAYER, "digest": layer_digest, "size": len(layer_tar)}],
            },
            sort_keys=True,
        ).encode()
        manifest_digest = _blob(tar, manifest)
        index = {
            "schemaVersion": 2,
            "manifests": [
                {
                    "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "digest": manifest_digest,
                    "size": len(manifest),
                    "annotations": {"io.containerd.image.name": name},
                    "platform": {"architecture": "amd64", "os": "linux"},
                }
            ],
        }
        for member, content in (
            ("oci-layout", {"imageLayoutVersion": "1.0.0"}),
            ("index.json", index),
        ):
            data = json.dumps(content, sort_keys=True).encode()
            tar.addfile(_entry(member, size=len(data), mode=0o644), io.BytesIO(data))


def busybox_applets(binary: Path) -> list[str]:
    """The applets' paths in the image (``bin/sh``, ``usr/bin/env``, ...) that ``busybox`` lists."""
    listed = subprocess.run([str(binary), "--list-full"], capture_output=True, text=True, check=True)
    return [line.strip() for line in listed.stdout.splitlines() if line.strip()]


def main(argv: Sequence[str]) -> int:
    if len(argv) != 3 or argv[0] not in ("pause", "busybox"):
        print("usage: python3 testsupport/nodetier/image.py pause|busybox BINARY OUT.tar", file=sys.stderr)
        return 2
    kind, binary, out = argv[0], Path(argv[1]), Path(argv[2])
    if kind == "pause":
        archive(out, SANDBOX_IMAGE, layer([(binary, "pause")]), ["/pause"])
        return 0
    links = [(applet, "/bin/busybox") for applet in busybox_applets(binary) if applet != "bin/busybox"]
    archive(out, BUSYBOX_IMAGE, layer([(binary, "bin/busybox")], links), ["/bin/sh"])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
