"""koord-manager's controllers: the slo-controller (NodeMetric, NodeSLO, NodeResource) and quotaprofile.

They run on the :mod:`controlplane.reactor` and only while this replica holds the leader
lease. :mod:`.sloconfig` watches the ``slo-controller-config`` ConfigMap for the three
slo-controller ones; :mod:`.noderesource` holds the batch and mid calculation, which
``koord-manager explain-node`` runs too, and the device plug-ins (GPU and RDMA resources
from Device objects); :mod:`.quotaprofile` keeps one root ElasticQuota
per ElasticQuotaProfile.
"""
