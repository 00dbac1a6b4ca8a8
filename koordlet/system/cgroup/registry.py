"""The cgroup resource registry: one logical key per knob, mapped to its v1 and v2 file.

Keys keep upstream's resource types (the v1 file name: ``cpu.shares``,
``cpu.cfs_quota_us``, ``memory.limit_in_bytes`` ...), and values are always in v1
semantics (shares, a quota where -1 is unlimited, bytes where -1 is unlimited). Each
:class:`Resource` knows its v1 subsystem and file, its v2 file, how to render a value for
each version, how to parse what each version's file holds, the range or syntax it accepts
(checked before the kernel sees anything), whether the kernel may lack it (checked by
existence), and how a leveled update merges it. No other module names a cgroup file.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from koordinator.api.cpuset import CPUSetError, format_cpuset, parse_cpuset
from koordlet.system.cgroup import convert
from koordlet.system.errors import InvalidValueError, UnsupportedResourceError

Value = int | str

# Keys of the resources the agent names in code (the strings are upstream's resource types).
CPU_SHARES = "cpu.shares"
CPU_CFS_QUOTA = "cpu.cfs_quota_us"
CPU_CFS_PERIOD = "cpu.cfs_period_us"
CPU_CFS_BURST = "cpu.cfs_burst_us"
CPU_BVT_WARP_NS = "cpu.bvt_warp_ns"
CPU_IDLE = "cpu.idle"
CPUSET_CPUS = "cpuset.cpus"
CPUSET_MEMS = "cpuset.mems"
CPU_TASKS = "tasks"
CGROUP_PROCS = "cgroup.procs"
MEMORY_LIMIT = "memory.limit_in_bytes"
MEMORY_MIN = "memory.min"
MEMORY_LOW = "memory.low"
MEMORY_HIGH = "memory.high"
MEMORY_WMARK_RATIO = "memory.wmark_ratio"
MEMORY_WMARK_SCALE_FACTOR = "memory.wmark_scale_factor"
MEMORY_WMARK_MIN_ADJ = "memory.wmark_min_adj"
MEMORY_PRIORITY = "memory.priority"
MEMORY_USE_PRIORITY_OOM = "memory.use_priority_oom"
MEMORY_OOM_GROUP = "memory.oom.group"
BLKIO_READ_BPS = "blkio.throttle.read_bps_device"
BLKIO_WRITE_BPS = "blkio.throttle.write_bps_device"
BLKIO_READ_IOPS = "blkio.throttle.read_iops_device"
BLKIO_WRITE_IOPS = "blkio.throttle.write_iops_device"
BLKIO_COST_WEIGHT = "blkio.cost.weight"
BLKIO_COST_QOS = "blkio.cost.qos"
BLKIO_COST_MODEL = "blkio.cost.model"
NET_CLS_CLASSID = "net_cls.classid"


class Subsystem(enum.StrEnum):
    """v1 controller directories under the cgroup root (v2 has a single unified tree)."""

    CPU = "cpu"
    CPUACCT = "cpuacct"
    CPUSET = "cpuset"
    MEMORY = "memory"
    BLKIO = "blkio"
    NET_CLS = "net_cls"
    PERF_EVENT = "perf_event"
    PIDS = "pids"


class Support(enum.Enum):
    #: every kernel the koordlet runs on has the file wherever the controller is enabled
    ALWAYS = "always"
    #: optional (newer or vendor kernels): supported when the file exists
    IF_EXISTS = "if-exists"


class Merge(enum.Enum):
    """How a leveled update (parent before child) merges the old and new value on the way down."""

    NONE = "none"
    #: write the larger of old and new first (quota, memory protections), the real value later
    LARGER = "larger"
    #: write the union of old and new CPUs first, so children never hold CPUs the parent lacks
    CPUSET_UNION = "cpuset-union"


# --- validators: raise InvalidValueError naming the resource -------------------------------


def _invalid(key: str, value: object, why: str) -> InvalidValueError:
    return InvalidValueError(22, f"invalid value {value!r} for {key}: {why}", key)


@dataclass(frozen=True)
class IntRange:
    low: int
    high: int
    #: out-of-range sentinels accepted as they are (-1 for "unlimited")
    also: tuple[int, ...] = ()

    def check(self, key: str, value: Value) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            try:
                value = int(str(value).strip())
            except ValueError:
                raise _invalid(key, value, "not an integer") from None
        if value in self.also or self.low <= value <= self.high:
            return value
        extra = f" or {', '.join(map(str, self.also))}" if self.also else ""
        raise _invalid(key, value, f"must be in [{self.low}, {self.high}]{extra}")


def _check_cpuset(key: str, value: Value) -> str:
    text = str(value).strip()
    try:
        return format_cpuset(parse_cpuset(text))
    except CPUSetError as err:
        raise _invalid(key, value, str(err)) from None


_DEVICE_VALUE = re.compile(r"^(\d+):(\d+) (\d+)$")


def _check_device_value(key: str, value: Value) -> str:
    """``"<major>:<minor> <value>"`` as the blkio throttle and cost files take it."""
    text = str(value).strip()
    if not _DEVICE_VALUE.match(text):
        raise _invalid(key, value, "must be '<major>:<minor> <non-negative integer>'")
    return text


def _check_device_weight(key: str, value: Value) -> str:
    """``"<major>:<minor> <weight>"`` with the iocost weight range [1, 10000]."""
    text = _check_device_value(key, value)
    weight = int(text.rsplit(" ", 1)[1])
    if not convert.MIN_IO_WEIGHT <= weight <= convert.MAX_IO_WEIGHT:
        raise _invalid(key, value, f"weight must be in [{convert.MIN_IO_WEIGHT}, {convert.MAX_IO_WEIGHT}]")
    return text


_DEVICE_SETTINGS = re.compile(r"^(\d+):(\d+)( [a-z]+=[a-z0-9.]+)+$")


def _check_device_settings(key: str, value: Value) -> str:
    """``"<major>:<minor> key=value ..."`` (blkio.cost.qos / io.cost.qos, cost.model); values
    are numbers or words (``ctrl=user``, ``ctrl=auto``)."""
    text = " ".join(str(value).split())
    if not _DEVICE_SETTINGS.match(text):
        raise _invalid(key, value, "must be '<major>:<minor> key=value ...'")
    return text


# --- renderers and parsers ----------------------------------------------------------------

Render = Callable[[Value], str]
Parse = Callable[[str], Value]


def _int(text: str) -> int:
    return int(text.split()[0]) if text.strip() else 0


def _text(text: str) -> str:
    return text.strip()


def _str(value: Value) -> str:
    return str(value)


def _max_or_int(text: str) -> int:
    return convert.max_to_unlimited(text.split()[0])


def _render_unlimited(value: Value) -> str:
    return convert.unlimited_to_max(int(value))


def _render_memory_protection(value: Value) -> str:
    number = int(value)
    return "max" if number in (-1, convert.MAX_INT64) else str(number)


def _render_weight(value: Value) -> str:
    return str(convert.shares_to_weight(int(value)))


def _parse_weight(text: str) -> int:
    return convert.weight_to_shares(_int(text))


def _parse_cpu_max_quota(text: str) -> int:
    return convert.parse_cpu_max(text)[0]


def _parse_cpu_max_period(text: str) -> int:
    return convert.parse_cpu_max(text)[1]


def _parse_v1_memory_limit(text: str) -> int:
    return convert.v1_memory_limit(_int(text))


def _parse_usage_usec(text: str) -> int:
    for line in text.splitlines():
        name, _, rest = line.partition(" ")
        if name == "usage_usec":
            return convert.usage_usec_to_ns(int(rest))
    raise ValueError("cpu.stat has no usage_usec line")


def _render_default_io_weight(value: Value) -> str:
    return f"default {convert.blkio_weight_to_io_weight(int(value))}"


def _parse_default_io_weight(text: str) -> int:
    for line in text.splitlines():
        name, _, rest = line.partition(" ")
        if name == "default":
            return convert.io_weight_to_blkio_weight(int(rest))
    raise ValueError("io.weight has no default line")


def _io_max(field_name: str) -> Render:
    """v1 ``"maj:min N"`` (0 = unlimited) -> v2 io.max ``"maj:min <field>=N|max"``."""

    def render(value: Value) -> str:
        major_minor, _, number = str(value).partition(" ")
        limit = "max" if int(number) == 0 else number
        return f"{major_minor} {field_name}={limit}"

    return render


# --- the registry ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Resource:
    key: str
    subsystem: Subsystem
    v1_file: str | None
    v2_file: str | None
    check: Callable[[str, Value], Value] | None = None
    support: Support = Support.ALWAYS
    merge: Merge = Merge.NONE
    render_v1: Render = _str
    render_v2: Render = _str
    parse_v1: Parse = _int
    parse_v2: Parse = _int
    #: v2 reads this file instead of v2_file (cpuset.cpus.effective)
    v2_read_file: str | None = None
    #: False for files that are only read (statistics) or that v2 cannot write alone
    writable_v1: bool = True
    writable_v2: bool = True
    description: str = field(default="", compare=False)

    def file(self, version: int, *, for_write: bool = False) -> str:
        """The file name this resource has on cgroup ``version``; raises when it has none."""
        name = self.v1_file if version == 1 else (self.v2_read_file or self.v2_file)
        if version == 2 and for_write:
            name = self.v2_file
        if name is None:
            raise UnsupportedResourceError(95, f"{self.key} has no cgroup v{version} file", self.key)
        return name

    def validate(self, value: Value) -> Value:
        """The value normalised, or InvalidValueError before anything is written."""
        return value if self.check is None else self.check(self.key, value)

    def render(self, version: int, value: Value) -> str:
        """Validate ``value`` (v1 semantics) and return the text to write on ``version``."""
        writable = self.writable_v1 if version == 1 else self.writable_v2
        if not writable:
            raise UnsupportedResourceError(95, f"{self.key} is read-only on cgroup v{version}", self.key)
        self.file(version, for_write=True)
        normalised = self.validate(value)
        return self.render_v1(normalised) if version == 1 else self.render_v2(normalised)

    def parse(self, version: int, text: str) -> Value:
        """What the file of ``version`` holds, in v1 semantics."""
        return self.parse_v1(text) if version == 1 else self.parse_v2(text)


class Registry:
    """Resources by key; names are checked for uniqueness when the registry is built."""

    def __init__(self, resources: Iterable[Resource]) -> None:
        self._by_key: dict[str, Resource] = {}
        for resource in resources:
            if resource.key in self._by_key:
                raise ValueError(f"cgroup resource {resource.key!r} registered twice")
            self._by_key[resource.key] = resource

    def __getitem__(self, key: str) -> Resource:
        try:
            return self._by_key[key]
        except KeyError:
            raise UnsupportedResourceError(95, f"unknown cgroup resource {key!r}", key) from None

    def __contains__(self, key: object) -> bool:
        return key in self._by_key

    def __iter__(self) -> Iterator[Resource]:
        return iter(self._by_key.values())

    def keys(self) -> list[str]:
        return list(self._by_key)


CPU, CPUACCT, CPUSET, MEMORY = Subsystem.CPU, Subsystem.CPUACCT, Subsystem.CPUSET, Subsystem.MEMORY
BLKIO, NET_CLS, PIDS = Subsystem.BLKIO, Subsystem.NET_CLS, Subsystem.PIDS
_INT64 = IntRange(0, convert.MAX_INT64)
_BOOL = IntRange(0, 1)


def _stat(key: str, subsystem: Subsystem, v2: str | None, support: Support = Support.ALWAYS) -> Resource:
    """A statistics file: read-only, parsed by the stats readers, kept here for its path."""
    return Resource(
        key,
        subsystem,
        key,
        v2,
        support=support,
        parse_v1=_text,
        parse_v2=_text,
        writable_v1=False,
        writable_v2=False,
    )


def _anolis_memory(key: str, rng: IntRange) -> Resource:
    return Resource(key, MEMORY, key, key, rng.check, Support.IF_EXISTS)


RESOURCES = Registry(
    [
        # cpu
        Resource(
            "cpu.shares",
            CPU,
            "cpu.shares",
            "cpu.weight",
            IntRange(convert.MIN_SHARES, convert.MAX_SHARES).check,
            render_v2=_render_weight,
            parse_v2=_parse_weight,
        ),
        Resource(
            "cpu.cfs_quota_us",
            CPU,
            "cpu.cfs_quota_us",
            "cpu.max",
            IntRange(1000, convert.MAX_INT64, also=(-1,)).check,
            merge=Merge.LARGER,
            render_v2=_render_unlimited,
            parse_v2=_parse_cpu_max_quota,
        ),
        Resource(
            "cpu.cfs_period_us",
            CPU,
            "cpu.cfs_period_us",
            "cpu.max",
            IntRange(1000, 1_000_000).check,
            parse_v2=_parse_cpu_max_period,
            # writing cpu.max alone would also reset the quota: v2 periods are not written
            writable_v2=False,
        ),
        Resource(
            "cpu.cfs_burst_us",
            CPU,
            "cpu.cfs_burst_us",
            "cpu.max.burst",
            _INT64.check,
            Support.IF_EXISTS,
        ),
        Resource(
            "cpu.bvt_warp_ns",
            CPU,
            "cpu.bvt_warp_ns",
            "cpu.bvt_warp_ns",
            IntRange(-1, 2).check,
            Support.IF_EXISTS,
        ),
        Resource("cpu.idle", CPU, "cpu.idle", "cpu.idle", _BOOL.check, Support.IF_EXISTS),
        _stat("cpu.stat", CPU, "cpu.stat"),
        Resource(
            "cpuacct.usage",
            CPUACCT,
            "cpuacct.usage",
            "cpu.stat",
            parse_v2=_parse_usage_usec,
            writable_v1=False,
            writable_v2=False,
        ),
        _stat("cpuacct.stat", CPUACCT, "cpu.stat"),
        # PSI: only with CONFIG_PSI (and, on v1, psi=1 cgroup1 PSI on the kernel command line)
        _stat("cpu.pressure", CPUACCT, "cpu.pressure", Support.IF_EXISTS),
        _stat("memory.pressure", CPUACCT, "memory.pressure", Support.IF_EXISTS),
        _stat("io.pressure", CPUACCT, "io.pressure", Support.IF_EXISTS),
        # cpuset
        Resource(
            "cpuset.cpus",
            CPUSET,
            "cpuset.cpus",
            "cpuset.cpus",
            _check_cpuset,
            merge=Merge.CPUSET_UNION,
            parse_v1=_text,
            parse_v2=_text,
            v2_read_file="cpuset.cpus.effective",
        ),
        Resource(
            "cpuset.mems",
            CPUSET,
            "cpuset.mems",
            "cpuset.mems",
            _check_cpuset,
            parse_v1=_text,
            parse_v2=_text,
            v2_read_file="cpuset.mems.effective",
        ),
        # processes
        Resource(
            "tasks",
            CPU,
            "tasks",
            "cgroup.threads",
            IntRange(1, (1 << 22)).check,
            parse_v1=_text,
            parse_v2=_text,
        ),
        Resource(
            "cgroup.procs",
            CPU,
            "cgroup.procs",
            "cgroup.procs",
            IntRange(1, (1 << 22)).check,
            parse_v1=_text,
            parse_v2=_text,
        ),
        # memory
        Resource(
            "memory.limit_in_bytes",
            MEMORY,
            "memory.limit_in_bytes",
            "memory.max",
            IntRange(0, convert.MAX_INT64, also=(-1,)).check,
            parse_v1=_parse_v1_memory_limit,
            render_v2=_render_unlimited,
            parse_v2=_max_or_int,
        ),
        Resource(
            "memory.usage_in_bytes",
            MEMORY,
            "memory.usage_in_bytes",
            "memory.current",
            writable_v1=False,
            writable_v2=False,
        ),
        _stat("memory.stat", MEMORY, "memory.stat"),
        # only with CONFIG_NUMA
        _stat("memory.numa_stat", MEMORY, "memory.numa_stat", Support.IF_EXISTS),
        *(
            Resource(
                key,
                MEMORY,
                key,
                key,
                _INT64.check,
                # v1 memory.min/low/high exist only on Anolis; v2 has them in every non-root cgroup
                Support.IF_EXISTS,
                Merge.LARGER,
                parse_v1=_max_or_int,
                render_v2=_render_memory_protection,
                parse_v2=_max_or_int,
            )
            for key in ("memory.min", "memory.low", "memory.high")
        ),
        _anolis_memory("memory.wmark_ratio", IntRange(0, 100)),
        _anolis_memory("memory.wmark_scale_factor", IntRange(1, 1000)),
        _anolis_memory("memory.wmark_min_adj", IntRange(-25, 50)),
        _anolis_memory("memory.priority", IntRange(0, 12)),
        _anolis_memory("memory.use_priority_oom", _BOOL),
        _anolis_memory("memory.oom.group", _BOOL),
        _anolis_memory("memory.pagecache_limit.enable", _BOOL),
        _anolis_memory("memory.pagecache_limit.size", _INT64),
        _anolis_memory("memory.pagecache_limit.sync", _BOOL),
        Resource(
            "memory.idle_page_stats",
            MEMORY,
            "memory.idle_page_stats",
            None,
            support=Support.IF_EXISTS,
            parse_v1=_text,
            writable_v1=False,
            writable_v2=False,
        ),
        # blkio (v1) and io (v2)
        Resource(
            "blkio.weight",
            BLKIO,
            "blkio.weight",
            "io.weight",
            IntRange(convert.MIN_BLKIO_WEIGHT, convert.MAX_BLKIO_WEIGHT).check,
            Support.IF_EXISTS,
            render_v2=_render_default_io_weight,
            parse_v2=_parse_default_io_weight,
        ),
        *(
            Resource(
                f"blkio.throttle.{v1}_device",
                BLKIO,
                f"blkio.throttle.{v1}_device",
                "io.max",
                _check_device_value,
                parse_v1=_text,
                render_v2=_io_max(v2),
                parse_v2=_text,
            )
            for v1, v2 in (
                ("read_bps", "rbps"),
                ("write_bps", "wbps"),
                ("read_iops", "riops"),
                ("write_iops", "wiops"),
            )
        ),
        Resource(
            "blkio.cost.weight",
            BLKIO,
            "blkio.cost.weight",
            "io.weight",
            # the iocost weight (Anolis v1) has io.weight's scale: no conversion
            _check_device_weight,
            Support.IF_EXISTS,
            parse_v1=_text,
            parse_v2=_text,
        ),
        Resource(
            "blkio.cost.qos",
            BLKIO,
            "blkio.cost.qos",
            "io.cost.qos",
            _check_device_settings,
            Support.IF_EXISTS,
            parse_v1=_text,
            parse_v2=_text,
        ),
        Resource(
            "blkio.cost.model",
            BLKIO,
            "blkio.cost.model",
            "io.cost.model",
            _check_device_settings,
            Support.IF_EXISTS,
            parse_v1=_text,
            parse_v2=_text,
        ),
        # others
        Resource(
            "pids.max",
            PIDS,
            "pids.max",
            "pids.max",
            IntRange(0, (1 << 22), also=(-1,)).check,
            render_v1=_render_unlimited,
            render_v2=_render_unlimited,
            parse_v1=_max_or_int,
            parse_v2=_max_or_int,
        ),
        Resource("net_cls.classid", NET_CLS, "net_cls.classid", None, IntRange(0, 0xFFFFFFFF).check),
    ]
)
