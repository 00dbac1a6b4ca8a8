"""Throwaway network namespaces for the host tier: ``koord-test-<random>`` with a veth pair
inside it, so no link of the machine is ever touched; the namespace is deleted afterwards,
also when the test fails.

Also an independent reader: the ``tc`` binary run inside the namespace (when installed), to
check what the koordlet's own netlink reader reports.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

LINK, PEER = "kt0", "kt1"


@dataclass(frozen=True)
class Namespace:
    name: str
    link: str = LINK


@contextlib.contextmanager
def throwaway_netns() -> Iterator[Namespace]:
    if os.geteuid() != 0:
        pytest.skip("host tier needs root to create network namespaces")
    from pyroute2 import IPRoute, netns

    name = f"koord-test-{uuid.uuid4().hex[:10]}"
    try:
        netns.create(name)
    except OSError as err:
        pytest.skip(f"cannot create a network namespace: {err}")
    try:
        with IPRoute(netns=name, flags=0) as ipr:
            ipr.link("add", ifname=LINK, kind="veth", peer=PEER)
            for ifname in (LINK, PEER):
                ipr.link("set", index=ipr.link_lookup(ifname=ifname)[0], state="up")
            ipr.addr("add", index=ipr.link_lookup(ifname=LINK)[0], address="10.99.0.1", prefixlen=24)
            ipr.route("add", dst="0.0.0.0/0", gateway="10.99.0.2")
        yield Namespace(name)
    finally:
        netns.remove(name)
    assert name not in netns.listnetns(), f"network namespace {name} left behind"


def tc_binary(ns: Namespace, *args: str) -> str | None:
    """``tc <args> dev <link>`` inside the namespace; None when ``ip`` or ``tc`` is missing."""
    if shutil.which("ip") is None or shutil.which("tc") is None:
        return None
    done = subprocess.run(
        ["ip", "netns", "exec", ns.name, "tc", *args, "dev", ns.link],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    return done.stdout


_CLASS = re.compile(r"^class htb (\S+) (?:root|parent (\S+))")


def tc_classes(ns: Namespace) -> dict[str, str] | None:
    """class handle -> parent ("root" for a top class), as ``tc class show`` prints them."""
    out = tc_binary(ns, "class", "show")
    if out is None:
        return None
    found: dict[str, str] = {}
    for line in out.splitlines():
        match = _CLASS.match(line.strip())
        if match:
            found[match.group(1)] = match.group(2) or "root"
    return found


def tc_filters(ns: Namespace) -> list[dict[str, Any]] | None:
    """``tc -j filter show``: the filters with options (not the per-priority headers)."""
    out = tc_binary(ns, "-j", "filter", "show")
    if out is None:
        return None
    return [f for f in json.loads(out or "[]") if f.get("options")]
