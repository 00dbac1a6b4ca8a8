"""The parts of CRI v1 (``runtime.v1``, ``k8s.io/cri-api`` ``api.proto``) the proxy reads and edits.

Every other byte of a call passes through as the kubelet wrote it: edits go through
:mod:`koordinator.protowire`'s field splicing, so fields this module does not know (newer
CRI versions) survive.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from koordinator import protowire as pw
from koordinator.api import runtimehook as rh
from koordinator.protowire import Writer

RUNTIME_SERVICE = "runtime.v1.RuntimeService"
IMAGE_SERVICE = "runtime.v1.ImageService"
#: the server-streaming methods; every other CRI method is unary
STREAMING = frozenset({f"/{RUNTIME_SERVICE}/GetContainerEvents"})

RUN_POD_SANDBOX = f"/{RUNTIME_SERVICE}/RunPodSandbox"
STOP_POD_SANDBOX = f"/{RUNTIME_SERVICE}/StopPodSandbox"
REMOVE_POD_SANDBOX = f"/{RUNTIME_SERVICE}/RemovePodSandbox"
CREATE_CONTAINER = f"/{RUNTIME_SERVICE}/CreateContainer"
START_CONTAINER = f"/{RUNTIME_SERVICE}/StartContainer"
STOP_CONTAINER = f"/{RUNTIME_SERVICE}/StopContainer"
REMOVE_CONTAINER = f"/{RUNTIME_SERVICE}/RemoveContainer"
UPDATE_CONTAINER_RESOURCES = f"/{RUNTIME_SERVICE}/UpdateContainerResources"

# field numbers
_SANDBOX_CONFIG_METADATA, _SANDBOX_CONFIG_LABELS, _SANDBOX_CONFIG_ANNOTATIONS, _SANDBOX_CONFIG_LINUX = (
    1,
    6,
    7,
    8,
)
_LINUX_SANDBOX_CGROUP_PARENT, _LINUX_SANDBOX_RESOURCES = 1, 5
_CONTAINER_METADATA, _CONTAINER_ENVS, _CONTAINER_ANNOTATIONS, _CONTAINER_LINUX = 1, 6, 10, 15
_LINUX_CONTAINER_RESOURCES = 1
#: LinuxContainerResources.unified, a map
_UNIFIED = 9


@dataclass
class PodInfo:
    """A sandbox as its config described it (kept by the proxy for the container calls)."""

    meta: rh.PodMeta = field(default_factory=rh.PodMeta)
    runtime_handler: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    cgroup_parent: str = ""
    resources: rh.LinuxContainerResources | None = None

    def skips_hooks(self, key: str = rh.SKIP_HOOK_SERVER_KEY, value: str = rh.SKIP_HOOK_SERVER_VALUE) -> bool:
        return self.annotations.get(key) == value

    def hook_request(self) -> rh.PodSandboxHookRequest:
        return rh.PodSandboxHookRequest(
            self.meta,
            self.runtime_handler,
            self.labels,
            self.annotations,
            self.cgroup_parent,
            None,
            self.resources,
        )


@dataclass
class ContainerInfo:
    pod_id: str
    name: str
    attempt: int = 0
    annotations: dict[str, str] = field(default_factory=dict)
    resources: rh.LinuxContainerResources | None = None
    envs: dict[str, str] = field(default_factory=dict)

    def hook_request(self, pod: PodInfo, container_id: str = "") -> rh.ContainerResourceHookRequest:
        return rh.ContainerResourceHookRequest(
            pod_meta=pod.meta,
            container_name=self.name,
            container_attempt=self.attempt,
            container_id=container_id,
            container_annotations=self.annotations,
            container_resources=self.resources,
            pod_resources=pod.resources,
            pod_annotations=pod.annotations,
            pod_labels=pod.labels,
            pod_cgroup_parent=pod.cgroup_parent,
            container_envs=self.envs,
        )


def _message(msg: pw.Fields, number: int) -> dict[int, list[int | bytes]]:
    return pw.message(msg, number) or {}


def sandbox_info(config: bytes, runtime_handler: str = "") -> PodInfo:
    """A ``PodSandboxConfig``'s identity, labels, annotations, cgroup parent and resources."""
    msg = pw.fields(config)
    linux = _message(msg, _SANDBOX_CONFIG_LINUX)
    resources = pw.message(linux, _LINUX_SANDBOX_RESOURCES)
    return PodInfo(
        rh.PodMeta.decode(pw.message(msg, _SANDBOX_CONFIG_METADATA)),
        runtime_handler,
        pw.string_map(msg, _SANDBOX_CONFIG_LABELS),
        pw.string_map(msg, _SANDBOX_CONFIG_ANNOTATIONS),
        pw.string(linux, _LINUX_SANDBOX_CGROUP_PARENT),
        None if resources is None else rh.LinuxContainerResources.decode(resources),
    )


