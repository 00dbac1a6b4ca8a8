"""Kubernetes access shared by every process: async API client, informer, Lease leader election.

Everything here works on plain dicts decoded by orjson. The main entry points:

* :class:`~koordinator.kube.client.ApiClient` with a :class:`~koordinator.kube.config.ClusterConfig`
  from :func:`~koordinator.kube.config.in_cluster_config` or :func:`~koordinator.kube.config.load_config`;
* :class:`~koordinator.kube.resources.Resource` descriptors (built-ins in
  :mod:`koordinator.kube.resources`, CRDs via :class:`~koordinator.kube.discovery.Discovery`);
* :class:`~koordinator.kube.informer.InformerFactory` for shared, indexed caches;
* :class:`~koordinator.kube.leaderelection.LeaderElector` for Lease-based election.

The strict fake apiserver for tests lives in :mod:`testsupport.fake`; the real control
plane for the envtest tier in :mod:`testsupport.envtest`. Neither is imported here,
and nothing here imports the ``kubernetes`` package (see :mod:`koordinator.kube.kubeconfig`).
"""

from koordinator.kube.client import ApiClient, PatchType, Preconditions, PropagationPolicy, is_pdb_refusal
from koordinator.kube.config import ClusterConfig, ConfigError, in_cluster_config, load_config
from koordinator.kube.resources import Resource, object_key

__all__ = [
    "ApiClient",
    "ClusterConfig",
    "ConfigError",
    "PatchType",
    "Preconditions",
    "PropagationPolicy",
    "Resource",
    "in_cluster_config",
    "is_pdb_refusal",
    "load_config",
    "object_key",
]
