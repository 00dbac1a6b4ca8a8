"""Node-selection rules of ``slo-controller-config``, shared by the ConfigMap and node webhooks.

Five keys of the ConfigMap carry per-node entries (``nodeConfigs`` for
``colocation-config``, ``nodeStrategies`` for ``resource-threshold-config``,
``resource-qos-config``, ``cpu-burst-config`` and ``system-config``). The slo-controller
gives a node the *first* entry whose ``nodeSelector`` matches, so entries that can select
the same node make the outcome depend on list order. Two checks guard against that:

* :func:`overlapping_entries` -- entries whose selectors can match one node: each selector
  is expanded into the "virtual nodes" it describes (its ``matchLabels`` plus one value of
  every ``In`` expression, every combination) and an entry overlaps another when one of its
  virtual nodes matches the other's selector;
* :func:`entries_matching` -- the entries a real node's labels match.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from koordinator.api.jsonutil import JSONError, unmarshal
from koordinator.api.selectors import SelectorError, label_selector_matches
from koordinator.api.sloconfig.config import (
    COLOCATION_CONFIG_KEY,
    CPU_BURST_CONFIG_KEY,
    RESOURCE_QOS_CONFIG_KEY,
    RESOURCE_THRESHOLD_CONFIG_KEY,
    SYSTEM_CONFIG_KEY,
)

__all__ = ["CHECKED_KEYS", "entries_matching", "node_entries", "overlapping_entries"]

#: ConfigMap key -> the field holding its per-node entries.
CHECKED_KEYS: dict[str, str] = {
    COLOCATION_CONFIG_KEY: "nodeConfigs",
    RESOURCE_THRESHOLD_CONFIG_KEY: "nodeStrategies",
    RESOURCE_QOS_CONFIG_KEY: "nodeStrategies",
    CPU_BURST_CONFIG_KEY: "nodeStrategies",
    SYSTEM_CONFIG_KEY: "nodeStrategies",
}
#: Expanding a selector stops at this many virtual nodes (a selector with more combinations is rare).
MAX_VIRTUAL_NODES = 4096

Obj = dict[str, Any]


def node_entries(data: Mapping[str, str] | None, key: str) -> list[Obj]:
    """The per-node entries of one key (empty when the key is absent or unreadable)."""
    raw = (data or {}).get(key)
    if not raw:
        return []
    try:
        parsed = unmarshal(raw)
    except JSONError:
        return []
    entries = parsed.get(CHECKED_KEYS[key]) if isinstance(parsed, dict) else None
    return [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []


def entry_label(entry: Mapping[str, Any], index: int) -> str:
    name = entry.get("name")
    return f"{name!s}" if name else f"#{index}"


def _virtual_nodes(selector: Mapping[str, Any]) -> list[dict[str, str]]:
    base = {str(k): str(v) for k, v in (selector.get("matchLabels") or {}).items()}
    choices: list[list[tuple[str, str]]] = []
    for expression in selector.get("matchExpressions") or ():
        if not isinstance(expression, Mapping):
            continue
        key, operator = str(expression.get("key")), expression.get("operator")
        if operator == "In":
            choices.append([(key, str(v)) for v in expression.get("values") or ()])
        elif operator == "Exists":
            choices.append([(key, "")])
    nodes = []
    for combination in itertools.islice(itertools.product(*choices), MAX_VIRTUAL_NODES):
        labels = dict(base)
        labels.update(combination)
        nodes.append(labels)
    return nodes


def _matches(selector: Any, labels: Mapping[str, str]) -> bool:
    try:
        return bool(selector) and label_selector_matches(selector, labels)
    except SelectorError:
        return False


def overlapping_entries(entries: Sequence[Mapping[str, Any]]) -> list[tuple[int, int]]:
    """Pairs ``(i, j)``, ``i < j``, of entries whose selectors can select the same node."""
    expanded = [
        _virtual_nodes(e.get("nodeSelector") or {}) if isinstance(e.get("nodeSelector"), Mapping) else []
        for e in entries
    ]
    pairs = []
    for i, j in itertools.combinations(range(len(entries)), 2):
        first, second = entries[i].get("nodeSelector"), entries[j].get("nodeSelector")
        if any(_matches(second, node) for node in expanded[i]) or any(
            _matches(first, node) for node in expanded[j]
        ):
            pairs.append((i, j))
    return pairs


def entries_matching(entries: Sequence[Mapping[str, Any]], labels: Mapping[str, str]) -> list[int]:
    """Indexes of the entries whose selector matches these node labels."""
    return [i for i, entry in enumerate(entries) if _matches(entry.get("nodeSelector"), labels)]
