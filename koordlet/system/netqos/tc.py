"""Traffic control over rtnetlink (pyroute2): read a link's HTB tree and converge it to a
:class:`~koordlet.system.netqos.state.TCState`.

:class:`TrafficControl` owns the root HTB qdisc with the desired handle on one link, and with
it every class and filter under that qdisc. :meth:`TrafficControl.converge` makes the link
match the desired state and touches nothing it did not describe outside that qdisc:

1. the root qdisc: kept when it is our HTB (its default class changed in place when it
   differs); installed with ``replace`` over the kernel's default root qdisc (handle 0,
   ``noqueue``/``mq``/``fq_codel``...) or over another HTB, as upstream does; any other root
   qdisc with a handle belongs to someone else and is refused;
2. classes created parents first, changed in place when rate, ceil or priority differ;
3. filter priorities the state does not use are deleted whole (this also drops u32 hash
   tables left empty), then filters are deleted, changed (a u32 filter keeps its handle
   and gets a new class) or added;
4. classes the state does not have are deleted, children first (a class still named by a
   filter cannot be deleted: filters go first).

Each request that fails is recorded and the rest still run. A kernel without the
``cgroup`` classifier (``CONFIG_NET_CLS_CGROUP``) answers ENOENT: those filters are
reported as unsupported, not as errors. :meth:`TrafficControl.remove` deletes our root
qdisc, which takes every class and filter with it.

pyroute2 is imported on first use, so importing this module costs nothing on nodes that
never shape traffic. Calls block (pyroute2's synchronous API runs its own event loop): make
them from a worker thread, as the reconciler does, never from a running event loop.
pyroute2 0.9 decodes u32 selectors misaligned, so the selector of a u32 filter is parsed
here from its raw attribute (``struct tc_u32_sel`` and its keys).
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import logging
import socket
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from koordlet.system.errors import HostError
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
    minor_of,
)
from koordlet.system.paths import HostPaths

log = logging.getLogger(__name__)

#: u32 key offsets of the source address in the IPv4 and IPv6 headers
_V4_SRC_OFFSETS = (12,)
_V6_SRC_OFFSETS = (8, 12, 16, 20)
_SEL_HEADER = struct.Struct("=BBBxHHhhI")
_KEY_MASK_VALUE = struct.Struct("!II")
_KEY_OFFSETS = struct.Struct("=ii")


class NetlinkRequestError(HostError):
    """The kernel refused a traffic-control request."""


class LinkNotFoundError(HostError):
    """The link to shape does not exist (in this network namespace)."""


def _pyroute2() -> Any:
    import pyroute2  # deferred: only nodes that shape traffic pay for the import

    from koordlet.system.netqos import cls_cgroup

    cls_cgroup.register()
    return pyroute2


def _netlink_error(err: Exception, what: str) -> HostError:
    code = getattr(err, "code", None)
    if isinstance(code, int) and code > 0:
        return NetlinkRequestError(code, f"{what}: {err}", "rtnetlink")
    return NetlinkRequestError(errno.EIO, f"{what}: {err}", "rtnetlink")


def _info(prio: int, protocol: int) -> int:
    return ((prio & 0xFFFF) << 16) | socket.htons(protocol & 0xFFFF)


@dataclass
class ConvergeResult:
    """What one convergence did, what this kernel cannot do, and what failed."""

    changes: list[str] = field(default_factory=list)
    unsupported: list[str] = field(default_factory=list)
    errors: list[HostError] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors


@dataclass
class _Observed:
    """A link as read back: the state plus what deleting its parts needs."""

    root_kind: str
    root_handle: int
    default_minor: int
    classes: dict[int, HTBClass] = field(default_factory=dict)
    cgroup_filters: set[CgroupFilter] = field(default_factory=set)
    #: (prio, address) -> (filter, u32 handle)
    address_filters: dict[tuple[int, str], tuple[AddressFilter, int]] = field(default_factory=dict)
    #: (prio, protocol, kind, handle) of filters the model does not describe
    foreign: list[tuple[int, int, str, int]] = field(default_factory=list)
    #: every filter priority in use, with its protocol
    priorities: set[tuple[int, int]] = field(default_factory=set)

    def state(self) -> TCState:
        return TCState(
            handle=self.root_handle,
            default_minor=self.default_minor,
            classes=tuple(sorted(self.classes.values())),
            cgroup_filters=tuple(sorted(self.cgroup_filters)),
            address_filters=tuple(sorted(f for f, _ in self.address_filters.values())),
            foreign_filters=tuple(
                f"filter prio {p} protocol {proto:#06x} {kind} handle {h:#x}"
                for p, proto, kind, h in self.foreign
            ),
        )


def _rate(parms: dict[str, Any], options: Any, name: str) -> int:
    wide = options.get_attr(f"TCA_HTB_{name.upper()}64")
    if wide:
        return int(wide)
    return int(parms.get(name) or 0)


def _raw_attr(options: Any, name: str) -> bytes | None:
    """The payload of one nested attribute, undecoded."""
    for slot in options.get("attrs") or ():
        if getattr(slot, "name", None) == name:
            nla = slot.nla
            return bytes(nla.data[nla.offset + 4 : nla.offset + nla.length])
    return None


def _source_address(selector: bytes, protocol: int) -> str | None:
    """The exact source address a u32 selector matches, or None for any other match."""
    if len(selector) < _SEL_HEADER.size:
        return None
    _flags, _offshift, nkeys, _offmask, _off, _offoff, _hoff, _hmask = _SEL_HEADER.unpack_from(selector)
    keys: list[tuple[int, int, int]] = []
    for index in range(nkeys):
        start = _SEL_HEADER.size + index * 16
        if len(selector) < start + 16:
            return None
        mask, value = _KEY_MASK_VALUE.unpack_from(selector, start)
        offset, offmask = _KEY_OFFSETS.unpack_from(selector, start + 8)
        if offmask:
            return None
        keys.append((mask, value, offset))
    wanted = _V4_SRC_OFFSETS if protocol == ETH_P_IP else _V6_SRC_OFFSETS if protocol == ETH_P_IPV6 else ()
    if not wanted or [k[2] for k in keys] != list(wanted) or any(k[0] != 0xFFFFFFFF for k in keys):
        return None
    packed = b"".join(struct.pack("!I", k[1]) for k in keys)
    return str(ipaddress.ip_address(packed))


def _address_keys(address: str) -> list[str]:
    packed = ipaddress.ip_address(address).packed
    offsets = _V4_SRC_OFFSETS if len(packed) == 4 else _V6_SRC_OFFSETS
    words = struct.unpack(f"!{len(packed) // 4}I", packed)
    return [f"{word:#010x}/0xffffffff+{offset}" for word, offset in zip(words, offsets, strict=True)]


def _depth(cls: HTBClass, by_handle: dict[int, HTBClass]) -> int:
    depth, parent, seen = 0, cls.parent, {cls.handle}
    while parent in by_handle and parent not in seen:
        seen.add(parent)
        parent = by_handle[parent].parent
        depth += 1
    return depth


class TrafficControl:
    """The HTB tree of one link, optionally in a named network namespace."""

    def __init__(self, link: str, *, netns: str | None = None) -> None:
        self.link = link
        self.netns = netns

    @contextlib.contextmanager
    def _open(self) -> Iterator[tuple[Any, int]]:
        pyroute2 = _pyroute2()
        kwargs: dict[str, Any] = {}
        if self.netns is not None:
            kwargs = {"netns": self.netns, "flags": 0}  # never create the namespace
        try:
            ipr = pyroute2.IPRoute(**kwargs)
        except OSError as err:
            raise LinkNotFoundError(
                err.errno or errno.ENOENT, f"network namespace {self.netns}: {err}"
            ) from None
        with ipr:
            try:
                found = ipr.link_lookup(ifname=self.link)
            except Exception as err:
                raise _netlink_error(err, f"look up link {self.link}") from None
            if not found:
                where = f" in network namespace {self.netns}" if self.netns else ""
                raise LinkNotFoundError(errno.ENODEV, f"no link {self.link}{where}", self.link)
            yield ipr, int(found[0])

    # --- reading ---------------------------------------------------------------------------

    def _observe(self, ipr: Any, index: int) -> _Observed | None:
        """The link's root qdisc with our classes and filters (None without a root qdisc)."""
        try:
            return self._dump(ipr, index)
        except Exception as err:
            raise _netlink_error(err, f"read traffic control of {self.link}") from None

    def _dump(self, ipr: Any, index: int) -> _Observed | None:
        root = None
        for qdisc in ipr.get_qdiscs(index):
            if qdisc["parent"] == TC_H_ROOT:
                root = qdisc
        if root is None:
            return None
        kind = str(root.get_attr("TCA_KIND") or "")
        default = 0
        options = root.get_attr("TCA_OPTIONS")
        if kind == "htb" and options is not None:
            init = options.get_attr("TCA_HTB_INIT") or {}
            default = int(init.get("defcls") or 0)
        seen = _Observed(kind, int(root["handle"]), default)
        if kind != "htb":
            return seen
        major = major_of(seen.root_handle)
        for msg in ipr.get_classes(index):
            if msg.get_attr("TCA_KIND") != "htb" or major_of(int(msg["handle"])) != major:
                continue
            opts = msg.get_attr("TCA_OPTIONS")
            parms = (opts.get_attr("TCA_HTB_PARMS") if opts is not None else None) or {}
            seen.classes[int(msg["handle"])] = HTBClass(
                handle=int(msg["handle"]),
                parent=int(msg["parent"]),
                rate=_rate(parms, opts, "rate") if opts is not None else 0,
                ceil=_rate(parms, opts, "ceil") if opts is not None else 0,
                prio=int(parms.get("prio") or 0),
            )
        for msg in ipr.get_filters(index, parent=seen.root_handle):
            self._observe_filter(seen, msg)
        return seen

    @staticmethod
    def _observe_filter(seen: _Observed, msg: Any) -> None:
        kind = str(msg.get_attr("TCA_KIND") or "")
        prio = (int(msg["info"]) >> 16) & 0xFFFF
        protocol = socket.ntohs(int(msg["info"]) & 0xFFFF)
        handle = int(msg["handle"])
        seen.priorities.add((prio, protocol))
        options = msg.get_attr("TCA_OPTIONS")
        if options is None:
            return  # the classifier instance itself, listed once per priority
        if kind == "cgroup":
            seen.cgroup_filters.add(CgroupFilter(prio, handle, protocol))
            return
        if kind == "u32":
            if options.get_attr("TCA_U32_DIVISOR") is not None:
                return  # a hash table, not a filter
            selector = _raw_attr(options, "TCA_U32_SEL")
            classid = options.get_attr("TCA_U32_CLASSID")
            address = _source_address(selector, protocol) if selector is not None else None
            plain = options.get_attr("TCA_U32_LINK") is None and options.get_attr("TCA_U32_ACT") is None
            if address is not None and classid is not None and plain:
                found = AddressFilter(prio, address, int(classid))
                if found.protocol == protocol:
                    seen.address_filters[(prio, address)] = (found, handle)
                    return
        seen.foreign.append((prio, protocol, kind, handle))

    def read(self) -> TCState | None:
        """The link's HTB tree; None when its root qdisc is not HTB."""
        with self._open() as (ipr, index):
            seen = self._observe(ipr, index)
        if seen is None or seen.root_kind != "htb":
            return None
        return seen.state()

    # --- converging ------------------------------------------------------------------------

    @staticmethod
    def _validate(desired: TCState) -> None:
        handles = desired.class_by_handle()
        major = major_of(desired.handle)
        for cls in desired.classes:
            if major_of(cls.handle) != major or minor_of(cls.handle) == 0:
                raise ValueError(f"class {format_handle(cls.handle)} is not under qdisc {major:x}:")
            if cls.parent not in (TC_H_ROOT, desired.handle) and cls.parent not in handles:
                raise ValueError(f"class {format_handle(cls.handle)} has no parent in the state")
            if cls.rate <= 0 or cls.ceil < cls.rate:
                raise ValueError(f"class {format_handle(cls.handle)}: rate {cls.rate} ceil {cls.ceil}")
        for address_filter in desired.address_filters:
            if address_filter.classid not in handles:
                raise ValueError(f"{address_filter.describe()}: no such class")
        used = {(f.prio, f.protocol, "cgroup") for f in desired.cgroup_filters}
        used |= {(f.prio, f.protocol, "u32") for f in desired.address_filters}
        if len({(p, proto) for p, proto, _ in used}) != len(used):
            raise ValueError("a filter priority is used by two classifiers or protocols")

    def converge(self, desired: TCState) -> ConvergeResult:
        """Make the link's tree equal ``desired`` (see the module docstring for the order)."""
        self._validate(desired)
        result = ConvergeResult()
        with self._open() as (ipr, index):
            session = _Session(ipr, index, desired.handle, result)
            seen = self._observe(ipr, index)
            if session.ensure_qdisc(self.link, desired, seen):
                seen = self._observe(ipr, index)
                assert seen is not None
                session.ensure_classes(desired, seen)
                session.converge_filters(desired, seen)
                session.delete_classes(desired, seen)
        for error in result.errors:
            log.warning("traffic control on %s: %s", self.link, error.strerror)
        return result

    # --- removing --------------------------------------------------------------------------

    def remove(self, handle: int) -> bool:
        """Delete the root qdisc when it is our HTB ``handle`` (its classes and filters go with
        it); False when there was none. A missing link has nothing to remove."""
        try:
            with self._open() as (ipr, index):
                seen = self._observe(ipr, index)
                if seen is None or seen.root_kind != "htb" or seen.root_handle != handle:
                    return False
                try:
                    ipr.tc("del", index=index, handle=handle, parent=TC_H_ROOT)
                except Exception as err:
                    raise _netlink_error(
                        err, f"delete qdisc htb {format_handle(handle)} on {self.link}"
                    ) from None
                return True
        except LinkNotFoundError:
            return False


