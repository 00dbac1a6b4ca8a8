"""The noderesource plug-ins by upstream name (``--noderesource-plugins`` selects among them).

Upstream registers six, all on by default, and so does this release. A disabled plug-in's
node resources, labels and annotations are neither calculated nor removed: they stay as
they are.
"""

from __future__ import annotations

from controlplane.manager.controllers.noderesource import amplification, batch, mid, normalization
from controlplane.manager.controllers.noderesource.devices import GPU_NAME, RDMA_NAME

__all__ = ["PLUGINS", "UNIMPLEMENTED"]

#: the built plug-ins, in upstream's order of registration
PLUGINS = (normalization.NAME, amplification.NAME, mid.NAME, batch.NAME, GPU_NAME, RDMA_NAME)
#: upstream plug-ins this release does not have, and what is missing without them
UNIMPLEMENTED: dict[str, str] = {}
