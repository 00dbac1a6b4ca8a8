"""Parsing, validation and per-node resolution of the ``slo-controller-config`` ConfigMap.

:func:`parse_config` reads the ConfigMap ``data``. Each key is parsed and validated on its
own; a key that fails keeps its previous value (or the default) and reports
:class:`~koordinator.api.schema.FieldError` objects whose field starts with the key
(``resource-threshold-config.clusterStrategy.cpuSuppressThresholdPercent``). An object key
that differs from a field's name only in case names that field, as with Go's decoder
(:func:`match_field_names`). Validation uses the same schema machinery as the CRDs (types,
ranges, enums, ordering rules) plus the ConfigMap rules: amplification ratios are at least
1, and (optionally) names are required and unique.

A node entry whose ``nodeSelector`` is missing or malformed selects no node, as in
upstream's controllers: :func:`parse_config` keeps the key, describes the entry in
``notes``, and the cluster strategy and the other entries apply. An empty selector
(``{}``) selects every node (also described). The webhook refuses both
(``strict_selectors``, the rule of :func:`validate_config_data`): every entry needs a
non-empty, valid ``nodeSelector``.

The ``*_for_node`` functions give the effective values for one node dict:
defaults ⊕ cluster strategy, then ⊕ the first node entry whose selector matches the node's
labels. For colocation, an invalid merged node strategy falls back to the cluster strategy,
then the node annotation ``node.koordinator.sh/colocation-strategy`` is overlaid and the
ratio labels (``cpu-reclaim-ratio`` ...) set percentages. :func:`node_slo_spec_for_node` and
:func:`node_metric_spec_for_node` assemble what the nodeslo and nodemetric controllers write.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from koordinator.api.extension.annotations import annotations_of, labels_of
from koordinator.api.extension.node import (
    ANNOTATION_NETWORK_BANDWIDTH,
    ANNOTATION_NODE_COLOCATION_STRATEGY,
    LABEL_CPU_RECLAIM_RATIO,
    LABEL_MEMORY_RECLAIM_RATIO,
    LABEL_MID_STATIC_CPU_RESERVED_RATIO,
    LABEL_MID_STATIC_MEMORY_RESERVED_RATIO,
)
from koordinator.api.goparse import GoParseError, parse_float
from koordinator.api.jsonutil import JSONError, nested_deeper, unmarshal
from koordinator.api.model import Model, ModelError, TypeDesc, model_fields
from koordinator.api.openapi import model_schema
from koordinator.api.quantity import Quantity, QuantityError
from koordinator.api.schema.errors import ErrorType, FieldError
from koordinator.api.schema.structural import NO_FIELD, prune, validate
from koordinator.api.selectors import SelectorError, label_selector_matches, validate_label_selector
from koordinator.api.sloconfig.merge import merge
from koordinator.api.sloconfig.nodeslo import (
    default_cpu_burst_strategy,
    default_resource_threshold_strategy,
    default_system_strategy,
)
from koordinator.api.sloconfig.types import (
    ColocationCfg,
    ColocationStrategy,
    CPUBurstCfg,
    CPUNormalizationCfg,
    CPUNormalizationStrategy,
    HostApplicationCfg,
    ResourceAmplificationCfg,
    ResourceAmplificationStrategy,
    ResourceQOSCfg,
    ResourceThresholdCfg,
    SystemCfg,
)
from koordinator.api.types.core import LabelSelector
from koordinator.api.types.slo import (
    AggregatePolicy,
    CPUBurstStrategy,
    HostApplicationSpec,
    NodeMetricCollectPolicy,
    NodeMetricSpec,
    NodeSLOSpec,
    ResourceQOSStrategy,
    ResourceThresholdStrategy,
    SystemStrategy,
)

__all__ = [
    "COLOCATION_CONFIG_KEY",
    "CONFIG_KEYS",
    "CONFIG_NAME",
    "CONFIG_NAMESPACE",
    "CPU_BURST_CONFIG_KEY",
    "CPU_NORMALIZATION_CONFIG_KEY",
    "HOST_APPLICATION_CONFIG_KEY",
    "MAX_JSON_DEPTH",
    "NODE_SLO_SPEC_FIELDS",
    "REASON_COLOCATION_INVALID",
    "REASON_SLO_INVALID",
    "RESOURCE_AMPLIFICATION_CONFIG_KEY",
    "RESOURCE_QOS_CONFIG_KEY",
    "RESOURCE_THRESHOLD_CONFIG_KEY",
    "SYSTEM_CONFIG_KEY",
    "SLOControllerConfig",
    "cluster_colocation_strategy",
    "colocation_strategy_annotation",
    "colocation_strategy_for_node",
    "cpu_burst_strategy_for_node",
    "cpu_normalization_strategy_for_node",
    "decode_config_value",
    "default_colocation_strategy",
    "default_node_metric_collect_policy",
    "host_applications_for_node",
    "invalid_key_event",
    "kept_outcome",
    "match_field_names",
    "node_metric_spec_for_node",
    "node_slo_spec_for_node",
    "parse_config",
    "resource_amplification_strategy_for_node",
    "resource_qos_strategy_for_node",
    "resource_threshold_strategy_for_node",
    "system_strategy_for_node",
    "unavailable_outcome",
    "validate_config_data",
]

CONFIG_NAMESPACE = "koordinator-system"
CONFIG_NAME = "slo-controller-config"
COLOCATION_CONFIG_KEY = "colocation-config"
RESOURCE_THRESHOLD_CONFIG_KEY = "resource-threshold-config"
RESOURCE_QOS_CONFIG_KEY = "resource-qos-config"
CPU_BURST_CONFIG_KEY = "cpu-burst-config"
SYSTEM_CONFIG_KEY = "system-config"
HOST_APPLICATION_CONFIG_KEY = "host-application-config"
CPU_NORMALIZATION_CONFIG_KEY = "cpu-normalization-config"
RESOURCE_AMPLIFICATION_CONFIG_KEY = "resource-amplification-config"

#: ConfigMap key -> model of its JSON value.
CONFIG_KEYS: dict[str, type[Model]] = {
    COLOCATION_CONFIG_KEY: ColocationCfg,
    RESOURCE_THRESHOLD_CONFIG_KEY: ResourceThresholdCfg,
    RESOURCE_QOS_CONFIG_KEY: ResourceQOSCfg,
    CPU_BURST_CONFIG_KEY: CPUBurstCfg,
    SYSTEM_CONFIG_KEY: SystemCfg,
    HOST_APPLICATION_CONFIG_KEY: HostApplicationCfg,
    CPU_NORMALIZATION_CONFIG_KEY: CPUNormalizationCfg,
    RESOURCE_AMPLIFICATION_CONFIG_KEY: ResourceAmplificationCfg,
}
_NODE_LIST_FIELD = {
    COLOCATION_CONFIG_KEY: "nodeConfigs",
    RESOURCE_THRESHOLD_CONFIG_KEY: "nodeStrategies",
    RESOURCE_QOS_CONFIG_KEY: "nodeStrategies",
    CPU_BURST_CONFIG_KEY: "nodeStrategies",
    SYSTEM_CONFIG_KEY: "nodeStrategies",
    HOST_APPLICATION_CONFIG_KEY: "nodeConfigs",
    CPU_NORMALIZATION_CONFIG_KEY: "nodeConfigs",
    RESOURCE_AMPLIFICATION_CONFIG_KEY: "nodeConfigs",
}

#: ConfigMap key -> the NodeSLO spec field the nodeslo controller builds from it.
NODE_SLO_SPEC_FIELDS: dict[str, str] = {
    RESOURCE_THRESHOLD_CONFIG_KEY: "resourceUsedThresholdWithBE",
    RESOURCE_QOS_CONFIG_KEY: "resourceQOSStrategy",
    CPU_BURST_CONFIG_KEY: "cpuBurstStrategy",
    SYSTEM_CONFIG_KEY: "systemStrategy",
    HOST_APPLICATION_CONFIG_KEY: "hostApplications",
}
#: The deepest JSON nesting a ConfigMap value may have. The keys' own structure is at most
#: six levels deep; the decoder and everything that walks a value recurse, so a value nested
#: thousands of levels deep would exhaust the stack instead of failing as invalid (Go's
#: decoder allows 10000 levels: a deliberate difference).
MAX_JSON_DEPTH = 100
#: Characters of a bad value quoted in an error (the whole value is in the ConfigMap).
_EXCERPT = 80
#: Characters of the errors quoted in an Event message.
_EVENT_ERRORS_LIMIT = 1024

M = TypeVar("M", bound=Model)
T = TypeVar("T")


def default_colocation_strategy() -> ColocationStrategy:
    """``DefaultColocationStrategy``: colocation off, 60 %/65 % reclaim thresholds, usage policies."""
    return ColocationStrategy(
        enable=False,
        metric_aggregate_duration_seconds=300,
        metric_report_interval_seconds=60,
        metric_aggregate_policy=AggregatePolicy(durations=["5m0s", "10m0s", "30m0s"]),
        metric_memory_collect_policy="usageWithoutPageCache",
        cpu_reclaim_threshold_percent=60,
        cpu_calculate_policy="usage",
        memory_reclaim_threshold_percent=65,
        memory_calculate_policy="usage",
        degrade_time_minutes=15,
        update_time_threshold_seconds=300,
        resource_diff_threshold=0.1,
        mid_cpu_threshold_percent=100,
        mid_memory_threshold_percent=100,
        mid_unallocated_percent=0,
        mid_static_cpu_reserved_percent=0,
        mid_static_memory_reserved_percent=0,
    )


def default_node_metric_collect_policy() -> NodeMetricCollectPolicy:
    """The NodeMetric collect policy used when colocation is off: 300 s, 60 s, 5m/10m/30m, no page cache."""
    return NodeMetricCollectPolicy(
        aggregate_duration_seconds=300,
        report_interval_seconds=60,
        node_aggregate_policy=AggregatePolicy(durations=["5m0s", "10m0s", "30m0s"]),
        node_memory_collect_policy="usageWithoutPageCache",
    )


# ---- parsing and validation ------------------------------------------------------------------------


@dataclass
class SLOControllerConfig:
    """The parsed ConfigMap (raw per key, before merging with defaults)."""

    colocation: ColocationCfg = field(default_factory=ColocationCfg)
    resource_threshold: ResourceThresholdCfg = field(default_factory=ResourceThresholdCfg)
    resource_qos: ResourceQOSCfg = field(default_factory=ResourceQOSCfg)
    cpu_burst: CPUBurstCfg = field(default_factory=CPUBurstCfg)
    system: SystemCfg = field(default_factory=SystemCfg)
    host_application: HostApplicationCfg = field(default_factory=HostApplicationCfg)
    cpu_normalization: CPUNormalizationCfg = field(default_factory=CPUNormalizationCfg)
    resource_amplification: ResourceAmplificationCfg = field(default_factory=ResourceAmplificationCfg)

    def by_key(self) -> dict[str, Model]:
        return {
            COLOCATION_CONFIG_KEY: self.colocation,
            RESOURCE_THRESHOLD_CONFIG_KEY: self.resource_threshold,
            RESOURCE_QOS_CONFIG_KEY: self.resource_qos,
            CPU_BURST_CONFIG_KEY: self.cpu_burst,
            SYSTEM_CONFIG_KEY: self.system,
            HOST_APPLICATION_CONFIG_KEY: self.host_application,
            CPU_NORMALIZATION_CONFIG_KEY: self.cpu_normalization,
            RESOURCE_AMPLIFICATION_CONFIG_KEY: self.resource_amplification,
        }


_ATTR_BY_KEY = {
    COLOCATION_CONFIG_KEY: "colocation",
    RESOURCE_THRESHOLD_CONFIG_KEY: "resource_threshold",
    RESOURCE_QOS_CONFIG_KEY: "resource_qos",
    CPU_BURST_CONFIG_KEY: "cpu_burst",
    SYSTEM_CONFIG_KEY: "system",
    HOST_APPLICATION_CONFIG_KEY: "host_application",
    CPU_NORMALIZATION_CONFIG_KEY: "cpu_normalization",
    RESOURCE_AMPLIFICATION_CONFIG_KEY: "resource_amplification",
}


# ---- object keys as Go's decoder matches them -----------------------------------------------------

#: The non-ASCII runes whose Unicode fold set holds an ASCII letter, as that letter: Go's
#: decoder matches U+212A KELVIN SIGN to ``k`` and U+017F LATIN SMALL LETTER LONG S to ``s``.
_FOLDED_TO_ASCII = str.maketrans({"\u212a": "K", "\u017f": "S"})


def _fold(name: str) -> str:
    """``name`` folded as Go's ``foldName`` folds it, for comparing with the (ASCII) field names.

    ASCII letters are upper-cased. Of the other runes only the two of
    :data:`_FOLDED_TO_ASCII` fold into ASCII; the rest can match no field name and stay.
    """
    return "".join(ch.upper() if ch.isascii() else ch for ch in name.translate(_FOLDED_TO_ASCII))


_JSON_FIELDS: dict[type[Model], tuple[dict[str, TypeDesc], dict[str, str]]] = {}


def _json_fields(model: type[Model]) -> tuple[dict[str, TypeDesc], dict[str, str]]:
    """``model``'s fields by JSON name, and folded name -> the first field with it (Go's precedence)."""
    cached = _JSON_FIELDS.get(model)
    if cached is None:
        by_name = {slot.info.json: slot.type for slot in model_fields(model)}
        by_folded: dict[str, str] = {}
        for name in by_name:
            by_folded.setdefault(_fold(name), name)
        cached = _JSON_FIELDS[model] = (by_name, by_folded)
    return cached


def match_field_names(value: Any, model: type[Model]) -> Any:
    """Decoded JSON ``value`` of ``model``'s shape, each object key spelled as the field it sets.

    Go's ``encoding/json`` gives a key to the field of exactly that name, else to the first
    field whose name equals it ignoring case: ``{"Enable": true,
    "CPUSuppressThresholdPercent": 50}`` sets ``enable`` and ``cpuSuppressThresholdPercent``.
    Keys that name the same field are decoded in object order, so the last one wins. Objects
    nested in model fields are matched too; map keys (``schedFeatures``, ``ratioModel``,
    ``resourceAmplificationRatio`` ...) and free-form JSON are data and stay as they are, and
    unknown keys stay for pruning to drop. Returns new objects and lists; ``value`` is not
    changed.
    """
    return _match(value, TypeDesc("model", model=model))


def _match(value: Any, desc: TypeDesc) -> Any:
    item = desc.item
    if desc.kind == "list" and item is not None and isinstance(value, list):
        return [_match(child, item) for child in value]
    if desc.kind == "map" and item is not None and isinstance(value, dict):
        return {key: _match(child, item) for key, child in value.items()}
    if desc.kind != "model" or desc.model is None or not isinstance(value, dict):
        return value
    by_name, by_folded = _json_fields(desc.model)
    out: dict[str, Any] = {}
    for key, child in value.items():
        name = key if key in by_name else by_folded.get(_fold(key))
        if name is None:
            out[key] = child
        else:
            out[name] = _match(child, by_name[name])
    return out


# ---- node entries' selectors ---------------------------------------------------------------------


def _under(field_path: str, path: str) -> bool:
    return field_path == path or field_path.startswith((f"{path}.", f"{path}["))


def _empty_selector(selector: Mapping[str, Any]) -> bool:
    return not (selector.get("matchLabels") or selector.get("matchExpressions"))


def _selector_problem(selector: Any, schema_errors: Sequence[FieldError]) -> str | None:
    """Why ``LabelSelectorAsSelector`` fails on a decoded ``nodeSelector``; ``None`` when it does not."""
    try:
        validate_label_selector(selector)
    except SelectorError as exc:
        return str(exc)
    if schema_errors:  # a requirement without its key or operator
        return "; ".join(str(e) for e in schema_errors)
    return None


def _strict_selector_errors(key: str, entries: Sequence[Any]) -> list[FieldError]:
    """The webhook's rule: every node entry has a non-empty ``nodeSelector`` that parses."""
    out: list[FieldError] = []
    list_field = _NODE_LIST_FIELD[key]
    for i, entry in enumerate(entries):
        if not isinstance(entry, Mapping):
            continue  # the schema errors say what it is
        where = f"{key}.{list_field}[{i}].nodeSelector"
        selector = entry.get("nodeSelector")
        if selector is None or (isinstance(selector, Mapping) and _empty_selector(selector)):
            out.append(FieldError.required(where, "a node entry needs a non-empty nodeSelector"))
        elif isinstance(selector, Mapping) and (problem := _selector_problem(selector, ())) is not None:
            out.append(FieldError.invalid(where, selector, problem))
    return out


