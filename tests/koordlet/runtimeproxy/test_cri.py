"""CRI call surgery: what the proxy reads from calls, and hook answers merged into them with
every other byte kept."""

from __future__ import annotations

from koordinator import protowire as pw
from koordinator.api import runtimehook as rh
from koordlet.runtimeproxy import cri
from tests.koordlet.runtimeproxy import crimsg

BE = {"koordinator.sh/qosClass": "BE"}


def test_run_pod_sandbox_is_read_and_edited():
    config = crimsg.sandbox_config("web", "u-1", BE, {"a": "1"}, "/kubepods/besteffort/podu-1")
    request = crimsg.run_pod_sandbox(config)
    pod = cri.run_pod_sandbox(request)
    assert (pod.meta.name, pod.meta.uid, pod.meta.namespace) == ("web", "u-1", "default")
    assert (pod.labels, pod.annotations, pod.runtime_handler) == (BE, {"a": "1"}, "runc")
    assert pod.cgroup_parent == "/kubepods/besteffort/podu-1"
    assert pod.resources == rh.LinuxContainerResources(cpu_shares=2)
    response = rh.PodSandboxHookResponse(
        annotations={"b": "2"},
        cgroup_parent="/kubepods/besteffort/podu-1-x",
        resources=rh.LinuxContainerResources(cpu_quota=50000),
    )
    edited = cri.apply_sandbox_hook(request, response)
    after = cri.run_pod_sandbox(edited)
    assert after.annotations == {"a": "1", "b": "2"}
    assert after.labels == BE
    assert after.cgroup_parent == "/kubepods/besteffort/podu-1-x"
    assert after.resources == rh.LinuxContainerResources(cpu_shares=2, cpu_quota=50000)
    config_fields = pw.message(pw.fields(edited), 1) or {}
    assert pw.string(config_fields, crimsg.UNKNOWN_FIELD) == "kept"
    assert pw.string(config_fields, 3) == "/var/log/pods/default_web_u-1"  # log directory untouched
    assert pw.string(pw.fields(edited), 2) == "runc"


def test_an_empty_answer_changes_nothing():
    request = crimsg.run_pod_sandbox(crimsg.sandbox_config("web", "u-1"))
    edited = cri.apply_sandbox_hook(request, rh.PodSandboxHookResponse())
    assert cri.run_pod_sandbox(edited) == cri.run_pod_sandbox(request)


def test_create_container_merges_resources_envs_and_annotations():
    config = crimsg.sandbox_config("web", "u-1", BE)
    request = crimsg.create_container("sb-1", config, envs={"PATH": "/bin", "NVIDIA_VISIBLE_DEVICES": "void"})
    pod_id, container, pod = cri.create_container(request)
    assert (pod_id, container.name, pod.meta.uid) == ("sb-1", "main", "u-1")
    assert container.resources == rh.LinuxContainerResources(cpu_shares=2, cpu_quota=-1, oom_score_adj=1000)
    response = rh.ContainerResourceHookResponse(
        container_resources=rh.LinuxContainerResources(
            cpu_shares=512, cpu_quota=50000, memory_limit_in_bytes=1 << 30
        ),
        container_envs={"NVIDIA_VISIBLE_DEVICES": "0"},
        container_annotations={"x": "y"},
    )
    edited = cri.apply_container_hook(request, response)
    resources = crimsg.container_resources(edited)
    assert (pw.int64(resources, 2), pw.int64(resources, 3), pw.int64(resources, 4)) == (50000, 512, 1 << 30)
    assert pw.int64(resources, 5) == 1000  # what the hooks left alone stays
    assert crimsg.container_envs(edited) == {"PATH": "/bin", "NVIDIA_VISIBLE_DEVICES": "0"}
    after = cri.create_container(edited)[1]
    assert after.annotations == {"io.kubernetes.container.hash": "abc", "x": "y"}
    config_fields = pw.message(pw.fields(edited), 2) or {}
    assert pw.string(config_fields, crimsg.UNKNOWN_FIELD) == "kept"
    assert pw.strings(config_fields, 3) == ["/bin/sh"]
    assert pw.message(pw.fields(edited), 3) == pw.message(pw.fields(request), 3)  # sandbox config as sent


def test_update_container_resources():
    request = crimsg.update_request("c1", cpu_shares=1024, cpu_quota=200000)
    assert cri.container_id(request) == "c1"
    resources, _annotations = cri.update_resources(request)
    assert resources == rh.LinuxContainerResources(cpu_shares=1024, cpu_quota=200000)
    edited = cri.apply_update_hook(
        request,
        rh.ContainerResourceHookResponse(container_resources=rh.LinuxContainerResources(cpuset_cpus="2-3")),
    )
    assert cri.update_resources(edited)[0] == rh.LinuxContainerResources(
        cpu_shares=1024, cpu_quota=200000, cpuset_cpus="2-3"
    )


def test_listed_pods_and_containers_for_recovery():
    sandbox = (
        pw.Writer()
        .string(1, "sb-1")
        .message(2, pw.Writer().string(1, "web").string(2, "u-1").string(3, "default"))
        .string_map(5, BE)
        .string_map(6, {"a": "1"})
        .string(7, "runc")
    )
    pods = cri.listed_sandboxes(bytes(pw.Writer().message(1, sandbox)))
    assert pods["sb-1"].meta.uid == "u-1"
    assert pods["sb-1"].labels == BE
    container = pw.Writer().string(1, "c1").string(2, "sb-1").message(3, pw.Writer().string(1, "main"))
    containers = cri.listed_containers(bytes(pw.Writer().message(1, container)))
    assert (containers["c1"].pod_id, containers["c1"].name) == ("sb-1", "main")


def test_unified_entries_are_merged_with_the_kubelets():
    kubelet = bytes(crimsg.resources(cpu_shares=2).string_map(9, {"memory.high": "100", "io.weight": "50"}))
    changes = rh.LinuxContainerResources(cpu_quota=50000, unified={"memory.high": "200", "cpu.idle": "1"})
    merged = rh.LinuxContainerResources.decode(pw.fields(cri.merge_resources(kubelet, changes)))
    assert merged.unified == {"memory.high": "200", "io.weight": "50", "cpu.idle": "1"}
    assert (merged.cpu_shares, merged.cpu_quota) == (2, 50000)
