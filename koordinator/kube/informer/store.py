"""An indexed in-memory store of one consumer's records, keyed ``namespace/name``.

Indexers map a record to the index values it is filed under (namespace, node name, owner
uid, anything a consumer defines); lookups by index value are dictionary hits. Records
are whatever the consumer's transform produced: decoded objects or compact tuples.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Generic, TypeVar

T = TypeVar("T")
IndexFunc = Callable[[T], Iterable[str]]


class Store(Generic[T]):
    def __init__(self, indexers: Mapping[str, IndexFunc[T]] | None = None) -> None:
        self._items: dict[str, T] = {}
        self._indexers: dict[str, IndexFunc[T]] = dict(indexers or {})
        self._indices: dict[str, dict[str, set[str]]] = {name: {} for name in self._indexers}
        self._filed: dict[str, dict[str, tuple[str, ...]]] = {name: {} for name in self._indexers}

    # --- reads ---------------------------------------------------------------------

    def get(self, key: str) -> T | None:
        return self._items.get(key)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def keys(self) -> list[str]:
        return list(self._items)

    def values(self) -> list[T]:
        return list(self._items.values())

    def items(self) -> list[tuple[str, T]]:
        return list(self._items.items())

    @property
    def indexers(self) -> tuple[str, ...]:
        return tuple(self._indexers)

    def index_keys(self, index: str, value: str) -> set[str]:
        """Keys of the records filed under ``value`` in ``index``."""
        try:
            return set(self._indices[index].get(value, ()))
        except KeyError:
            raise KeyError(f"no indexer named {index!r}") from None

    def by_index(self, index: str, value: str) -> list[T]:
        return [self._items[k] for k in sorted(self.index_keys(index, value))]

    def index_values(self, index: str) -> list[str]:
        """Every value with at least one record in ``index``."""
        return sorted(v for v, keys in self._indices[index].items() if keys)

    # --- writes (the informer's) ------------------------------------------------------

    def add_indexer(self, name: str, func: IndexFunc[T]) -> None:
        if name in self._indexers:
            raise ValueError(f"indexer {name!r} already exists")
        self._indexers[name] = func
        self._indices[name] = {}
        self._filed[name] = {}
        for key, record in self._items.items():
            self._file(name, key, record)

    def _file(self, name: str, key: str, record: T) -> None:
        values = tuple(dict.fromkeys(self._indexers[name](record)))
        self._filed[name][key] = values
        index = self._indices[name]
        for value in values:
            index.setdefault(value, set()).add(key)

    def _unfile(self, name: str, key: str) -> None:
        index = self._indices[name]
        for value in self._filed[name].pop(key, ()):
            keys = index.get(value)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del index[value]

    def put(self, key: str, record: T) -> T | None:
        """Store ``record``; returns the record it replaced."""
        old = self._items.get(key)
        self._items[key] = record
        for name in self._indexers:
            if old is not None:
                self._unfile(name, key)
            self._file(name, key, record)
        return old

    def remove(self, key: str) -> T | None:
        old = self._items.pop(key, None)
        if old is not None:
            for name in self._indexers:
                self._unfile(name, key)
        return old


# --- index functions over decoded objects ------------------------------------------------


def _meta(obj: Any) -> Mapping[str, Any]:
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    return meta if isinstance(meta, Mapping) else {}


def index_by_namespace(obj: Any) -> list[str]:
    namespace = _meta(obj).get("namespace")
    return [namespace] if namespace else []


def index_by_node_name(obj: Any) -> list[str]:
    """Pods by ``spec.nodeName`` (unscheduled pods are not filed)."""
    spec = obj.get("spec") if isinstance(obj, Mapping) else None
    node = spec.get("nodeName") if isinstance(spec, Mapping) else None
    return [node] if node else []


def index_by_owner(obj: Any) -> list[str]:
    """By the uid of every owner reference."""
    return [
        str(ref["uid"])
        for ref in _meta(obj).get("ownerReferences") or ()
        if isinstance(ref, Mapping) and ref.get("uid")
    ]


def index_by_controller(obj: Any) -> list[str]:
    """By the uid of the controlling owner only."""
    return [
        str(ref["uid"])
        for ref in _meta(obj).get("ownerReferences") or ()
        if isinstance(ref, Mapping) and ref.get("controller") and ref.get("uid")
    ]


def index_by_label(label: str) -> Callable[[Any], list[str]]:
    def index(obj: Any) -> list[str]:
        value = (_meta(obj).get("labels") or {}).get(label)
        return [value] if value is not None else []

    return index