def _lenient_selectors(
    key: str, entries: Sequence[Any], errors: Sequence[FieldError]
) -> tuple[set[int], list[FieldError]]:
    """What upstream's controllers do with the node entries' selectors: (entries that select no node, notes).

    ``LabelSelectorAsSelector`` gives a missing selector "nothing" and fails on a malformed
    one; the loops that pick a node's entry skip both, so the cluster strategy and the
    other entries still apply. An empty selector gives "everything": the entry takes every
    node no earlier entry took. A selector of the wrong JSON type is left to the schema
    errors: it fails Go's decoder and with it the whole key.
    """
    unusable: set[int] = set()
    notes: list[FieldError] = []
    list_field = _NODE_LIST_FIELD[key]
    for i, entry in enumerate(entries):
        if not isinstance(entry, Mapping):
            continue
        where = f"{key}.{list_field}[{i}].nodeSelector"
        selector = entry.get("nodeSelector")
        found = [e for e in errors if _under(e.field, where)]
        if any(e.type is ErrorType.TYPE_INVALID for e in found):
            continue
        if selector is None:
            unusable.add(i)
            notes.append(FieldError.required(where, "without one the entry selects no node: skipped"))
        elif (problem := _selector_problem(selector, found)) is not None:
            unusable.add(i)
            notes.append(
                FieldError.invalid(where, selector, f"{problem}: the entry selects no node: skipped")
            )
        elif isinstance(selector, Mapping) and _empty_selector(selector):
            notes.append(
                FieldError.invalid(
                    where, selector, "an empty selector selects every node: no later entry applies"
                )
            )
    return unusable, notes


