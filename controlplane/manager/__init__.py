"""koord-manager: admission webhooks and the slo-controller.

It turns node usage into batch resources and builds each node's NodeSLO.
"""
