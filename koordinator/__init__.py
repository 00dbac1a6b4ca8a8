"""Koordinator in Python: the library shared by the node agent and the control plane.

It holds the API vocabulary (``koordinator.api``), the Kubernetes client
(``koordinator.kube``) and small process helpers; it imports neither ``koordlet`` nor
``controlplane``.
"""

__version__ = "0.1.0"
