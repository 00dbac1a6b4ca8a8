"""Checks of ``slo-controller-config``, shared by the ConfigMap and node webhooks.

Five keys of the ConfigMap carry per-node entries (``nodeConfigs`` for
``colocation-config``, ``nodeStrategies`` for ``resource-threshold-config``,
``resource-qos-config``, ``system-config`` and ``cpu-burst-config``). The slo-controller
gives a node the *first* entry whose ``nodeSelector`` matches, so entries that can select
the same node make the outcome depend on list order.

A key is checked as upstream's checkers do, in their order (the keys above, in that
order), stopping at the first problem: the JSON parses (and nests at most
:data:`~koordinator.api.sloconfig.config.MAX_JSON_DEPTH` levels deep: a deeper value is
refused as ``ParseConfigFail`` with ``err: nested deeper than 100 levels``, never answered
with a 500; a key that differs from a field's name only in case names that field, as in
Go); every entry has a non-empty,
valid ``nodeSelector``; the values are in range; with ``--node-strategy-name-need-check``
every entry has a unique name; no two entries' selectors can select one node
(:meth:`KeyCheck.overlap`); and, against real nodes, no node is selected by two entries
(:meth:`KeyCheck.node_conflict`).

Problems are reported in upstream's format, a JSON object between ``___`` markers
(``___{"reason":"NodeStrategiesOverlap","message":{...}}___``), with its reasons
(``ParseConfigFail``, ``ConfigParamInvalid``, ``NodeStrategiesOverlap`` and
``ExistNodeConfict``, sic) and wording. Where the text comes from Go libraries it is ours:
the JSON decoder's error after ``err:``, a malformed selector printed as JSON, and the
range checks, which upstream translates from its Go struct tags
(``{"ColocationCfg.ColocationStrategy.CPUReclaimThresholdPercent": "... must be 100 or
less"}``) and which are keyed here by the ConfigMap's JSON path.

Selectors are expanded into the "virtual nodes" they describe to find overlaps: the
``matchLabels`` plus one value of every ``In`` expression, every combination (upstream
pairs the i-th values of all expressions only, which misses overlaps).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from koordinator.api.jsonutil import JSONError
from koordinator.api.selectors import SelectorError, label_selector_matches, validate_label_selector
from koordinator.api.sloconfig.config import (
    COLOCATION_CONFIG_KEY,
    CONFIG_KEYS,
    CPU_BURST_CONFIG_KEY,
    RESOURCE_QOS_CONFIG_KEY,
    RESOURCE_THRESHOLD_CONFIG_KEY,
    SYSTEM_CONFIG_KEY,
    decode_config_value,
    match_field_names,
    validate_config_data,
)

__all__ = ["CHECKED_KEYS", "KeyCheck", "go_json", "json_error"]

#: ConfigMap key -> the field holding its per-node entries, in upstream's checker order.
CHECKED_KEYS: dict[str, str] = {
    COLOCATION_CONFIG_KEY: "nodeConfigs",
    RESOURCE_THRESHOLD_CONFIG_KEY: "nodeStrategies",
    RESOURCE_QOS_CONFIG_KEY: "nodeStrategies",
    SYSTEM_CONFIG_KEY: "nodeStrategies",
    CPU_BURST_CONFIG_KEY: "nodeStrategies",
}
#: How upstream's parse errors name each key's config.
_CONFIG_NAMES = {
    COLOCATION_CONFIG_KEY: "colocation",
    RESOURCE_THRESHOLD_CONFIG_KEY: "resourceThreshold",
    RESOURCE_QOS_CONFIG_KEY: "ResourceQOS",
    SYSTEM_CONFIG_KEY: "System",
    CPU_BURST_CONFIG_KEY: "CpuBurst",
}
#: Expanding a selector stops at this many virtual nodes (a selector with more combinations is rare).
MAX_VIRTUAL_NODES = 4096

PARSE_FAIL = "ParseConfigFail"
PARAM_INVALID = "ConfigParamInvalid"
OVERLAP = "NodeStrategiesOverlap"
EXIST_NODE_CONFLICT = "ExistNodeConfict"

Obj = dict[str, Any]

_GO_ESCAPES = str.maketrans(
    {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
)


def go_json(value: Any) -> str:
    """``json.Marshal``: compact, non-ASCII kept, HTML characters escaped (dict order kept)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).translate(_GO_ESCAPES)


def json_error(reason: str, message: Any) -> str:
    """Upstream's ``JsonFormatError`` text: ``___{"reason":...,"message":...}___``."""
    return f"___{go_json({'reason': reason, 'message': message})}___"


