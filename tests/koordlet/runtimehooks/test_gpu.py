"""GPUEnvInject: the environment and mounts a container gets from its pod's GPU allocation."""

from __future__ import annotations

import json
from typing import Any

import pytest

from koordinator.api.extension.device import ANNOTATION_DEVICE_ALLOCATED, LABEL_GPU_ISOLATION_PROVIDER
from koordlet.runtimehooks.hooks.gpu import GPUEnvInject
from koordlet.runtimehooks.protocol import ContainerContext, Mount, Response
from tests.fakes.host import FakeHost
from tests.fakes.pods import make_pod
from tests.koordlet.runtimehooks.hookenv import node_facts, pod_of


def gpu(minor: int, **resources: str) -> dict[str, Any]:
    return {
        "minor": minor,
        "resources": {f"koordinator.sh/{k.replace('_', '-')}": v for k, v in resources.items()},
    }


def respond(
    tmp_path, annotation: dict[str, Any] | str | None, labels: dict[str, str] | None = None, **kw
) -> Response:
    host = FakeHost(tmp_path, "v2")
    builder = make_pod("train").qos("LS").container("main", cid="containerd://" + "c" * 64)
    if annotation is not None:
        builder.annotation(
            ANNOTATION_DEVICE_ALLOCATED, annotation if isinstance(annotation, str) else json.dumps(annotation)
        )
    for key, value in (labels or {}).items():
        builder.label(key, value)
    pod = pod_of(host, builder.build())
    ctx = ContainerContext(pod, pod.containers[0], node_facts(host, gates={"GPUEnvInject": True}))
    hook = GPUEnvInject(**kw)
    assert hook.enabled(ctx.node) == (True, "")
    hook.container(ctx)
    return ctx.response


HAMI = {LABEL_GPU_ISOLATION_PROVIDER: "HAMi-core"}


@pytest.mark.parametrize(
    ("allocated", "visible"),
    [
        ({"gpu": [gpu(0)]}, "0"),
        ({"gpu": [gpu(3), gpu(1), gpu(2)]}, "3,1,2"),  # the annotation's order
        ({"gpu": [gpu(1)], "rdma": [{"minor": 5}]}, "1"),
    ],
)
def test_visible_devices(tmp_path, allocated, visible):
    response = respond(tmp_path, allocated)
    assert response.env == {"NVIDIA_VISIBLE_DEVICES": visible}
    assert response.mounts == []
    assert response.resources.updates("x") == []  # nothing the reconciler would write
    assert response.extra == []


@pytest.mark.parametrize(
    "allocated",
    [
        None,
        {"rdma": [{"minor": 5}]},
        {"gpu": []},
        "{not json",
        '["gpu"]',
        '{"gpu": {"minor": 0}}',
        '{"gpu": [{"minor": "x"}]}',
    ],
)
def test_no_gpu_or_malformed_annotation_gives_no_env(tmp_path, allocated):
    response = respond(tmp_path, allocated)
    assert response.env == {}
    assert response.mounts == []


def test_hami_core_shared_gpu(tmp_path):
    allocated = {"gpu": [gpu(1, gpu_memory_ratio="50", gpu_memory="8Gi", gpu_core="30")]}
    response = respond(tmp_path, allocated, HAMI, hami_core_library="/opt/hami/libvgpu.so")
    assert response.env == {
        "NVIDIA_VISIBLE_DEVICES": "1",
        "CUDA_DEVICE_MEMORY_LIMIT": str(8 << 30),
        "CUDA_DEVICE_SM_LIMIT": "30",
        "LD_PRELOAD": "/opt/hami/libvgpu.so",
    }
    assert response.mounts == [
        Mount("/opt/hami/libvgpu.so", "/opt/hami/libvgpu.so", "bind", ("rbind",)),
        Mount("/tmp/vgpulock", "/tmp/vgpulock", "bind", ("rbind",)),
    ]


def test_hami_core_without_core_limit_and_default_library(tmp_path):
    response = respond(tmp_path, {"gpu": [gpu(0, gpu_memory_ratio="25", gpu_memory="4Gi")]}, HAMI)
    assert response.env == {
        "NVIDIA_VISIBLE_DEVICES": "0",
        "CUDA_DEVICE_MEMORY_LIMIT": str(4 << 30),
        "LD_PRELOAD": "/usr/local/vgpu/libvgpu.so",
    }


def test_hami_core_whole_gpus_need_no_isolation(tmp_path):
    allocated = {"gpu": [gpu(0, gpu_memory_ratio="100", gpu_memory="16Gi"), gpu(1, gpu_memory_ratio="100")]}
    response = respond(tmp_path, allocated, HAMI)
    assert response.env == {"NVIDIA_VISIBLE_DEVICES": "0,1"}
    assert response.mounts == []


@pytest.mark.parametrize("resources", [{}, {"gpu_memory_ratio": "50"}])
def test_hami_core_without_enough_resources_only_gets_visible_devices(tmp_path, resources):
    response = respond(tmp_path, {"gpu": [gpu(2, **resources)]}, HAMI)
    assert response.env == {"NVIDIA_VISIBLE_DEVICES": "2"}
    assert response.mounts == []


def test_shared_gpu_without_the_hami_label_gets_no_hami_env(tmp_path):
    response = respond(tmp_path, {"gpu": [gpu(0, gpu_memory_ratio="50", gpu_memory="8Gi")]})
    assert response.env == {"NVIDIA_VISIBLE_DEVICES": "0"}


def test_gate(tmp_path):
    host = FakeHost(tmp_path, "v2")
    assert GPUEnvInject().enabled(node_facts(host)) == (False, "feature gate GPUEnvInject is off")