def _config(request: bytes, number: int) -> bytes:
    value = pw.first(pw.fields(request), number)
    return value if isinstance(value, bytes) else b""


# --- RunPodSandbox -----------------------------------------------------------------------------


def run_pod_sandbox(request: bytes) -> PodInfo:
    """``RunPodSandboxRequest{config 1, runtime_handler 2}``."""
    return sandbox_info(_config(request, 1), pw.string(pw.fields(request), 2))


def _merge_map(data: bytes, number: int, values: dict[str, str]) -> bytes:
    if not values:
        return data
    merged = {**pw.string_map(pw.fields(data), number), **values}
    return pw.replace(data, number, None) + bytes(Writer().string_map(number, merged))


def merge_resources(current: bytes, changes: rh.LinuxContainerResources) -> bytes:
    """CRI ``LinuxContainerResources`` with each field the hooks specified replaced."""
    wanted = pw.fields(bytes(changes.encode()))
    for number in sorted(wanted.keys() - {_UNIFIED}):  # the map is merged entry by entry below
        value = wanted[number][-1]
        current = pw.replace(current, number, None)
        current += bytes(
            Writer().varint(number, value) if isinstance(value, int) else Writer().blob(number, value)
        )
    return _merge_map(current, _UNIFIED, changes.unified)


def apply_sandbox_hook(request: bytes, response: rh.PodSandboxHookResponse) -> bytes:
    def config(data: bytes) -> bytes:
        data = _merge_map(data, _SANDBOX_CONFIG_LABELS, response.labels)
        data = _merge_map(data, _SANDBOX_CONFIG_ANNOTATIONS, response.annotations)

        def linux(section: bytes) -> bytes:
            if response.cgroup_parent:
                section = _set_string(section, _LINUX_SANDBOX_CGROUP_PARENT, response.cgroup_parent)
            if response.resources:
                resources = response.resources
                section = pw.edit(
                    section, (_LINUX_SANDBOX_RESOURCES,), lambda r: merge_resources(r, resources)
                )
            return section

        return pw.edit(data, (_SANDBOX_CONFIG_LINUX,), linux)

    return pw.edit(request, (1,), config)


def _set_string(data: bytes, number: int, value: str) -> bytes:
    return pw.replace(data, number, None) + bytes(Writer().string(number, value))


# --- CreateContainer ---------------------------------------------------------------------------


def create_container(request: bytes) -> tuple[str, ContainerInfo, PodInfo]:
    """``CreateContainerRequest{pod_sandbox_id 1, config 2, sandbox_config 3}``."""
    msg = pw.fields(request)
    config = _message(msg, 2)
    meta = _message(config, _CONTAINER_METADATA)
    linux = _message(config, _CONTAINER_LINUX)
    resources = pw.message(linux, _LINUX_CONTAINER_RESOURCES)
    envs = {pw.string(kv, 1): pw.string(kv, 2) for kv in pw.messages(config, _CONTAINER_ENVS)}
    pod_id = pw.string(msg, 1)
    container = ContainerInfo(
        pod_id,
        pw.string(meta, 1),
        pw.uint(meta, 2),
        pw.string_map(config, _CONTAINER_ANNOTATIONS),
        None if resources is None else rh.LinuxContainerResources.decode(resources),
        envs,
    )
    return pod_id, container, sandbox_info(_config(request, 3))


