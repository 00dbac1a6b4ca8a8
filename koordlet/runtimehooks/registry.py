"""The runtime hooks this koordlet runs, in one explicit table."""

from __future__ import annotations

from koordlet.metrics import KoordletMetrics
from koordlet.runtimehooks.framework import HookBase
from koordlet.runtimehooks.hooks.batchresource import BatchResource
from koordlet.runtimehooks.hooks.cpunormalization import CPUNormalization
from koordlet.runtimehooks.hooks.cpuset import CPUSetAllocator
from koordlet.runtimehooks.hooks.gpu import GPUEnvInject
from koordlet.runtimehooks.hooks.groupidentity import GroupIdentity
from koordlet.runtimehooks.hooks.oomscore import OOMScoreAdj
from koordlet.runtimehooks.hooks.resctrl import Resctrl
from koordlet.runtimehooks.hooks.tc import TCNetworkQoS


def hooks(metrics: KoordletMetrics | None = None) -> list[HookBase]:
    """The hooks; ``metrics`` is where those that record metrics of their own record them."""
    return [
        BatchResource(),
        CPUNormalization(),
        CPUSetAllocator(),
        GroupIdentity(),
        OOMScoreAdj(metrics),
        Resctrl(),
        TCNetworkQoS(),
        GPUEnvInject(),
    ]
