"""QoS strategies, one module each, registered in :mod:`koordlet.qosmanager.registry`."""
