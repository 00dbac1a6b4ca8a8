"""RDMA devices from sysfs (``<sys>/class/infiniband``), e.g. Mellanox ``mlx5_0``."""

from __future__ import annotations

from pathlib import Path


def devices(sys_root: Path) -> list[str]:
    base = sys_root / "class" / "infiniband"
    try:
        return sorted(p.name for p in base.iterdir())
    except OSError:
        return []


def supported(sys_root: Path) -> tuple[bool, str]:
    found = devices(sys_root)
    if not found:
        return False, f"no RDMA devices under {sys_root / 'class' / 'infiniband'}"
    return True, f"{len(found)} device(s): {', '.join(found)}"
