"""LowNodeLoad: move pods off nodes whose real usage (NodeMetric) is over the high
thresholds onto the nodes under the low ones (upstream's
``pkg/descheduler/framework/plugins/loadaware``).

:mod:`.usage` computes each node's usage and thresholds and classifies the nodes,
:mod:`.anomaly` keeps the per-node detectors that make a node a source only after several
consecutive rounds over its thresholds, and :mod:`.plugin` runs a round: classify, budget,
choose pods (in :mod:`controlplane.descheduler.sorting` order), evict through the framework.
"""
