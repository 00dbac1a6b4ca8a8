"""Network QoS on the host: the traffic-control state of a link (HTB qdisc, classes, cgroup and
address filters) as values, and the rtnetlink applier that converges a link to it.

All netlink code of the koordlet lives here (:mod:`.tc`, through pyroute2); hooks compute a
:class:`~koordlet.system.netqos.state.TCState` and never talk to the kernel themselves.
"""

from koordlet.system.netqos.state import (
    ETH_P_IP,
    ETH_P_IPV6,
    TC_H_ROOT,
    AddressFilter,
    CgroupFilter,
    HTBClass,
    TCState,
    format_handle,
    major_of,
    make_handle,
    minor_of,
)
from koordlet.system.netqos.tc import (
    ConvergeResult,
    LinkNotFoundError,
    NetlinkRequestError,
    TrafficControl,
    default_route_link,
    link_speed_bps,
)

__all__ = [
    "ETH_P_IP",
    "ETH_P_IPV6",
    "TC_H_ROOT",
    "AddressFilter",
    "CgroupFilter",
    "ConvergeResult",
    "HTBClass",
    "LinkNotFoundError",
    "NetlinkRequestError",
    "TCState",
    "TrafficControl",
    "default_route_link",
    "format_handle",
    "link_speed_bps",
    "major_of",
    "make_handle",
    "minor_of",
]
