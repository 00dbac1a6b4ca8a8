"""CRI v1 requests as the kubelet writes them, encoded for the tests (field numbers from
``k8s.io/cri-api`` ``api.proto``), with a field no one in the proxy knows about."""

from __future__ import annotations

from koordinator import protowire as pw
from koordinator.protowire import Writer

#: a field number CRI does not use in these messages: it must come out of the proxy unchanged
UNKNOWN_FIELD = 99


def resources(**values: int | str) -> Writer:
    numbers = {
        "cpu_period": 1,
        "cpu_quota": 2,
        "cpu_shares": 3,
        "memory_limit_in_bytes": 4,
        "oom_score_adj": 5,
    }
    out = Writer()
    for name, value in values.items():
        if name == "cpuset_cpus":
            out.string(6, str(value))
        else:
            out.varint(numbers[name], int(value))
    return out


def sandbox_config(name: str, uid: str, labels=None, annotations=None, cgroup_parent: str = "") -> Writer:
    meta = Writer().string(1, name).string(2, uid).string(3, "default").varint(4, 0)
    linux = Writer().string(1, cgroup_parent).message(5, resources(cpu_shares=2))
    return (
        Writer()
        .message(1, meta)
        .string(2, name)  # hostname
        .string(3, f"/var/log/pods/default_{name}_{uid}")
        .string_map(6, labels or {})
        .string_map(7, annotations or {})
        .message(8, linux)
        .string(UNKNOWN_FIELD, "kept")
    )


def run_pod_sandbox(config: Writer) -> bytes:
    return bytes(Writer().message(1, config).string(2, "runc"))


def create_container(pod_id: str, config: Writer, name: str = "main", envs=None) -> bytes:
    container = (
        Writer()
        .message(1, Writer().string(1, name).varint(2, 0))
        .message(2, Writer().string(1, "busybox"))
        .strings(3, ["/bin/sh"])
    )
    for key, value in (envs or {}).items():
        container.message(6, Writer().string(1, key).string(2, value), always=True)
    container.string_map(10, {"io.kubernetes.container.hash": "abc"})
    container.message(15, Writer().message(1, resources(cpu_shares=2, cpu_quota=-1, oom_score_adj=1000)))
    container.string(UNKNOWN_FIELD, "kept")
    return bytes(Writer().string(1, pod_id).message(2, container).message(3, config))


def container_resources(request: bytes) -> dict[int, list[int | bytes]]:
    config = pw.message(pw.fields(request), 2) or {}
    return pw.message(pw.message(config, 15) or {}, 1) or {}


def container_envs(request: bytes) -> dict[str, str]:
    config = pw.message(pw.fields(request), 2) or {}
    return {pw.string(kv, 1): pw.string(kv, 2) for kv in pw.messages(config, 6)}


def id_answer(object_id: str) -> bytes:
    return bytes(Writer().string(1, object_id))


def id_request(object_id: str) -> bytes:
    return bytes(Writer().string(1, object_id))


def update_request(container_id: str, **values: int | str) -> bytes:
    return bytes(Writer().string(1, container_id).message(2, resources(**values), always=True))