class _Session:
    """One convergence: the open netlink socket, the link, our qdisc, what happened."""

    def __init__(self, ipr: Any, index: int, qdisc: int, result: ConvergeResult) -> None:
        self.ipr = ipr
        self.index = index
        self.qdisc = qdisc
        self.result = result

    def run(self, what: str, *args: object, **kwargs: object) -> bool:
        """One ``tc`` request; a failure is recorded and the caller goes on."""
        try:
            self.ipr.tc(*args, **kwargs)
        except Exception as err:
            self.result.errors.append(_netlink_error(err, what))
            return False
        self.result.changes.append(what)
        return True

    # --- qdisc and classes ---------------------------------------------------------------

    def ensure_qdisc(self, link: str, desired: TCState, seen: _Observed | None) -> bool:
        what = f"qdisc htb {format_handle(desired.handle)} root default {desired.default_minor:x}"
        if seen is not None and seen.root_kind == "htb" and seen.root_handle == desired.handle:
            if seen.default_minor == desired.default_minor:
                return True
            return self.run(
                f"change {what}", "change", "htb", self.index, desired.handle, default=desired.default_minor
            )
        if seen is not None and seen.root_handle != 0 and seen.root_kind != "htb":
            owner = f"{seen.root_kind} {format_handle(seen.root_handle)}"
            raise NetlinkRequestError(
                errno.EBUSY, f"{link} has root qdisc {owner}, which is not the koordlet's", link
            )
        return self.run(
            f"replace {what}", "replace", "htb", self.index, desired.handle, default=desired.default_minor
        )

    def _class(self, verb: str, command: str, cls: HTBClass) -> bool:
        return self.run(
            f"{verb} {cls.describe()}",
            command,
            "htb",
            self.index,
            cls.handle,
            parent=cls.parent,
            rate=cls.rate,
            ceil=cls.ceil,
            prio=cls.prio,
        )

    def _delete_class(self, cls: HTBClass, why: str = "") -> bool:
        return self.run(f"delete {cls.describe()}{why}", "del-class", index=self.index, handle=cls.handle)

    def ensure_classes(self, desired: TCState, seen: _Observed) -> None:
        wanted = desired.class_by_handle()
        for cls in sorted(desired.classes, key=lambda c: (_depth(c, wanted), c.handle)):
            have = seen.classes.get(cls.handle)
            parent = TC_H_ROOT if cls.parent == desired.handle else cls.parent
            if have is None:
                self._class("add", "add-class", cls)
            elif have.parent != parent:
                # HTB cannot move a class: delete it and make it again
                if self._delete_class(have, " (moved)"):
                    self._class("add", "add-class", cls)
            elif (have.rate, have.ceil, have.prio) != (cls.rate, cls.ceil, cls.prio):
                self._class("change", "change-class", cls)

    def delete_classes(self, desired: TCState, seen: _Observed) -> None:
        wanted = desired.class_by_handle()
        extra = [c for h, c in seen.classes.items() if h not in wanted]
        for cls in sorted(extra, key=lambda c: (-_depth(c, seen.classes), c.handle)):
            self._delete_class(cls)

    # --- filters -------------------------------------------------------------------------

    def _delete_filter(self, what: str, prio: int, protocol: int, handle: int | None = None) -> None:
        """Delete one filter, or with no handle the whole priority (its classifier instance)."""
        extra = {} if handle is None else {"handle": handle}
        info = _info(prio, protocol)
        self.run(f"delete {what}", "del-filter", index=self.index, parent=self.qdisc, info=info, **extra)

    def _address(self, verb: str, command: str, want: AddressFilter, handle: int | None = None) -> None:
        extra = {} if handle is None else {"handle": handle}
        self.run(
            f"{verb} {want.describe()}",
            command,
            "u32",
            self.index,
            parent=self.qdisc,
            prio=want.prio,
            protocol=want.protocol,
            target=want.classid,
            keys=_address_keys(want.address),
            **extra,
        )

    def _add_cgroup(self, want: CgroupFilter) -> None:
        try:
            self.ipr.tc(
                "add-filter",
                "cgroup",
                self.index,
                parent=self.qdisc,
                handle=want.handle,
                prio=want.prio,
                protocol=want.protocol,
            )
        except Exception as err:
            if getattr(err, "code", None) in (errno.ENOENT, errno.EOPNOTSUPP):
                why = "the kernel has no cgroup classifier (CONFIG_NET_CLS_CGROUP)"
                self.result.unsupported.append(f"{want.describe()}: {why}")
            else:
                self.result.errors.append(_netlink_error(err, f"add {want.describe()}"))
        else:
            self.result.changes.append(f"add {want.describe()}")

    def converge_filters(self, desired: TCState, seen: _Observed) -> None:
        wanted_prios = {(f.prio, f.protocol) for f in desired.cgroup_filters}
        wanted_prios |= {(f.prio, f.protocol) for f in desired.address_filters}
        # 1. whole priorities nobody wants any more (this also drops emptied u32 hash tables)
        for prio, protocol in sorted(seen.priorities - wanted_prios):
            self._delete_filter(f"filters prio {prio} protocol {protocol:#06x}", prio, protocol)
        # 2. single filters inside the priorities that stay
        for prio, protocol, kind, handle in seen.foreign:
            if (prio, protocol) in wanted_prios:
                self._delete_filter(f"{kind} filter prio {prio} handle {handle:#x}", prio, protocol, handle)
        wanted_addresses = {(f.prio, f.address): f for f in desired.address_filters}
        for key, (have, handle) in sorted(seen.address_filters.items()):
            if key not in wanted_addresses and (have.prio, have.protocol) in wanted_prios:
                self._delete_filter(have.describe(), have.prio, have.protocol, handle)
        for have_cgroup in sorted(seen.cgroup_filters):
            stays = (have_cgroup.prio, have_cgroup.protocol) in wanted_prios
            if stays and have_cgroup not in desired.cgroup_filters:
                self._delete_filter(have_cgroup.describe(), have_cgroup.prio, have_cgroup.protocol)
        # 3. changed and missing ones
        for key, want in sorted(wanted_addresses.items()):
            found = seen.address_filters.get(key)
            if found is None:
                self._address("add", "add-filter", want)
            elif found[0].classid != want.classid:
                self._address("change", "replace-filter", want, found[1])
        for want_cgroup in sorted(desired.cgroup_filters):
            if want_cgroup not in seen.cgroup_filters:
                self._add_cgroup(want_cgroup)


