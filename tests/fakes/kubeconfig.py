"""A kubeconfig file naming one server and no credentials but an optional bearer token (the fake
apiserver accepts anyone; a token tells whose requests it received)."""

from __future__ import annotations

from pathlib import Path

import yaml


def write_kubeconfig(path: Path, server: str, *, token: str = "") -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": server}}],
                "users": [{"name": "u", "user": {"token": token} if token else {}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    return path
