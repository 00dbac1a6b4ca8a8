"""The NRI messages the koordlet's plug-in exchanges with the runtime, written out by hand.

Package ``nri.pkg.api.v1alpha1`` (``github.com/containerd/nri`` ``pkg/api/api.proto``); only the
fields the runtime hooks read or write are kept, with the field numbers of that file.
Every message both encodes and decodes (the plug-in decodes requests and encodes answers;
the test suite's runtime does the reverse), and readers ignore fields they do not know.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from koordinator import protowire as pw
from koordinator.protowire import Writer

Fields = dict[int, list[int | bytes]]

RUNTIME_SERVICE = "nri.pkg.api.v1alpha1.Runtime"
PLUGIN_SERVICE = "nri.pkg.api.v1alpha1.Plugin"


class Event(enum.IntEnum):
    """NRI's ``Event`` enum; a plug-in subscribes with the mask ``1 << (event - 1)``."""

    RUN_POD_SANDBOX = 1
    STOP_POD_SANDBOX = 2
    REMOVE_POD_SANDBOX = 3
    CREATE_CONTAINER = 4
    POST_CREATE_CONTAINER = 5
    START_CONTAINER = 6
    POST_START_CONTAINER = 7
    UPDATE_CONTAINER = 8
    POST_UPDATE_CONTAINER = 9
    STOP_CONTAINER = 10
    REMOVE_CONTAINER = 11
    UPDATE_POD_SANDBOX = 12
    POST_UPDATE_POD_SANDBOX = 13
    VALIDATE_CONTAINER_ADJUSTMENT = 14

    @property
    def bit(self) -> int:
        return 1 << (self.value - 1)


def event_mask(names: list[str]) -> int:
    """The mask of event names as NRI's ``ParseEventMask`` reads them: comma-separated,
    any case, ``runpodsandbox`` ... and the groups ``all``, ``pod``/``podsandbox`` and
    ``container``; ValueError for an unknown name."""
    bits = {e.name.replace("_", "").lower(): e.bit for e in Event}
    mask = 0
    for entry in names:
        for name in entry.lower().split(","):
            if name == "all":
                mask |= sum(bits.values())
            elif name in ("pod", "podsandbox"):
                mask |= sum(bit for key, bit in bits.items() if "pod" in key)
            elif name == "container":
                mask |= sum(bit for key, bit in bits.items() if "container" in key)
            elif name.strip() in bits:
                mask |= bits[name.strip()]
            else:
                raise ValueError(f"unknown NRI event {name!r}")
    return mask


def _optional_int(msg: Fields, number: int) -> int | None:
    """An ``OptionalInt64``/``OptionalUInt64`` wrapper: None when absent."""
    inner = pw.message(msg, number)
    return None if inner is None else pw.int64(inner, 1)


def _optional_string(msg: Fields, number: int) -> str | None:
    inner = pw.message(msg, number)
    return None if inner is None else pw.string(inner, 1)


def _wrap(value: int | str | None) -> Writer | None:
    if value is None:
        return None
    return Writer().string(1, value) if isinstance(value, str) else Writer().varint(1, value)


@dataclass
class LinuxResources:
    """``LinuxResources``: memory (1) limit, cpu (2) shares/quota/period/cpus/mems, rdt class (5),
    unified (6). None leaves a value as the runtime has it."""

    memory_limit: int | None = None
    cpu_shares: int | None = None
    cpu_quota: int | None = None
    cpu_period: int | None = None
    cpuset_cpus: str = ""
    cpuset_mems: str = ""
    rdt_class: str | None = None
    unified: dict[str, str] = field(default_factory=dict)

    def encode(self) -> Writer:
        out = Writer()
        out.message(
            1,
            Writer().message(1, _wrap(self.memory_limit), always=True)
            if self.memory_limit is not None
            else None,
        )
        cpu = (
            Writer()
            .message(1, _wrap(self.cpu_shares), always=True)
            .message(2, _wrap(self.cpu_quota), always=True)
            .message(3, _wrap(self.cpu_period), always=True)
            .string(6, self.cpuset_cpus)
            .string(7, self.cpuset_mems)
        )
        out.message(2, cpu)
        out.message(5, _wrap(self.rdt_class), always=True)
        return out.string_map(6, self.unified)

    @classmethod
    def decode(cls, msg: Fields | None) -> LinuxResources:
        if msg is None:
            return cls()
        memory = pw.message(msg, 1) or {}
        cpu = pw.message(msg, 2) or {}
        return cls(
            memory_limit=_optional_int(memory, 1),
            cpu_shares=_optional_int(cpu, 1),
            cpu_quota=_optional_int(cpu, 2),
            cpu_period=_optional_int(cpu, 3),
            cpuset_cpus=pw.string(cpu, 6),
            cpuset_mems=pw.string(cpu, 7),
            rdt_class=_optional_string(msg, 5),
            unified=pw.string_map(msg, 6),
        )

    def __bool__(self) -> bool:
        return self != LinuxResources()