def default_route_link(*, netns: str | None = None) -> str | None:
    """The link of the main table's default route (IPv4 first, then IPv6), as upstream picks
    the interface to shape; None when there is no default route."""
    pyroute2 = _pyroute2()
    kwargs: dict[str, Any] = {"netns": netns, "flags": 0} if netns is not None else {}
    try:
        with pyroute2.IPRoute(**kwargs) as ipr:
            for family in (socket.AF_INET, socket.AF_INET6):
                for route in ipr.route("dump", table=254, family=family):
                    if route["dst_len"] != 0:
                        continue
                    oif = route.get_attr("RTA_OIF")
                    if oif is None:
                        for hop in route.get_attr("RTA_MULTIPATH") or ():
                            oif = hop["oif"]
                            break
                    if oif is None:
                        continue
                    for link in ipr.get_links(int(oif)):
                        name = link.get_attr("IFLA_IFNAME")
                        if name:
                            return str(name)
    except Exception as err:
        raise _netlink_error(err, "find the default route") from None
    return None


def link_speed_bps(paths: HostPaths, link: str) -> int | None:
    """The link's speed from sysfs, bits/s; None when the driver does not say (veth, down links)."""
    try:
        mbits = int(paths.sys("class", "net", link, "speed").read_text().strip())
    except (OSError, ValueError):
        return None
    return mbits * 1_000_000 if mbits > 0 else None


__all__ = [
    "ConvergeResult",
    "LinkNotFoundError",
    "NetlinkRequestError",
    "TrafficControl",
    "default_route_link",
    "link_speed_bps",
]
