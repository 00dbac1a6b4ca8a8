"""The node's daemons and their configuration files: containerd (NRI on), the CNI network,
the kubelet, kube-controller-manager, kube-scheduler and kube-proxy.

Every path a daemon writes is in the node's scratch directory; what this machine lacks is
worked around here, each with its reason:

* no ``CAP_SYS_RESOURCE``: containerd clamps ``oom_score_adj`` to its own
  (``restrict_oom_score_adj``), otherwise runc cannot give the pause container -998;
* no registry: the sandbox image is pinned to the locally imported pause image, the
  kubelet never collects images;
* no iptables: the bridge network does no masquerading; kube-proxy uses nftables and
  leaves the (global) conntrack sysctls alone.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from testsupport.envtest.certs import Credentials
from testsupport.nodetier.image import SANDBOX_IMAGE
from testsupport.nodetier.spec import CNI_BRIDGE, NODE_IP, POD_CIDR, NodeSpec


def kubeconfig(path: Path, server: str, ca: Path, cert: Path, key: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {"name": "node", "cluster": {"server": server, "certificate-authority": str(ca)}}
                ],
                "users": [
                    {"name": "user", "user": {"client-certificate": str(cert), "client-key": str(key)}}
                ],
                "contexts": [{"name": "node", "context": {"cluster": "node", "user": "user"}}],
                "current-context": "node",
            },
            indent=2,
        )
    )
    return path


def containerd_config(spec: NodeSpec) -> Path:
    base = spec.dir / "containerd"
    for sub in ("root", "state", "opt"):
        (base / sub).mkdir(parents=True, exist_ok=True)
    for sub in ("plugins", "conf.d"):
        (spec.dir / "nri" / sub).mkdir(parents=True, exist_ok=True)
    net_d = spec.dir / "cni" / "net.d"
    net_d.mkdir(parents=True, exist_ok=True)
    (net_d / "10-koordinator.conflist").write_text(
        json.dumps(
            {
                "cniVersion": "1.0.0",
                "name": "koordinator",
                "plugins": [
                    {
                        "type": "bridge",
                        "bridge": CNI_BRIDGE,
                        "isGateway": True,
                        "ipMasq": False,
                        "hairpinMode": True,
                        "ipam": {
                            "type": "host-local",
                            "dataDir": str(spec.dir / "cni" / "ipam"),
                            "ranges": [[{"subnet": POD_CIDR}]],
                            "routes": [{"dst": "0.0.0.0/0"}],
                        },
                    }
                ],
            },
            indent=2,
        )
    )
    config = base / "config.toml"
    runtime = 'plugins."io.containerd.cri.v1.runtime"'
    config.write_text(
        f"""version = 3
root = "{base}/root"
state = "{base}/state"

[grpc]
  address = "{spec.containerd_socket}"
[ttrpc]
  address = "{spec.containerd_socket}.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = "{base}/opt"

[plugins."io.containerd.nri.v1.nri"]
  disable = false
  socket_path = "{spec.nri_socket}"
  plugin_path = "{spec.dir}/nri/plugins"
  plugin_config_path = "{spec.dir}/nri/conf.d"
  plugin_registration_timeout = "5s"
  plugin_request_timeout = "2s"

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "{SANDBOX_IMAGE}"