@dataclass
class PodSandbox:
    """``PodSandbox``: the pod as the kubelet created it (its labels and annotations are the pod's)."""

    id: str = ""
    name: str = ""
    uid: str = ""
    namespace: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    runtime_handler: str = ""
    #: ``linux.cgroup_parent``: the pod cgroup, as the kubelet named it
    cgroup_parent: str = ""
    pid: int = 0

    def encode(self) -> Writer:
        linux = Writer().string(3, self.cgroup_parent)
        return (
            Writer()
            .string(1, self.id)
            .string(2, self.name)
            .string(3, self.uid)
            .string(4, self.namespace)
            .string_map(5, self.labels)
            .string_map(6, self.annotations)
            .string(7, self.runtime_handler)
            .message(8, linux)
            .varint(9, self.pid)
        )

    @classmethod
    def decode(cls, msg: Fields | None) -> PodSandbox:
        if msg is None:
            return cls()
        linux = pw.message(msg, 8) or {}
        return cls(
            id=pw.string(msg, 1),
            name=pw.string(msg, 2),
            uid=pw.string(msg, 3),
            namespace=pw.string(msg, 4),
            labels=pw.string_map(msg, 5),
            annotations=pw.string_map(msg, 6),
            runtime_handler=pw.string(msg, 7),
            cgroup_parent=pw.string(linux, 3),
            pid=pw.uint(msg, 9),
        )


@dataclass
class Container:
    """``Container``: identity, environment (``K=V``), ``linux.resources`` and ``linux.cgroups_path``."""

    id: str = ""
    pod_sandbox_id: str = ""
    name: str = ""
    state: int = 0
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    args: list[str] = field(default_factory=list)
    env: list[str] = field(default_factory=list)
    resources: LinuxResources = field(default_factory=LinuxResources)
    cgroups_path: str = ""
    pid: int = 0

    def encode(self) -> Writer:
        linux = Writer().message(3, self.resources.encode()).string(5, self.cgroups_path)
        return (
            Writer()
            .string(1, self.id)
            .string(2, self.pod_sandbox_id)
            .string(3, self.name)
            .varint(4, self.state)
            .string_map(5, self.labels)
            .string_map(6, self.annotations)
            .strings(7, self.args)
            .strings(8, self.env)
            .message(11, linux)
            .varint(12, self.pid)
        )

    @classmethod
    def decode(cls, msg: Fields | None) -> Container:
        if msg is None:
            return cls()
        linux = pw.message(msg, 11) or {}
        return cls(
            id=pw.string(msg, 1),
            pod_sandbox_id=pw.string(msg, 2),
            name=pw.string(msg, 3),
            state=pw.uint(msg, 4),
            labels=pw.string_map(msg, 5),
            annotations=pw.string_map(msg, 6),
            args=pw.strings(msg, 7),
            env=pw.strings(msg, 8),
            resources=LinuxResources.decode(pw.message(linux, 3)),
            cgroups_path=pw.string(linux, 5),
            pid=pw.uint(msg, 12),
        )