# ---- parsing and validation of a key -------------------------------------------------------------


def _other_checks(
    key: str, data: Mapping[str, Any], entries: Sequence[Any], require_names: bool
) -> list[FieldError]:
    """The ConfigMap rules outside the schema: entry names (on request) and amplification ratios."""
    errors: list[FieldError] = []
    list_field = _NODE_LIST_FIELD[key]
    seen: set[str] = set()
    for i, entry in enumerate(entries if require_names else ()):
        if not isinstance(entry, Mapping):
            continue
        where = f"{key}.{list_field}[{i}]"
        name = entry.get("name") or ""
        if not name:
            errors.append(FieldError.required(f"{where}.name"))
        elif name in seen:
            errors.append(FieldError.duplicate(f"{where}.name", name))
        else:
            seen.add(name)
    if key == RESOURCE_AMPLIFICATION_CONFIG_KEY:
        sources = [(f"{key}.resourceAmplificationRatio", data)]
        sources += [
            (f"{key}.{list_field}[{i}].resourceAmplificationRatio", e)
            for i, e in enumerate(entries)
            if isinstance(e, Mapping)
        ]
        for where, source in sources:
            ratios = source.get("resourceAmplificationRatio")
            for name, ratio in (ratios or {}).items() if isinstance(ratios, Mapping) else ():
                if isinstance(ratio, int | float) and not isinstance(ratio, bool) and ratio < 1:
                    errors.append(
                        FieldError.invalid(
                            f"{where}.{name}", ratio, "amplification ratios must be at least 1"
                        )
                    )
    return errors