[{runtime}]
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  enable_cdi = false
  [{runtime}.containerd]
    default_runtime_name = "runc"
    [{runtime}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [{runtime}.containerd.runtimes.runc.options]
        BinaryName = "{spec.bin}/runc"
        SystemdCgroup = false
  [{runtime}.cni]
    bin_dirs = ["{spec.cni_bin}"]
    conf_dir = "{net_d}"
    max_conf_num = 1
"""
    )
    return config


def containerd_argv(spec: NodeSpec) -> list[str]:
    return [str(spec.bin / "containerd"), "--config", str(containerd_config(spec))]


def path_with_node_bin(spec: NodeSpec) -> str:
    """containerd finds its shim on PATH."""
    return f"{spec.bin}:{os.environ.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}"


def kubelet_argv(
    spec: NodeSpec, creds: Credentials, kubelet_kubeconfig: Path, runtime_endpoint: Path | None = None
) -> list[str]:
    """The kubelet's command line and config, talking to containerd (or ``runtime_endpoint``:
    koord-runtime-proxy in front of it)."""
    base = spec.dir / "kubelet"
    (spec.dir / "pod-logs").mkdir(parents=True, exist_ok=True)
    config = base / "config.yaml"
    config.write_text(
        json.dumps(
            {
                "apiVersion": "kubelet.config.k8s.io/v1beta1",
                "kind": "KubeletConfiguration",
                "cgroupDriver": "cgroupfs",
                "cgroupRoot": spec.cgroup_root,
                "containerRuntimeEndpoint": f"unix://{runtime_endpoint or spec.containerd_socket}",
                "failSwapOn": False,
                "address": "0.0.0.0",
                "port": 10250,
                "readOnlyPort": 10255,
                "healthzBindAddress": "127.0.0.1",
                "healthzPort": 10248,
                "authentication": {
                    "anonymous": {"enabled": False},
                    "webhook": {"enabled": True},
                    "x509": {"clientCAFile": str(creds.ca_cert)},
                },
                "authorization": {"mode": "Webhook"},
                "podLogsDir": str(spec.dir / "pod-logs"),
                "volumePluginDir": str(base / "volume-plugins"),
                "makeIPTablesUtilChains": False,
                # kept off the host by the shadowed sysctls (isolation.shadow_host_paths)
                "protectKernelDefaults": False,
                "evictionHard": {
                    "memory.available": "100Mi",
                    "nodefs.available": "1%",
                    "imagefs.available": "1%",
                    "nodefs.inodesFree": "1%",
                },
                "imageGCHighThresholdPercent": 100,
                "imageGCLowThresholdPercent": 99,
                "serializeImagePulls": False,
                "resolvConf": "/etc/resolv.conf",
                "podCIDR": POD_CIDR,
                "nodeStatusUpdateFrequency": "5s",
                "syncFrequency": "5s",
            },
            indent=2,
        )
    )
    return [
        str(spec.bin / "kubelet"),
        f"--config={config}",
        f"--kubeconfig={kubelet_kubeconfig}",
        f"--root-dir={spec.kubelet_root}",
        f"--cert-dir={base / 'pki'}",
        f"--hostname-override={spec.name}",
        f"--node-ip={NODE_IP}",
        "--v=2",
    ]


def controller_manager_argv(spec: NodeSpec, creds: Credentials) -> list[str]:
    return [
        str(spec.bin / "kube-controller-manager"),
        f"--kubeconfig={spec.admin_kubeconfig}",
        "--leader-elect=false",
        "--secure-port=0",
        f"--service-account-private-key-file={creds.sa_private_key}",
        f"--root-ca-file={creds.ca_cert}",
        f"--cluster-signing-cert-file={creds.ca_cert}",
        f"--cluster-signing-key-file={creds.ca_key}",
        "--controllers=*",
        "--v=1",
    ]


def scheduler_argv(spec: NodeSpec) -> list[str]:
    """kube-scheduler as the node's default scheduler (Deployments, DaemonSets)."""
    return [
        str(spec.bin / "kube-scheduler"),
        f"--kubeconfig={spec.admin_kubeconfig}",
        f"--authentication-kubeconfig={spec.admin_kubeconfig}",
        f"--authorization-kubeconfig={spec.admin_kubeconfig}",
        "--leader-elect=false",
        "--bind-address=127.0.0.1",
        "--secure-port=10259",
        "--v=1",
    ]


def kube_proxy_argv(spec: NodeSpec) -> list[str]:
    config = spec.dir / "kube-proxy.yaml"
    config.write_text(
        json.dumps(
            {
                "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
                "kind": "KubeProxyConfiguration",
                "clientConnection": {"kubeconfig": str(spec.admin_kubeconfig)},
                "mode": "nftables",
                "hostnameOverride": spec.name,
                "clusterCIDR": POD_CIDR,
                "bindAddress": NODE_IP,
                "healthzBindAddress": "127.0.0.1:10256",
                "metricsBindAddress": "127.0.0.1:10249",
                # the conntrack table size and timeouts are global: left as they are
                "conntrack": {
                    "maxPerCore": 0,
                    "min": 0,
                    "tcpEstablishedTimeout": "0s",
                    "tcpCloseWaitTimeout": "0s",
                },
            },
            indent=2,
        )
    )
    return [str(spec.bin / "kube-proxy"), f"--config={config}", "--v=1"]
