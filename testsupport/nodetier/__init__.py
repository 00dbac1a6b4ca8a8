"""A real single-node Kubernetes on this machine: the ``node`` test tier and ``make cluster``.

``hack/node-tier.sh`` builds the kubelet, kube-controller-manager, kube-proxy, containerd,
runc and the CNI plug-ins from their Go modules and makes the pause and busybox images;
``hack/envtest.sh`` builds etcd and kube-apiserver. :class:`Node` starts all of them in fresh
pid, mount and network namespaces (see :mod:`testsupport.nodetier.node`) and stops them
leaving nothing behind; ``python -m testsupport.nodetier up|down|status`` keeps one running
for a user.
"""

from testsupport.nodetier.cluster import Node, NodeTierError, provision_node_binaries, sweep
from testsupport.nodetier.image import BUSYBOX_IMAGE, SANDBOX_IMAGE

__all__ = ["BUSYBOX_IMAGE", "SANDBOX_IMAGE", "Node", "NodeTierError", "provision_node_binaries", "sweep"]
