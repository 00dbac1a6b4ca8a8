"""pyroute2 codec for the ``cgroup`` traffic classifier (``cls_cgroup``), which pyroute2 lacks.

A ``cgroup`` filter has no match of its own: it sends a packet to the class named by the
``net_cls.classid`` of the cgroup of the socket that sent it (hostNetwork pods; forwarded
pod traffic has no local socket). Its options are empty unless actions or ematches are
attached, which the koordlet never does. The module follows pyroute2's tc plugin layout
(``fix_request``, ``get_parameters``, ``options``) and is registered under the kind
``cgroup`` by :func:`register`, only when pyroute2 has no codec of its own for it. A request
made with it is the message iproute2's ``tc filter add dev D parent 1: protocol ip prio 1
handle 2: cgroup`` sends (same flags, handle, parent, info, kind and empty options; compared
with strace).
"""

from __future__ import annotations

import socket
import sys
from typing import Any

from pyroute2.netlink import nla
from pyroute2.netlink.rtnl.tcmsg import plugins

KIND = "cgroup"


def fix_request(request: dict[str, Any]) -> None:
    """Filters carry ``prio << 16 | htons(protocol)`` in the tcmsg ``info`` field."""
    protocol = int(request.get("protocol", 0x0800)) & 0xFFFF
    prio = int(request.get("prio", 0)) & 0xFFFF
    request["info"] = (prio << 16) | socket.htons(protocol)


def get_parameters(kwarg: dict[str, Any]) -> dict[str, Any]:
    return {"attrs": []}


class options(nla):  # type: ignore[misc]  # noqa: N801 - pyroute2 looks the class up by this name
    nla_map = (
        ("TCA_CGROUP_UNSPEC", "none"),
        ("TCA_CGROUP_ACT", "hex"),
        ("TCA_CGROUP_POLICE", "hex"),
        ("TCA_CGROUP_EMATCHES", "hex"),
    )


def register() -> None:
    plugins.setdefault(KIND, sys.modules[__name__])
