"""The runtime hooks this koordlet runs, in one explicit table."""

from __future__ import annotations

from koordlet.runtimehooks.framework import HookBase
from koordlet.runtimehooks.hooks.batchresource import BatchResource
from koordlet.runtimehooks.hooks.cpuset import CPUSetAllocator
from koordlet.runtimehooks.hooks.gpu import GPUEnvInject
from koordlet.runtimehooks.hooks.groupidentity import GroupIdentity
from koordlet.runtimehooks.hooks.oomscore import OOMScoreAdj
from koordlet.runtimehooks.hooks.resctrl import Resctrl
from koordlet.runtimehooks.hooks.tc import TCNetworkQoS


def hooks() -> list[HookBase]:
    return [
        BatchResource(),
        CPUSetAllocator(),
        GroupIdentity(),
        OOMScoreAdj(),
        Resctrl(),
        TCNetworkQoS(),
        GPUEnvInject(),
    ]