def decode_config_value(text: str | bytes) -> Any:
    """The JSON value of a ConfigMap key; :class:`JSONError` when it is not JSON or nests too deep.

    A value nested deeper than :data:`MAX_JSON_DEPTH` levels fails the same way at every
    depth: the decoder's own recursion limit (about 1000 levels, less on a deep stack) is
    reported as the same error instead of escaping as a :class:`RecursionError`.
    """
    too_deep = f"nested deeper than {MAX_JSON_DEPTH} levels"
    try:
        data = unmarshal(text)
    except RecursionError:
        raise JSONError(too_deep) from None
    if nested_deeper(data, MAX_JSON_DEPTH):
        raise JSONError(too_deep)
    return data


def _excerpt(text: str) -> str:
    return text if len(text) <= _EXCERPT else f"{text[:_EXCERPT]}... ({len(text)} characters)"


def _schema_errors(key: str, data: Mapping[str, Any]) -> list[FieldError]:
    schema = model_schema(CONFIG_KEYS[key])
    # the apiserver's "rules were not checked" note belongs to no field (and to no key): a
    # ConfigMap key has no CEL rules, and the note would otherwise be blamed on another key
    return [e for e in validate(prune(data, schema), schema, path=key) if e.field != NO_FIELD]


@dataclass
class _KeyResult:
    value: Model | None
    errors: list[FieldError]
    notes: list[FieldError] = field(default_factory=list)


