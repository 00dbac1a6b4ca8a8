"""GPUEnvInject: the environment (and, for HAMi-core, the mounts) a GPU container should get.

Container level, from the pod's ``scheduling.koordinator.sh/device-allocated`` annotation:

* ``NVIDIA_VISIBLE_DEVICES``: the minors of the ``gpu`` allocations, comma-separated, in the
  annotation's order (``"0,2"``); nothing when the pod has no GPU;
* HAMi-core isolation, when the pod is labelled ``koordinator.sh/gpu-isolation-provider:
  HAMi-core`` and its first GPU's ``koordinator.sh/gpu-memory-ratio`` is below 100:
  ``CUDA_DEVICE_MEMORY_LIMIT`` = the first GPU's ``koordinator.sh/gpu-memory`` in bytes,
  ``CUDA_DEVICE_SM_LIMIT`` = its ``koordinator.sh/gpu-core`` when given, ``LD_PRELOAD`` = the
  HAMi-core library, and bind mounts (``rbind``) of that library and of ``/tmp/vgpulock``
  (HAMi issue 696).

Only a transport that creates containers can apply this: NRI and the runtime proxy put
``response.env`` and ``response.mounts`` into the container they create. The reconciler
cannot change the environment of a running container, so in reconciler mode the hook only
computes (nothing is written). An annotation that does not parse is logged and ignored,
with no environment (upstream fails the hook, which fails container creation under the
``Fail`` policy); a HAMi pod whose first GPU lacks the memory ratio or the memory is logged
and gets ``NVIDIA_VISIBLE_DEVICES`` only (upstream fails there too).

Left out: the GPU device nodes (``/dev/nvidia<minor>`` and the control devices) that newer
upstream also hands the runtime, and the ``HamiCoreVGPUMonitor`` cache directory (a host
directory per container plus ``CUDA_DEVICE_MEMORY_SHARED_CACHE``); the protocol carries no
devices yet and the directory is a host write this computation should not make.
"""

from __future__ import annotations

import logging

from koordinator.api.extension.annotations import AnnotationError
from koordinator.api.extension.device import (
    GPU_ISOLATION_PROVIDER_HAMI_CORE,
    LABEL_GPU_ISOLATION_PROVIDER,
    DeviceAllocation,
    get_device_allocations,
)
from koordinator.api.extension.resources import GPU_CORE, GPU_MEMORY, GPU_MEMORY_RATIO
from koordlet.runtimehooks.framework import HookBase
from koordlet.runtimehooks.protocol import ContainerContext, Mount

log = logging.getLogger(__name__)

NAME = "GPUEnvInject"
GPU = "gpu"
VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
#: upstream's default ``HAMICoreLibraryDirectoryPath``
HAMI_CORE_LIBRARY = "/usr/local/vgpu/libvgpu.so"
VGPU_LOCK_DIR = "/tmp/vgpulock"


def hami_env(devices: list[DeviceAllocation], library: str) -> tuple[dict[str, str], list[Mount]] | None:
    """HAMi-core's environment and mounts for the pod's GPUs; None when the first GPU is whole
    (ratio 100 or more); raises ValueError when its resources do not say enough."""
    resources = devices[0].resources
    ratio = resources.get(GPU_MEMORY_RATIO)
    if ratio is None:
        raise ValueError(f"the first GPU has no {GPU_MEMORY_RATIO}")
    if ratio.value() >= 100:
        return None
    memory = resources.get(GPU_MEMORY)
    if memory is None:
        raise ValueError(f"the first GPU has no {GPU_MEMORY}")
    env = {"CUDA_DEVICE_MEMORY_LIMIT": str(memory.value())}
    core = resources.get(GPU_CORE)
    if core is not None:
        env["CUDA_DEVICE_SM_LIMIT"] = str(core.value())
    env["LD_PRELOAD"] = library
    return env, [Mount(library, library), Mount(VGPU_LOCK_DIR, VGPU_LOCK_DIR)]


class GPUEnvInject(HookBase):
    NAME = NAME
    GATE = NAME

    def __init__(self, *, hami_core_library: str = HAMI_CORE_LIBRARY) -> None:
        self.hami_core_library = hami_core_library

    def container(self, ctx: ContainerContext) -> None:
        try:
            devices = get_device_allocations(ctx.pod.annotations).get(GPU) or []
        except (AnnotationError, ValueError) as err:
            log.warning("pod %s: device allocation annotation ignored: %s", ctx.pod.key, err)
            return
        if not devices:
            return
        ctx.response.env[VISIBLE_DEVICES] = ",".join(str(d.minor) for d in devices)
        if ctx.pod.labels.get(LABEL_GPU_ISOLATION_PROVIDER) != GPU_ISOLATION_PROVIDER_HAMI_CORE:
            return
        try:
            hami = hami_env(devices, self.hami_core_library)
        except ValueError as err:
            log.warning("pod %s: no HAMi-core isolation: %s", ctx.pod.key, err)
            return
        if hami is not None:
            env, mounts = hami
            ctx.response.env.update(env)
            ctx.response.mounts.extend(mounts)