@dataclass(frozen=True)
class Mount:
    destination: str
    source: str
    type: str = "bind"
    options: tuple[str, ...] = ()

    def encode(self) -> Writer:
        return (
            Writer()
            .string(1, self.destination)
            .string(2, self.type)
            .string(3, self.source)
            .strings(4, self.options)
        )

    @classmethod
    def decode(cls, msg: Fields) -> Mount:
        return cls(pw.string(msg, 1), pw.string(msg, 3), pw.string(msg, 2), tuple(pw.strings(msg, 4)))


@dataclass
class ContainerAdjustment:
    """``ContainerAdjustment``: what a plug-in changes in a container being created —
    environment (4, ``KeyValue``), mounts (3), ``linux.resources`` (6.2)."""

    env: dict[str, str] = field(default_factory=dict)
    mounts: list[Mount] = field(default_factory=list)
    resources: LinuxResources = field(default_factory=LinuxResources)

    def encode(self) -> Writer:
        out = Writer()
        for mount in self.mounts:
            out.message(3, mount.encode(), always=True)
        for key, value in self.env.items():
            out.message(4, Writer().string(1, key).string(2, value), always=True)
        return out.message(6, Writer().message(2, self.resources.encode()))

    @classmethod
    def decode(cls, msg: Fields | None) -> ContainerAdjustment:
        if msg is None:
            return cls()
        linux = pw.message(msg, 6) or {}
        return cls(
            env={pw.string(kv, 1): pw.string(kv, 2) for kv in pw.messages(msg, 4)},
            mounts=[Mount.decode(m) for m in pw.messages(msg, 3)],
            resources=LinuxResources.decode(pw.message(linux, 2)),
        )

    def __bool__(self) -> bool:
        return bool(self.env or self.mounts or self.resources)


@dataclass
class ContainerUpdate:
    """``ContainerUpdate``: new resources for a running container."""

    container_id: str
    resources: LinuxResources = field(default_factory=LinuxResources)
    ignore_failure: bool = False

    def encode(self) -> Writer:
        linux = Writer().message(1, self.resources.encode())
        return Writer().string(1, self.container_id).message(2, linux).varint(3, self.ignore_failure)

    @classmethod
    def decode(cls, msg: Fields) -> ContainerUpdate:
        linux = pw.message(msg, 2) or {}
        return cls(pw.string(msg, 1), LinuxResources.decode(pw.message(linux, 1)), bool(pw.uint(msg, 3)))


# --- requests and answers ----------------------------------------------------------------------


@dataclass
class RegisterPluginRequest:
    plugin_name: str
    plugin_idx: str

    def encode(self) -> bytes:
        return bytes(Writer().string(1, self.plugin_name).string(2, self.plugin_idx))

    @classmethod
    def decode(cls, data: bytes) -> RegisterPluginRequest:
        msg = pw.fields(data)
        return cls(pw.string(msg, 1), pw.string(msg, 2))


@dataclass
class ConfigureRequest:
    config: str = ""
    runtime_name: str = ""
    runtime_version: str = ""
    #: nanoseconds
    registration_timeout: int = 0
    request_timeout: int = 0

    def encode(self) -> bytes:
        return bytes(
            Writer()
            .string(1, self.config)
            .string(2, self.runtime_name)
            .string(3, self.runtime_version)
            .varint(4, self.registration_timeout)
            .varint(5, self.request_timeout)
        )

    @classmethod
    def decode(cls, data: bytes) -> ConfigureRequest:
        msg = pw.fields(data)
        return cls(
            pw.string(msg, 1), pw.string(msg, 2), pw.string(msg, 3), pw.int64(msg, 4), pw.int64(msg, 5)
        )


def configure_response(events: int) -> bytes:
    return bytes(Writer().varint(2, events))


def configure_response_events(data: bytes) -> int:
    return pw.int64(pw.fields(data), 2)