def _parse_key(key: str, text: str, require_names: bool, strict_selectors: bool) -> _KeyResult:
    model = CONFIG_KEYS[key]
    try:
        data = decode_config_value(text)
    except JSONError as exc:
        return _KeyResult(None, [FieldError.invalid(key, _excerpt(text), f"invalid JSON: {exc}")])
    if not isinstance(data, dict):
        return _KeyResult(None, [FieldError.invalid(key, _excerpt(text), "must be a JSON object")])
    data = match_field_names(data, model)
    list_field = _NODE_LIST_FIELD[key]
    entries: list[Any] = data[list_field] if isinstance(data.get(list_field), list) else []
    errors = _schema_errors(key, data)
    notes: list[FieldError] = []
    if strict_selectors:
        errors += _strict_selector_errors(key, entries)
    else:
        unusable, notes = _lenient_selectors(key, entries, errors)
        if unusable:
            # the entries stay (their values are still checked), without a selector: they select no node
            entries = [
                {k: v for k, v in e.items() if k != "nodeSelector"} if i in unusable else e
                for i, e in enumerate(entries)
            ]
            data = {**data, list_field: entries}
            errors = _schema_errors(key, data)
    errors += _other_checks(key, data, entries, require_names)
    if errors:
        return _KeyResult(None, errors)
    try:
        return _KeyResult(model.from_dict(data, path=key), [], notes)
    except ModelError as exc:
        return _KeyResult(None, [FieldError.invalid(exc.path, None, exc.message)])