def apply_container_hook(request: bytes, response: rh.ContainerResourceHookResponse) -> bytes:
    def config(data: bytes) -> bytes:
        data = _merge_map(data, _CONTAINER_ANNOTATIONS, response.container_annotations)
        if response.container_envs:
            envs = response.container_envs
            data = pw.without(data, _CONTAINER_ENVS, lambda kv: pw.string(pw.fields(kv), 1) not in envs)
            for key, value in envs.items():
                data = pw.append(data, _CONTAINER_ENVS, Writer().string(1, key).string(2, value))
        if response.container_resources:
            resources = response.container_resources
            data = pw.edit(
                data, (_CONTAINER_LINUX, _LINUX_CONTAINER_RESOURCES), lambda r: merge_resources(r, resources)
            )
        return data

    return pw.edit(request, (2,), config)


# --- StartContainer, UpdateContainerResources, removals ----------------------------------------


def container_id(request: bytes) -> str:
    """The ``container_id`` (1) of Start/Stop/Remove/UpdateContainerResources."""
    return pw.string(pw.fields(request), 1)


def pod_sandbox_id(request: bytes) -> str:
    """The ``pod_sandbox_id`` (1) of Stop/RemovePodSandbox, and the id a
    ``RunPodSandboxResponse``/``CreateContainerResponse`` returns."""
    return pw.string(pw.fields(request), 1)


def update_resources(request: bytes) -> tuple[rh.LinuxContainerResources | None, dict[str, str]]:
    """``UpdateContainerResourcesRequest{container_id 1, linux 2, windows 3, annotations 4}``."""
    msg = pw.fields(request)
    linux = pw.message(msg, 2)
    return (None if linux is None else rh.LinuxContainerResources.decode(linux)), pw.string_map(msg, 4)


def apply_update_hook(request: bytes, response: rh.ContainerResourceHookResponse) -> bytes:
    request = _merge_map(request, 4, response.container_annotations)
    if response.container_resources:
        resources = response.container_resources
        request = pw.edit(request, (2,), lambda r: merge_resources(r, resources))
    return request


def update_request(container: str, resources: rh.LinuxContainerResources) -> bytes:
    """An ``UpdateContainerResourcesRequest`` of its own (what a PreStartContainer hook asks)."""
    return bytes(Writer().string(1, container).message(2, resources.encode(), always=True))


# --- recovery after a restart of the proxy -----------------------------------------------------

LIST_POD_SANDBOX = f"/{RUNTIME_SERVICE}/ListPodSandbox"
LIST_CONTAINERS = f"/{RUNTIME_SERVICE}/ListContainers"


def listed_sandboxes(response: bytes) -> dict[str, PodInfo]:
    """``ListPodSandboxResponse{items 1 {id 1, metadata 2, labels 5, annotations 6,
    runtime_handler 7}}`` by sandbox id (the cgroup parent is not listed)."""
    out = {}
    for item in pw.messages(pw.fields(response), 1):
        out[pw.string(item, 1)] = PodInfo(
            rh.PodMeta.decode(pw.message(item, 2)),
            pw.string(item, 7),
            pw.string_map(item, 5),
            pw.string_map(item, 6),
        )
    return out


def listed_containers(response: bytes) -> dict[str, ContainerInfo]:
    """``ListContainersResponse{containers 1 {id 1, pod_sandbox_id 2, metadata 3, annotations 9}}``."""
    out = {}
    for item in pw.messages(pw.fields(response), 1):
        meta = _message(item, 3)
        out[pw.string(item, 1)] = ContainerInfo(
            pw.string(item, 2), pw.string(meta, 1), pw.uint(meta, 2), pw.string_map(item, 9)
        )
    return out
