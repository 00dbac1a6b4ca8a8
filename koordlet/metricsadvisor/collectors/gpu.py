"""GPUDeviceCollector (upstream's ``GPU`` device collector): each NVIDIA GPU's usage.

With the ``Accelerators`` gate, every ``--collect-res-used-interval`` it asks NVML
(:func:`koordlet.system.devices.nvml.usage`) for each GPU's compute processes and writes,
per GPU (labels ``gpu_minor``, ``gpu_device_uuid``): ``node_gpu_core_usage``, the summed SM
utilisation of its processes in percent (100 = one whole GPU; upstream's ``collectGPUUsage``,
not the device-wide utilisation rate), ``node_gpu_memory_usage``, their used memory in
bytes, and ``node_gpu_memory_total``, the GPU's memory in bytes (upstream defines the kind
but keeps the total in its device inventory instead). The NodeMetric reporter averages
them over its window (:meth:`GPUDeviceCollector.gpus` says which GPUs to ask for).

NVML is initialised once, at the first round, and held (:func:`nvml.hold`) until the runner
stops and calls :meth:`close`, so the per-second calls do not load the library each time.
As upstream, an NVML that cannot be initialised is not tried again: the collector then
writes nothing. It counts as started after its first round whatever it found (no GPUs, or
no NVML), so the agent does not wait for it. The NVML calls never raise.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from koordlet.metriccache import Sample, kinds
from koordlet.metricsadvisor.framework import CollectContext, CollectorBase
from koordlet.system.devices import nvml

log = logging.getLogger(__name__)


class GPUDeviceCollector(CollectorBase):
    NAME = "GPU"

    def __init__(self, ctx: CollectContext) -> None:
        super().__init__(ctx)
        #: shuts NVML down again; None before the first round and once closed
        self._release: Callable[[], None] | None = None
        #: NVML could not be initialised (or the collector was closed): nothing more is asked
        self._off = False
        self._seen: dict[str, int] = {}  # uuid -> minor, every GPU sampled since start
        self._gpus: tuple[tuple[int, str], ...] = ()
        self._reason = ""

    def enabled(self) -> bool:
        return self.ctx.gates.enabled("Accelerators")

    def gpus(self) -> tuple[tuple[int, str], ...]:
        """(minor, uuid) of every GPU sampled since start, by minor (safe from any thread)."""
        return self._gpus

    def collect(self, now: float) -> None:
        if self._release is None and not self._off:
            self._release = nvml.hold()
            if self._release is None:  # the reason was logged by nvml
                self._off = True
                log.info("GPU usage is not collected: NVML could not be initialised (not retried)")
        if self._off:
            self.started = True
            return
        used, reason = nvml.usage()
        if reason != self._reason:  # failures are logged by nvml, once each
            log.log(logging.DEBUG if self._reason else logging.INFO, "GPU usage: %s", reason)
            self._reason = reason
        samples: list[Sample] = []
        for gpu in used:
            labels = {"gpu_minor": str(gpu.minor), "gpu_device_uuid": gpu.uuid}
            samples.append(kinds.NODE_GPU_CORE_USAGE.sample(gpu.core_percent, now, **labels))
            samples.append(kinds.NODE_GPU_MEMORY_USAGE.sample(gpu.memory_used, now, **labels))
            samples.append(kinds.NODE_GPU_MEMORY_TOTAL.sample(gpu.memory_total, now, **labels))
        if samples:
            self.ctx.cache.append(samples)
        if any(self._seen.get(gpu.uuid) != gpu.minor for gpu in used):
            self._seen.update((gpu.uuid, gpu.minor) for gpu in used)
            self._gpus = tuple(sorted((minor, uuid) for uuid, minor in self._seen.items()))
        self.started = True

    def close(self) -> None:
        """Shut NVML down (the runner calls this after the last round)."""
        self._off = True
        release, self._release = self._release, None
        if release is not None:
            release()