def parse_config(
    data: Mapping[str, str] | None,
    previous: SLOControllerConfig | None = None,
    *,
    require_names: bool = False,
    strict_selectors: bool = False,
    notes: list[FieldError] | None = None,
) -> tuple[SLOControllerConfig, list[FieldError]]:
    """Parse ConfigMap ``data``. A key that fails keeps its value from ``previous`` (default: empty).

    As the controllers parse it: a node entry whose ``nodeSelector`` is missing or does not
    parse is kept but selects no node. Such entries of the keys that apply, and entries
    whose empty selector selects every node, are described in ``notes`` when a list is
    given. ``strict_selectors`` (the webhook's rule) makes them errors instead.
    """
    result = SLOControllerConfig()
    errors: list[FieldError] = []
    for key, attr in _ATTR_BY_KEY.items():
        text = (data or {}).get(key)
        if not text:
            continue
        parsed = _parse_key(key, text, require_names, strict_selectors)
        if parsed.errors:
            errors += parsed.errors
            if previous is not None:
                setattr(result, attr, getattr(previous, attr))
            continue
        setattr(result, attr, parsed.value)
        if notes is not None:
            notes += parsed.notes
    return result, errors


def validate_config_data(data: Mapping[str, str] | None, *, require_names: bool = False) -> list[FieldError]:
    """Errors of the ConfigMap ``data`` as the webhook checks it (empty when every present key is valid).

    Stricter than the controllers: every node entry needs a non-empty ``nodeSelector`` that parses.
    """
    return parse_config(data, require_names=require_names, strict_selectors=True)[1]


# ---- per-node resolution -----------------------------------------------------------------------------


def _node_labels(node: Mapping[str, Any] | None) -> dict[str, str]:
    return labels_of(node) if node else {}


def _first_match(
    entries: Sequence[M], labels: Mapping[str, str], selector: Callable[[M], LabelSelector | None]
) -> M | None:
    for entry in entries:
        sel = selector(entry)
        if sel is None:
            continue
        try:
            if label_selector_matches(sel.to_dict(), labels):
                return entry
        except SelectorError:
            continue
    return None


def _strategy_for_node(
    default: M, cluster: Model | None, entries: Sequence[Any], node: Mapping[str, Any] | None
) -> M:
    merged_cluster = merge(default, cluster)
    entry = _first_match(entries, _node_labels(node), lambda e: e.node_selector)
    return merge(merged_cluster, entry) if entry is not None else merged_cluster


def cluster_colocation_strategy(config: SLOControllerConfig) -> ColocationStrategy:
    """defaults ⊕ the cluster fields of ``colocation-config``."""
    return merge(default_colocation_strategy(), ColocationStrategy.from_dict(config.colocation.to_dict()))


def _ratio_percent(labels: Mapping[str, str], key: str) -> int | None:
    raw = labels.get(key)
    if raw is None:
        return None
    try:
        ratio = parse_float(raw)
    except GoParseError:
        return None
    if math.isnan(ratio) or ratio < 0 or math.isinf(ratio):
        return None
    return int(ratio * 100)


def colocation_strategy_annotation(text: str) -> ColocationStrategy:
    """The node annotation ``node.koordinator.sh/colocation-strategy`` decoded as Go decodes it.

    Keys differing from a field's name only in case set it; unknown keys are ignored; the
    values are not range-checked. :class:`JSONError` or :class:`ModelError` when it is not
    a JSON object of the right types.
    """
    return ColocationStrategy.from_dict(match_field_names(decode_config_value(text), ColocationStrategy))


def colocation_strategy_for_node(
    config: SLOControllerConfig, node: Mapping[str, Any] | None, problems: list[str] | None = None
) -> ColocationStrategy:
    """The node's colocation strategy, with the node-annotation and ratio-label overrides applied.

    A malformed node annotation or ratio label is skipped (the configured value stays) and
    described in ``problems`` when a list is given.
    """
    notes = problems if problems is not None else []
    cluster = cluster_colocation_strategy(config)
    strategy = cluster
    entry = _first_match(config.colocation.node_configs, _node_labels(node), lambda e: e.node_selector)
    if entry is not None:
        candidate = merge(cluster, ColocationStrategy.from_dict(entry.to_dict()))
        strategy = candidate if candidate.is_valid() else cluster
    if node is None:
        return strategy
    raw = annotations_of(node).get(ANNOTATION_NODE_COLOCATION_STRATEGY)
    if raw:
        try:
            strategy = merge(strategy, colocation_strategy_annotation(raw))
        except (JSONError, ModelError) as exc:
            notes.append(f"ignoring node annotation {ANNOTATION_NODE_COLOCATION_STRATEGY}: {exc}")
    labels = labels_of(node)
    for label, attr in (
        (LABEL_CPU_RECLAIM_RATIO, "cpu_reclaim_threshold_percent"),
        (LABEL_MEMORY_RECLAIM_RATIO, "memory_reclaim_threshold_percent"),
        (LABEL_MID_STATIC_CPU_RESERVED_RATIO, "mid_static_cpu_reserved_percent"),
        (LABEL_MID_STATIC_MEMORY_RESERVED_RATIO, "mid_static_memory_reserved_percent"),
    ):
        percent = _ratio_percent(labels, label)
        if percent is not None:
            setattr(strategy, attr, percent)
        elif label in labels:
            notes.append(f"ignoring node label {label}={labels[label]!r}: not a non-negative number")
    return strategy


