"""Koordinator's runtime hook API (``runtime.v1alpha1``): koord-runtime-proxy ↔ koordlet.

koord-runtime-proxy sits between the kubelet and the container runtime; before (or after) a
CRI call it asks each hook server it knows — the koordlet — over gRPC
(``runtime.v1alpha1.RuntimeHookService``) what to change, and merges the answer into the
call. A hook server announces itself with a JSON file in the proxy's configuration directory
(``/etc/runtime/hookserver.d/koordlet.json``): its socket, its failure policy and the hook
points it serves.

The messages are written out by hand with the field numbers of upstream's
``apis/runtime/v1alpha1/api.proto``; ``container_envs`` (request 9, response 4) carries the
environment a hook adds (the GPU hook's ``NVIDIA_VISIBLE_DEVICES``). ``LinuxContainerResources``
has the layout of CRI's message of the same name, so it is copied between the two as is.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from koordinator import protowire as pw
from koordinator.protowire import Writer

SERVICE = "runtime.v1alpha1.RuntimeHookService"
#: the pod annotation (key and value) that makes koord-runtime-proxy skip the hook servers
SKIP_HOOK_SERVER_KEY = "runtimeproxy.koordinator.sh/skip-hookserver"
SKIP_HOOK_SERVER_VALUE = "true"

Fields = dict[int, list[int | bytes]]


class HookType(enum.StrEnum):
    """A hook point; its RPC is ``<value>Hook``."""

    PRE_RUN_POD_SANDBOX = "PreRunPodSandbox"
    POST_STOP_POD_SANDBOX = "PostStopPodSandbox"
    PRE_CREATE_CONTAINER = "PreCreateContainer"
    PRE_START_CONTAINER = "PreStartContainer"
    POST_START_CONTAINER = "PostStartContainer"
    POST_STOP_CONTAINER = "PostStopContainer"
    PRE_UPDATE_CONTAINER_RESOURCES = "PreUpdateContainerResources"

    @property
    def method(self) -> str:
        return f"/{SERVICE}/{self.value}Hook"

    @property
    def pod_level(self) -> bool:
        return self in (HookType.PRE_RUN_POD_SANDBOX, HookType.POST_STOP_POD_SANDBOX)


@dataclass
class LinuxContainerResources:
    """CPU period (1), quota (2), shares (3), memory limit (4), OOM score (5), cpuset CPUs (6)
    and memory nodes (7), unified (9); 0 and "" mean "not specified"."""

    cpu_period: int = 0
    cpu_quota: int = 0
    cpu_shares: int = 0
    memory_limit_in_bytes: int = 0
    oom_score_adj: int = 0
    cpuset_cpus: str = ""
    cpuset_mems: str = ""
    unified: dict[str, str] = field(default_factory=dict)

    def encode(self) -> Writer:
        return (
            Writer()
            .varint(1, self.cpu_period)
            .varint(2, self.cpu_quota)
            .varint(3, self.cpu_shares)
            .varint(4, self.memory_limit_in_bytes)
            .varint(5, self.oom_score_adj)
            .string(6, self.cpuset_cpus)
            .string(7, self.cpuset_mems)
            .string_map(9, self.unified)
        )

    @classmethod
    def decode(cls, msg: Fields | None) -> LinuxContainerResources:
        if msg is None:
            return cls()
        return cls(
            cpu_period=pw.int64(msg, 1),
            cpu_quota=pw.int64(msg, 2),
            cpu_shares=pw.int64(msg, 3),
            memory_limit_in_bytes=pw.int64(msg, 4),
            oom_score_adj=pw.int64(msg, 5),
            cpuset_cpus=pw.string(msg, 6),
            cpuset_mems=pw.string(msg, 7),
            unified=pw.string_map(msg, 9),
        )

    def __bool__(self) -> bool:
        return self != LinuxContainerResources()


def _resources(msg: Fields, number: int) -> LinuxContainerResources | None:
    inner = pw.message(msg, number)
    return None if inner is None else LinuxContainerResources.decode(inner)


def _put(out: Writer, number: int, resources: LinuxContainerResources | None) -> Writer:
    return out if resources is None else out.message(number, resources.encode(), always=True)


@dataclass
class PodMeta:
    """``PodSandboxMetadata``: name (1), uid (2), namespace (3), attempt (4)."""

    name: str = ""
    uid: str = ""
    namespace: str = ""
    attempt: int = 0

    def encode(self) -> Writer:
        return (
            Writer()
            .string(1, self.name)
            .string(2, self.uid)
            .string(3, self.namespace)
            .varint(4, self.attempt)
        )

    @classmethod
    def decode(cls, msg: Fields | None) -> PodMeta:
        msg = msg or {}
        return cls(pw.string(msg, 1), pw.string(msg, 2), pw.string(msg, 3), pw.uint(msg, 4))


@dataclass
class PodSandboxHookRequest:
    pod_meta: PodMeta = field(default_factory=PodMeta)
    runtime_handler: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    cgroup_parent: str = ""
    overhead: LinuxContainerResources | None = None
    resources: LinuxContainerResources | None = None

    def encode(self) -> bytes:
        out = (
            Writer()
            .message(1, self.pod_meta.encode(), always=True)
            .string(2, self.runtime_handler)
            .string_map(3, self.labels)
            .string_map(4, self.annotations)
            .string(5, self.cgroup_parent)
        )
        return bytes(_put(_put(out, 6, self.overhead), 7, self.resources))

    @classmethod
    def decode(cls, data: bytes) -> PodSandboxHookRequest:
        msg = pw.fields(data)
        return cls(
            PodMeta.decode(pw.message(msg, 1)),
            pw.string(msg, 2),
            pw.string_map(msg, 3),
            pw.string_map(msg, 4),
            pw.string(msg, 5),
            _resources(msg, 6),
            _resources(msg, 7),
        )


@dataclass
class PodSandboxHookResponse:
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    cgroup_parent: str = ""
    resources: LinuxContainerResources | None = None

    def encode(self) -> bytes:
        out = (
            Writer().string_map(1, self.labels).string_map(2, self.annotations).string(3, self.cgroup_parent)
        )
        return bytes(_put(out, 4, self.resources))

    @classmethod
    def decode(cls, data: bytes) -> PodSandboxHookResponse:
        msg = pw.fields(data)
        return cls(pw.string_map(msg, 1), pw.string_map(msg, 2), pw.string(msg, 3), _resources(msg, 4))


@dataclass
class ContainerResourceHookRequest:
    pod_meta: PodMeta = field(default_factory=PodMeta)
    #: ``ContainerMetadata``: name (1), attempt (2), id (3)
    container_name: str = ""
    container_attempt: int = 0
    container_id: str = ""
    container_annotations: dict[str, str] = field(default_factory=dict)
    container_resources: LinuxContainerResources | None = None
    pod_resources: LinuxContainerResources | None = None
    pod_annotations: dict[str, str] = field(default_factory=dict)
    pod_labels: dict[str, str] = field(default_factory=dict)
    pod_cgroup_parent: str = ""
    container_envs: dict[str, str] = field(default_factory=dict)

    def encode(self) -> bytes:
        container = (
            Writer()
            .string(1, self.container_name)
            .varint(2, self.container_attempt)
            .string(3, self.container_id)
        )
        out = (
            Writer()
            .message(1, self.pod_meta.encode(), always=True)
            .message(2, container, always=True)
            .string_map(3, self.container_annotations)
        )
        _put(_put(out, 4, self.container_resources), 5, self.pod_resources)
        out.string_map(6, self.pod_annotations).string_map(7, self.pod_labels).string(
            8, self.pod_cgroup_parent
        )
        return bytes(out.string_map(9, self.container_envs))

    @classmethod
    def decode(cls, data: bytes) -> ContainerResourceHookRequest:
        msg = pw.fields(data)
        container = pw.message(msg, 2) or {}
        return cls(
            pod_meta=PodMeta.decode(pw.message(msg, 1)),
            container_name=pw.string(container, 1),
            container_attempt=pw.uint(container, 2),
            container_id=pw.string(container, 3),
            container_annotations=pw.string_map(msg, 3),
            container_resources=_resources(msg, 4),
            pod_resources=_resources(msg, 5),
            pod_annotations=pw.string_map(msg, 6),
            pod_labels=pw.string_map(msg, 7),
            pod_cgroup_parent=pw.string(msg, 8),
            container_envs=pw.string_map(msg, 9),
        )


@dataclass
class ContainerResourceHookResponse:
    container_annotations: dict[str, str] = field(default_factory=dict)
    container_resources: LinuxContainerResources | None = None
    pod_cgroup_parent: str = ""
    container_envs: dict[str, str] = field(default_factory=dict)

    def encode(self) -> bytes:
        out = _put(Writer().string_map(1, self.container_annotations), 2, self.container_resources)
        return bytes(out.string(3, self.pod_cgroup_parent).string_map(4, self.container_envs))

    @classmethod
    def decode(cls, data: bytes) -> ContainerResourceHookResponse:
        msg = pw.fields(data)
        return cls(pw.string_map(msg, 1), _resources(msg, 2), pw.string(msg, 3), pw.string_map(msg, 4))


class FailurePolicy(enum.StrEnum):
    """Upstream's failure policy, in two places: the koordlet's hooks at a stage
    (``--runtime-hooks-plugin-failure-policy``) and a hook server as koord-runtime-proxy
    calls it (``--runtime-hooks-failure-policy``, in the server's configuration file)."""

    #: a failing hook stops the stage; a failing hook server fails the CRI call
    FAIL = "Fail"
    #: a failing hook is logged and the others run; the CRI call goes on unchanged
    IGNORE = "Ignore"


class HookServerConfigError(ValueError):
    """A hook server configuration file that cannot be used."""


#: hook names upstream's proxy knows but never calls (its ``OccursOn`` matches no CRI call);
#: a koordlet may announce them
UNCALLED_HOOKS = frozenset({"PreRemoveRunPodSandbox", "NoneRuntimeHookType"})


@dataclass(frozen=True)
class HookServerConfig:
    """One file of the proxy's configuration directory (the koordlet writes ``koordlet.json``).

    ``runtime_hooks`` are the hook points the proxy calls the server at; a name in the file
    that is not one of them is kept in ``ignored_hooks`` (upstream reads the names as plain
    strings and never matches an unknown one), so the server is still called at the others.
    """

    remote_endpoint: str
    failure_policy: FailurePolicy = FailurePolicy.IGNORE
    runtime_hooks: tuple[HookType, ...] = ()
    ignored_hooks: tuple[str, ...] = ()

    def to_json(self) -> str:
        return json.dumps(
            {
                "remote-endpoint": self.remote_endpoint,
                "failure-policy": self.failure_policy.value,
                "runtime-hooks": [h.value for h in self.runtime_hooks],
            },
            indent=2,
        )

    @classmethod
    def from_json(cls, text: str) -> HookServerConfig:
        try:
            raw: Any = json.loads(text)
        except ValueError as exc:
            raise HookServerConfigError(f"not JSON: {exc}") from None
        if not isinstance(raw, Mapping) or not isinstance(raw.get("remote-endpoint"), str):
            raise HookServerConfigError('"remote-endpoint" (a socket path) is required')
        try:
            policy = FailurePolicy(raw.get("failure-policy") or FailurePolicy.IGNORE.value)
        except (ValueError, TypeError) as exc:
            raise HookServerConfigError(str(exc)) from None
        names = raw.get("runtime-hooks") or []
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise HookServerConfigError('"runtime-hooks" must be a list of hook names')
        known = {h.value for h in HookType}
        hooks = tuple(HookType(n) for n in names if n in known)
        ignored = tuple(n for n in names if n not in known)
        return cls(str(raw["remote-endpoint"]), policy, hooks, ignored)
