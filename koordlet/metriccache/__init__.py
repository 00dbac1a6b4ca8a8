"""The koordlet's metric cache: labelled time series of collected samples, and static
node facts (CPU and NUMA information), queried by the reporters and QoS strategies."""

from koordlet.metriccache.cache import Key, KVStore, MetricCache, MetricKind, Rows, Sample
from koordlet.metriccache.query import AggregateResult, Aggregation, QueryError

__all__ = [
    "AggregateResult",
    "Aggregation",
    "KVStore",
    "Key",
    "MetricCache",
    "MetricKind",
    "QueryError",
    "Rows",
    "Sample",
]