def resource_threshold_strategy_for_node(
    config: SLOControllerConfig, node: Mapping[str, Any] | None
) -> ResourceThresholdStrategy:
    cfg = config.resource_threshold
    return _strategy_for_node(
        default_resource_threshold_strategy(), cfg.cluster_strategy, cfg.node_strategies, node
    )


def resource_qos_strategy_for_node(
    config: SLOControllerConfig, node: Mapping[str, Any] | None
) -> ResourceQOSStrategy:
    """Empty by default: the koordlet fills in its own QoS defaults."""
    cfg = config.resource_qos
    return _strategy_for_node(ResourceQOSStrategy(), cfg.cluster_strategy, cfg.node_strategies, node)


def cpu_burst_strategy_for_node(
    config: SLOControllerConfig, node: Mapping[str, Any] | None
) -> CPUBurstStrategy:
    cfg = config.cpu_burst
    return _strategy_for_node(default_cpu_burst_strategy(), cfg.cluster_strategy, cfg.node_strategies, node)


def system_strategy_for_node(
    config: SLOControllerConfig, node: Mapping[str, Any] | None, problems: list[str] | None = None
) -> SystemStrategy:
    """The system strategy; the node annotation ``network-bandwidth`` overrides the bandwidth.

    A malformed annotation is skipped and described in ``problems`` when a list is given.
    """
    cfg = config.system
    strategy = _strategy_for_node(default_system_strategy(), cfg.cluster_strategy, cfg.node_strategies, node)
    raw = annotations_of(node).get(ANNOTATION_NETWORK_BANDWIDTH) if node else None
    if raw:
        try:
            strategy.total_network_bandwidth = Quantity.parse(raw)
        except QuantityError as exc:
            if problems is not None:
                problems.append(f"ignoring node annotation {ANNOTATION_NETWORK_BANDWIDTH}: {exc}")
    return strategy


def host_applications_for_node(
    config: SLOControllerConfig, node: Mapping[str, Any] | None
) -> list[HostApplicationSpec]:
    """The matching node entry's applications, else the cluster list."""
    cfg = config.host_application
    entry = _first_match(cfg.node_configs, _node_labels(node), lambda e: e.node_selector)
    chosen = entry.applications if entry is not None else cfg.applications
    return [app.copy() for app in chosen]


def cpu_normalization_strategy_for_node(
    config: SLOControllerConfig, node: Mapping[str, Any] | None
) -> CPUNormalizationStrategy:
    cfg = config.cpu_normalization
    cluster = CPUNormalizationStrategy.from_dict(cfg.to_dict())
    return _strategy_for_node(CPUNormalizationStrategy(enable=False), cluster, cfg.node_configs, node)


def resource_amplification_strategy_for_node(
    config: SLOControllerConfig, node: Mapping[str, Any] | None
) -> ResourceAmplificationStrategy:
    cfg = config.resource_amplification
    cluster = ResourceAmplificationStrategy.from_dict(cfg.to_dict())
    return _strategy_for_node(ResourceAmplificationStrategy(enable=False), cluster, cfg.node_configs, node)


def node_slo_spec_for_node(
    config: SLOControllerConfig, node: Mapping[str, Any] | None, problems: list[str] | None = None
) -> NodeSLOSpec:
    """The NodeSLO spec the nodeslo controller writes for ``node``."""
    return NodeSLOSpec(
        resource_used_threshold_with_be=resource_threshold_strategy_for_node(config, node),
        resource_qos_strategy=resource_qos_strategy_for_node(config, node),
        cpu_burst_strategy=cpu_burst_strategy_for_node(config, node),
        system_strategy=system_strategy_for_node(config, node, problems),
        host_applications=host_applications_for_node(config, node),
    )


