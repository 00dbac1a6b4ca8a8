"""Prometheus metrics shared by the koordlet and koord-manager: the text exposition
(:mod:`koordinator.metrics.exposition`) both of their ``/metrics`` endpoints write."""
