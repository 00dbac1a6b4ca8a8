"""koord-scheduler: a scheduling framework with Koordinator's plug-ins.

LoadAware, NodeNUMAResource, Reservation, ElasticQuota, Coscheduling and DeviceShare.
"""
