"""What one node of the node tier is: names, addresses, directories and binaries.

The host side (:mod:`testsupport.nodetier.cluster`) writes a :class:`NodeSpec` as JSON into
the node's scratch directory; the node's PID 1 (:mod:`testsupport.nodetier.node`) reads it.
Every node has its own scratch directory, cgroup root and network namespace, so the same
addresses serve every node on the machine.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

#: The node's address, on a veth inside its network namespace (the kubelet refuses a
#: loopback node IP and this kernel has no dummy interfaces).
NODE_IP = "10.201.0.1"
NODE_GATEWAY = "10.201.0.254"
POD_CIDR = "10.88.0.0/24"
SERVICE_CIDR = "10.96.0.0/16"
CNI_BRIDGE = "koord-cni0"
NODE_VETH = ("koord-node", "koord-peer")
#: The name of the node tier's cgroup roots in every hierarchy: ``/<prefix><id>``.
CGROUP_PREFIX = "koord-node-"


@dataclass(frozen=True)
class NodeSpec:
    name: str
    #: the scratch directory: logs, state, certificates; removed when the node stops
    workdir: str
    #: hack/node-tier.sh's output (bin/, cni-bin/, images/)
    node_bin: str
    #: hack/envtest.sh's output (etcd, kube-apiserver)
    envtest_bin: str
    #: the apiserver's port, the same inside the node and on the host's loopback (relayed)
    api_port: int
    #: the kubelet's cgroup root, e.g. ``/koord-node-1a2b``
    cgroup_root: str
    #: the descriptor of the host-side listening socket that relays to the apiserver
    relay_fd: int
    #: start kube-proxy (needs nft in PATH)
    kube_proxy: bool = True

    @property
    def dir(self) -> Path:
        return Path(self.workdir)

    @property
    def bin(self) -> Path:
        return Path(self.node_bin) / "bin"

    @property
    def cni_bin(self) -> Path:
        return Path(self.node_bin) / "cni-bin"

    @property
    def images(self) -> Path:
        return Path(self.node_bin) / "images"

    @property
    def pki(self) -> Path:
        return self.dir / "cp" / "pki"

    @property
    def admin_kubeconfig(self) -> Path:
        return self.dir / "cp" / "admin.kubeconfig"

    @property
    def containerd_socket(self) -> Path:
        return self.dir / "containerd" / "containerd.sock"

    @property
    def nri_socket(self) -> Path:
        return self.dir / "nri" / "nri.sock"

    @property
    def ctr(self) -> list[str]:
        """``ctr`` on the node's containerd, in the kubelet's ``k8s.io`` namespace."""
        return [str(self.bin / "ctr"), "--address", str(self.containerd_socket), "-n", "k8s.io"]

    @property
    def kubelet_root(self) -> Path:
        return self.dir / "kubelet" / "root"

    @property
    def audit_log(self) -> Path:
        """The apiserver's audit log: every request of a ServiceAccount of
        ``koordinator-system`` (the installed components), at the Metadata level."""
        return self.dir / "logs" / "audit.log"

    @property
    def ready_file(self) -> Path:
        """Written by the node once its kubelet is Ready: JSON with the node's facts."""
        return self.dir / "ready.json"

    @property
    def failed_file(self) -> Path:
        """Written by the node when it could not start: the reason."""
        return self.dir / "failed.txt"

    def save(self) -> Path:
        path = self.dir / "spec.json"
        path.write_text(json.dumps(asdict(self), indent=2))
        return path

    @classmethod
    def load(cls, path: Path) -> NodeSpec:
        return cls(**json.loads(path.read_text()))
