"""The noderesource plug-ins by upstream name (``--noderesource-plugins`` selects among them).

Upstream registers six, all on by default; this release builds four. A disabled plug-in's
node resources (and labels) are neither calculated nor removed: they stay as they are.
"""

from __future__ import annotations

from controlplane.manager.controllers.noderesource import batch, mid
from controlplane.manager.controllers.noderesource.devices import GPU_NAME, RDMA_NAME

__all__ = ["PLUGINS", "UNIMPLEMENTED"]

#: the built plug-ins, in upstream's order of registration
PLUGINS = (mid.NAME, batch.NAME, GPU_NAME, RDMA_NAME)
#: upstream plug-ins this release does not have, and what is missing without them
UNIMPLEMENTED = {
    "CPUNormalization": "no cpu-normalization-ratio annotation; batch-cpu is not scaled",
    "ResourceAmplification": "no resource-amplification-ratio annotation",
}
