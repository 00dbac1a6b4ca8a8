"""A real kube-apiserver and etcd on loopback, for the envtest test tier and benchmarks.

``hack/envtest.sh`` builds the two binaries from their Go modules; :class:`ControlPlane`
generates the certificates and keys they need, starts etcd and kube-apiserver on free
loopback ports (RBAC and the default admission plug-ins on), waits for ``/readyz`` and
stops them. It can kill and restart the apiserver to inject faults.
"""

from testsupport.envtest.certs import Credentials, generate_credentials
from testsupport.envtest.controlplane import (
    ApiServerProcess,
    ControlPlane,
    ControlPlaneError,
    find_binaries,
    provision_binaries,
)

__all__ = [
    "ApiServerProcess",
    "ControlPlane",
    "ControlPlaneError",
    "Credentials",
    "find_binaries",
    "generate_credentials",
    "provision_binaries",
]