def _conflict(key: str, names: Sequence[str], nodes: Sequence[str] = ()) -> Obj:
    message: Obj = {"config": key}
    if names:
        message["strategies"] = list(names)
    if nodes:
        message["exampleNodes"] = list(nodes)
    return message


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


def _entry_name(entry: Mapping[str, Any]) -> str:
    name = entry.get("name")
    return name if isinstance(name, str) else ""


@dataclass(frozen=True)
class KeyCheck:
    """One key's entries once its JSON and selectors are known to be good."""

    key: str
    entries: tuple[Obj, ...]

    @classmethod
    def parse(cls, key: str, text: str, config_map: str) -> tuple[KeyCheck | None, str | None]:
        """The parse and selector checks (upstream's checker init); ``(check, None)`` or ``(None, problem)``.

        ``config_map`` is ``namespace/name``, for the parse error.
        """
        try:
            data = decode_config_value(text)
            if not isinstance(data, dict):
                raise JSONError(f"cannot unmarshal {type(data).__name__} into a {key} object")
        except JSONError as exc:
            return None, json_error(
                PARSE_FAIL,
                f"Failed to parse {_CONFIG_NAMES[key]} config in configmap {config_map}, err: {exc}",
            )
        # keys differing from a field's name only in case name that field, as in Go
        data = match_field_names(data, CONFIG_KEYS[key])
        raw = data.get(CHECKED_KEYS[key])
        entries = tuple(e for e in raw if isinstance(e, dict)) if isinstance(raw, list) else ()
        for entry in entries:
            selector = entry.get("nodeSelector")
            if not isinstance(selector, Mapping) or not (
                selector.get("matchLabels") or selector.get("matchExpressions")
            ):
                return None, json_error(
                    PARAM_INVALID,
                    f"nodeConfigs NodeSelector must not empty error! configType: {key},"
                    f"nodeConfig name:{_entry_name(entry)}",
                )
            try:
                validate_label_selector(selector)
            except SelectorError as exc:
                return None, json_error(
                    PARAM_INVALID,
                    f"failed to parse node selector {go_json(selector)},configType: {key},"
                    f"nodeConfig name:{_entry_name(entry)}, err: {exc}",
                )
        return cls(key, entries), None

    def values(self, text: str) -> str | None:
        """The range and type checks of the key's values."""
        errors = validate_config_data({self.key: text})
        if not errors:
            return None
        found: dict[str, str] = {}
        for error in errors:
            found.setdefault(error.field, error.body())
        return json_error(PARAM_INVALID, dict(sorted(found.items())))

    def names(self) -> str | None:
        """Every entry named, and no name twice (``--node-strategy-name-need-check``)."""
        seen: set[str] = set()
        for entry in self.entries:
            name = _entry_name(entry)
            if not name:
                return json_error(PARAM_INVALID, f"nodeConfig Name need! configType:{self.key}")
            if name in seen:
                # "confilict" and the trailing space are upstream's.
                return json_error(
                    PARAM_INVALID,
                    f"nodeConfig Name confilict, configType:{self.key},nodeConfig Name:{name}! ",
                )
            seen.add(name)
        return None

    def _matching(self, labels: Mapping[str, str]) -> list[str]:
        return [_entry_name(e) for e in self.entries if label_selector_matches(e["nodeSelector"], labels)]

    def overlap(self) -> str | None:
        """Entries whose selectors can select one node: all those matching the first such virtual node."""
        for entry in self.entries:
            for labels in _virtual_nodes(entry["nodeSelector"]):
                if len(names := self._matching(labels)) > 1:
                    return json_error(OVERLAP, _conflict(self.key, names))
        return None

    def node_conflict(self, node: Mapping[str, Any]) -> str | None:
        """A real node that two entries select (only checked when the key has several entries)."""
        if len(self.entries) < 2:
            return None
        meta = node.get("metadata") or {}
        labels = meta.get("labels") or {}
        if len(names := self._matching(labels)) > 1:
            return json_error(EXIST_NODE_CONFLICT, _conflict(self.key, names, [str(meta.get("name") or "")]))
        return None


def parsed_keys(data: Mapping[str, str], config_map: str, keys: Iterable[str]) -> list[KeyCheck]:
    """The keys among ``keys`` whose value parses with good selectors (the others are skipped)."""
    checks = []
    for key in keys:
        text = data.get(key)
        if text:
            check, _ = KeyCheck.parse(key, text, config_map)
            if check is not None:
                checks.append(check)
    return checks