def node_metric_spec_for_node(
    config: SLOControllerConfig, node: Mapping[str, Any] | None, problems: list[str] | None = None
) -> NodeMetricSpec:
    """The NodeMetric spec: defaults, overridden by the node's colocation strategy when valid and enabled."""
    policy = default_node_metric_collect_policy()
    strategy = colocation_strategy_for_node(config, node, problems)
    if strategy.is_valid() and strategy.enable:
        # the merged strategy sets every field (the defaults do); the fallbacks only keep a
        # field an override could unset from reaching the spec empty
        policy = NodeMetricCollectPolicy(
            aggregate_duration_seconds=_given(
                strategy.metric_aggregate_duration_seconds, policy.aggregate_duration_seconds
            ),
            report_interval_seconds=_given(
                strategy.metric_report_interval_seconds, policy.report_interval_seconds
            ),
            node_aggregate_policy=_given(strategy.metric_aggregate_policy, policy.node_aggregate_policy),
            node_memory_collect_policy=_given(
                strategy.metric_memory_collect_policy, policy.node_memory_collect_policy
            ),
        )
    return NodeMetricSpec(metric_collect_policy=policy)


def _given(value: T | None, default: T | None) -> T | None:
    return value if value is not None else default


#: upstream's Event reasons for a key that fails: colocation-config, and every NodeSLO key
REASON_COLOCATION_INVALID = "ColocationCfgUnmarshalFailed"
REASON_SLO_INVALID = "SLOCfgUnmarshalFailed"
#: how upstream's Event messages name the keys (``failed to unmarshal ThresholdCfg, err: ...``)
_EVENT_NAMES = {
    COLOCATION_CONFIG_KEY: "colocation config",
    RESOURCE_THRESHOLD_CONFIG_KEY: "ThresholdCfg",
    RESOURCE_QOS_CONFIG_KEY: "ResourceQOSCfg",
    CPU_BURST_CONFIG_KEY: "CPUBurstCfg",
    SYSTEM_CONFIG_KEY: "SystemCfg",
    HOST_APPLICATION_CONFIG_KEY: "HostApplicationCfg",
}


#: What the controllers leave alone while a key has no good value, by key.
_LEFT_AS_IS = {
    COLOCATION_CONFIG_KEY: (
        "the batch and mid resources of the nodes and their NodeMetrics are left as they are"
    ),
    **{
        key: f"spec.{spec_field} of every NodeSLO is left as it is"
        for key, spec_field in NODE_SLO_SPEC_FIELDS.items()
    },
    CPU_NORMALIZATION_CONFIG_KEY: "the cpu-normalization-ratio annotation of every node is left as it is",
    RESOURCE_AMPLIFICATION_CONFIG_KEY: (
        "the resource-amplification-ratio annotation of every node is left as it is"
    ),
}


def kept_outcome(key: str, last_good: str, source: str = "") -> str:
    """What an Event says about a broken ``key`` whose last good value (raw text) stays in use.

    ``last_good`` empty: the key had no value, so its defaults stay; ``source``: where the
    value was read from when it is not this process's own (the persisted copy).
    """
    text = f"kept the last good value of {key}"
    if not last_good:
        text += " (it had no value: the defaults)"
    if source:
        text += f", read from {source}"
    return text


def unavailable_outcome(key: str) -> str:
    """What an Event says about a broken ``key`` without any known good value: what is left as it is."""
    what = _LEFT_AS_IS.get(key)
    if what is None:
        return f"no good value of {key} known: it is ignored until it is fixed (no controller reads it)"
    return f"no good value of {key} known: {what} until it is fixed, not reset to the defaults"


def invalid_key_event(key: str, errors: Sequence[FieldError | str], outcome: str = "") -> tuple[str, str]:
    """Reason and message of the Warning Event for a ConfigMap ``key`` that failed.

    Upstream's reason and words (``failed to unmarshal ThresholdCfg, err: ...``, the errors
    cut at about 1 KiB), then ``outcome``: what was done about it (``kept the last good
    value ...``), which is never cut.
    """
    reason = REASON_COLOCATION_INVALID if key == COLOCATION_CONFIG_KEY else REASON_SLO_INVALID
    name = _EVENT_NAMES.get(key) or CONFIG_KEYS[key].__name__
    text = "; ".join(map(str, errors))
    if len(text) > _EVENT_ERRORS_LIMIT:
        text = f"{text[:_EVENT_ERRORS_LIMIT]}... ({len(text) - _EVENT_ERRORS_LIMIT} more characters)"
    message = f"failed to unmarshal {name}, err: {text}"
    return reason, f"{message}; {outcome}" if outcome else message
