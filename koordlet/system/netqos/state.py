"""The traffic-control state of one link as plain values: an HTB root qdisc, its classes and
the filters that sort packets into them.

A hook computes a :class:`TCState` (what the link should have); the applier in
:mod:`koordlet.system.netqos.tc` reads the link back into the same shape and converges it.
Rates are bytes per second, as the kernel stores them; handles are 32-bit ``major:minor``
integers (``1:3`` is ``0x10003``).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

#: the parent of a root qdisc, and what the kernel reports as the parent of a top-level class
TC_H_ROOT = 0xFFFFFFFF
ETH_P_IP = 0x0800
ETH_P_IPV6 = 0x86DD


def make_handle(major: int, minor: int) -> int:
    if not (0 <= major <= 0xFFFF and 0 <= minor <= 0xFFFF):
        raise ValueError(f"handle {major}:{minor} out of range")
    return (major << 16) | minor


def major_of(handle: int) -> int:
    return (handle >> 16) & 0xFFFF


def minor_of(handle: int) -> int:
    return handle & 0xFFFF


def format_handle(handle: int) -> str:
    """``tc``'s notation: hexadecimal ``major:minor`` (``root`` for the root parent)."""
    if handle == TC_H_ROOT:
        return "root"
    return f"{major_of(handle):x}:{minor_of(handle):x}"


@dataclass(frozen=True, order=True)
class HTBClass:
    handle: int
    parent: int
    #: guaranteed rate, bytes/s
    rate: int
    #: the most it may borrow up to, bytes/s
    ceil: int
    prio: int = 0

    def describe(self) -> str:
        return (
            f"class {format_handle(self.handle)} parent {format_handle(self.parent)} "
            f"rate {self.rate * 8}bit ceil {self.ceil * 8}bit prio {self.prio}"
        )


@dataclass(frozen=True, order=True)
class CgroupFilter:
    """A ``cgroup`` classifier: packets of sockets whose ``net_cls.classid`` names a class go to it."""

    prio: int
    handle: int
    protocol: int = ETH_P_IP

    def describe(self) -> str:
        return f"filter prio {self.prio} handle {self.handle:#x} cgroup"


@dataclass(frozen=True, order=True)
class AddressFilter:
    """A ``u32`` classifier matching one source address exactly (``/32`` or ``/128``)."""

    prio: int
    address: str
    classid: int

    def __post_init__(self) -> None:
        ipaddress.ip_address(self.address)  # refuse what is not an address before netlink sees it

    @property
    def version(self) -> int:
        return ipaddress.ip_address(self.address).version

    @property
    def protocol(self) -> int:
        return ETH_P_IP if self.version == 4 else ETH_P_IPV6

    def describe(self) -> str:
        return f"filter prio {self.prio} u32 match src {self.address} classid {format_handle(self.classid)}"


@dataclass(frozen=True)
class TCState:
    """The HTB tree a link should have (or has): qdisc ``handle`` at the root, unclassified
    traffic to ``default_minor``."""

    handle: int
    default_minor: int
    classes: tuple[HTBClass, ...] = ()
    cgroup_filters: tuple[CgroupFilter, ...] = ()
    address_filters: tuple[AddressFilter, ...] = ()
    #: filters read back that this model does not describe (another classifier kind or match)
    foreign_filters: tuple[str, ...] = field(default=(), compare=False)

    def class_by_handle(self) -> dict[int, HTBClass]:
        return {c.handle: c for c in self.classes}

    def describe(self) -> list[str]:
        lines = [f"qdisc htb {format_handle(self.handle)} root default {self.default_minor:x}"]
        lines += [c.describe() for c in sorted(self.classes)]
        lines += [f.describe() for f in sorted(self.cgroup_filters)]
        lines += [f.describe() for f in sorted(self.address_filters)]
        return lines
