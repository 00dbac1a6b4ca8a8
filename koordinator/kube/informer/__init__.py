"""Informers: shared list-and-watch caches with per-consumer transforms, indexers and handlers."""

from koordinator.kube.informer.factory import InformerFactory
from koordinator.kube.informer.informer import Consumer, Informer, Tombstone
from koordinator.kube.informer.store import (
    IndexFunc,
    Store,
    index_by_controller,
    index_by_label,
    index_by_namespace,
    index_by_node_name,
    index_by_owner,
)

__all__ = [
    "Consumer",
    "IndexFunc",
    "Informer",
    "InformerFactory",
    "Store",
    "Tombstone",
    "index_by_controller",
    "index_by_label",
    "index_by_namespace",
    "index_by_node_name",
    "index_by_owner",
]