@dataclass
class SynchronizeRequest:
    pods: list[PodSandbox] = field(default_factory=list)
    containers: list[Container] = field(default_factory=list)
    more: bool = False

    def encode(self) -> bytes:
        out = Writer()
        for pod in self.pods:
            out.message(1, pod.encode(), always=True)
        for container in self.containers:
            out.message(2, container.encode(), always=True)
        return bytes(out.varint(3, self.more))

    @classmethod
    def decode(cls, data: bytes) -> SynchronizeRequest:
        msg = pw.fields(data)
        return cls(
            [PodSandbox.decode(p) for p in pw.messages(msg, 1)],
            [Container.decode(c) for c in pw.messages(msg, 2)],
            bool(pw.uint(msg, 3)),
        )


def _updates(out: Writer, number: int, updates: list[ContainerUpdate]) -> Writer:
    for update in updates:
        out.message(number, update.encode(), always=True)
    return out


@dataclass
class SynchronizeResponse:
    updates: list[ContainerUpdate] = field(default_factory=list)
    more: bool = False

    def encode(self) -> bytes:
        return bytes(_updates(Writer(), 1, self.updates).varint(2, self.more))

    @classmethod
    def decode(cls, data: bytes) -> SynchronizeResponse:
        msg = pw.fields(data)
        return cls([ContainerUpdate.decode(u) for u in pw.messages(msg, 1)], bool(pw.uint(msg, 2)))


@dataclass
class ContainerRequest:
    """``CreateContainerRequest``, ``UpdateContainerRequest`` (with ``linux_resources``, 3) and
    ``StopContainerRequest``: the pod (1) and the container (2)."""

    pod: PodSandbox
    container: Container
    linux_resources: LinuxResources | None = None

    def encode(self) -> bytes:
        out = (
            Writer()
            .message(1, self.pod.encode(), always=True)
            .message(2, self.container.encode(), always=True)
        )
        if self.linux_resources is not None:
            out.message(3, self.linux_resources.encode(), always=True)
        return bytes(out)

    @classmethod
    def decode(cls, data: bytes) -> ContainerRequest:
        msg = pw.fields(data)
        resources = pw.message(msg, 3)
        return cls(
            PodSandbox.decode(pw.message(msg, 1)),
            Container.decode(pw.message(msg, 2)),
            None if resources is None else LinuxResources.decode(resources),
        )


@dataclass
class CreateContainerResponse:
    adjust: ContainerAdjustment = field(default_factory=ContainerAdjustment)
    updates: list[ContainerUpdate] = field(default_factory=list)

    def encode(self) -> bytes:
        out = Writer()
        if self.adjust:
            out.message(1, self.adjust.encode(), always=True)
        return bytes(_updates(out, 2, self.updates))

    @classmethod
    def decode(cls, data: bytes) -> CreateContainerResponse:
        msg = pw.fields(data)
        return cls(
            ContainerAdjustment.decode(pw.message(msg, 1)),
            [ContainerUpdate.decode(u) for u in pw.messages(msg, 2)],
        )


@dataclass
class UpdatesResponse:
    """``UpdateContainerResponse`` and ``StopContainerResponse``: container updates (1)."""

    updates: list[ContainerUpdate] = field(default_factory=list)

    def encode(self) -> bytes:
        return bytes(_updates(Writer(), 1, self.updates))

    @classmethod
    def decode(cls, data: bytes) -> UpdatesResponse:
        return cls([ContainerUpdate.decode(u) for u in pw.messages(pw.fields(data), 1)])


@dataclass
class StateChangeEvent:
    """``StateChangeEvent``: RunPodSandbox, RemovePodSandbox ... (1), the pod (2), a container (3)."""

    event: int
    pod: PodSandbox = field(default_factory=PodSandbox)
    container: Container | None = None

    def encode(self) -> bytes:
        out = Writer().varint(1, self.event).message(2, self.pod.encode(), always=True)
        if self.container is not None:
            out.message(3, self.container.encode(), always=True)
        return bytes(out)

    @classmethod
    def decode(cls, data: bytes) -> StateChangeEvent:
        msg = pw.fields(data)
        container = pw.message(msg, 3)
        return cls(
            pw.int64(msg, 1),
            PodSandbox.decode(pw.message(msg, 2)),
            None if container is None else Container.decode(container),
        )
