"""Test support that the wheel does not install: the strict fake apiserver and the envtest control plane.

:mod:`testsupport.fake` serves the Kubernetes REST API in memory for unit tests;
:mod:`testsupport.envtest` starts a real kube-apiserver and etcd for the envtest tier. Both live
outside the installed packages (``pyproject.toml`` packages only ``koordinator``, ``koordlet``
and ``controlplane``), and the import contracts forbid those packages to import them.
"""
