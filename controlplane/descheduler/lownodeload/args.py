"""LowNodeLoadArgs (``descheduler/v1alpha2``): parsing, upstream's defaults and validation.

Defaults (``v1alpha2/defaults.go``): ``nodeFit`` true, ``nodeMetricExpirationSeconds`` 180,
``anomalyCondition`` {timeout 1m, consecutiveAbnormalities 5 (also when given as 0),
consecutiveNormalities 3}, ``detectorCacheTimeout`` 5m, ``resourceWeights`` 1 for cpu,
memory and every resource with a threshold (a weight of 0 or less takes the default).
Node pools inherit the top-level thresholds, prod thresholds and anomaly condition they do
not set, and the top-level weights for the resources they do not weigh; with no
``nodePools`` the top-level fields (with ``nodeSelector``) form the one pool.

Validation (``validation_loadaware.go``): ``numberOfNodes`` >= 0,
``nodeMetricExpirationSeconds`` > 0, only one of ``evictableNamespaces.include``/``exclude``,
valid selectors, percentages >= 0 and low <= high, ``consecutiveAbnormalities`` > 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from controlplane.descheduler.args import (
    ArgsError,
    boolean,
    duration,
    integer,
    label_selector,
    mapping,
    namespaces,
)
from controlplane.descheduler.lownodeload.anomaly import AnomalyCondition

__all__ = ["LowNodeLoadArgs", "NodePool", "PodSelector", "parse_args"]

NAME = "LowNodeLoad"
DEFAULT_EXPIRATION_S = 180
DEFAULT_CONDITION = AnomalyCondition()
DEFAULT_DETECTOR_CACHE_TIMEOUT_S = 300.0
DEFAULT_POOL = ""


@dataclass(frozen=True)
class NodePool:
    name: str = DEFAULT_POOL
    node_selector: Mapping[str, Any] | None = None
    use_deviation_thresholds: bool = False
    high_thresholds: Mapping[str, float] = field(default_factory=dict)
    low_thresholds: Mapping[str, float] = field(default_factory=dict)
    prod_high_thresholds: Mapping[str, float] = field(default_factory=dict)
    prod_low_thresholds: Mapping[str, float] = field(default_factory=dict)
    resource_weights: Mapping[str, int] = field(default_factory=dict)
    anomaly_condition: AnomalyCondition = DEFAULT_CONDITION


@dataclass(frozen=True)
class PodSelector:
    name: str
    selector: Mapping[str, Any] | None


@dataclass(frozen=True)
class LowNodeLoadArgs:
    paused: bool = False
    dry_run: bool = False
    number_of_nodes: int = 0
    node_metric_expiration_seconds: int = DEFAULT_EXPIRATION_S
    include_namespaces: tuple[str, ...] = ()
    exclude_namespaces: tuple[str, ...] = ()
    node_selector: Mapping[str, Any] | None = None
    pod_selectors: tuple[PodSelector, ...] = ()
    node_fit: bool = True
    detector_cache_timeout_s: float = DEFAULT_DETECTOR_CACHE_TIMEOUT_S
    #: the pools, each with every inherited field filled in
    node_pools: tuple[NodePool, ...] = (NodePool(),)


def _thresholds(raw: Mapping[str, Any], key: str, path: str) -> dict[str, float]:
    value = mapping(raw.get(key), f"{path}.{key}")
    out: dict[str, float] = {}
    for name, percent in value.items():
        if isinstance(percent, bool) or not isinstance(percent, int | float):
            raise ArgsError(f"{path}.{key}[{name}]: Invalid value: {percent!r}: must be a number")
        if percent < 0:
            raise ArgsError(
                f"{path}.{key}[{name}]: Invalid value: {percent}: "
                "percentage must be greater than or equal to 0"
            )
        out[str(name)] = float(percent)
    return out


def _weights(raw: Mapping[str, Any], path: str) -> dict[str, int] | None:
    if raw.get("resourceWeights") is None:
        return None
    out: dict[str, int] = {}
    for name, weight in mapping(raw.get("resourceWeights"), f"{path}.resourceWeights").items():
        if isinstance(weight, bool) or not isinstance(weight, int):
            raise ArgsError(f"{path}.resourceWeights[{name}]: Invalid value: {weight!r}: must be an integer")
        out[str(name)] = weight
    return out


def _condition(raw: Any, path: str, inherited: AnomalyCondition | None) -> AnomalyCondition | None:
    """The anomaly condition; zero counts take ``inherited``'s (or the defaults')."""
    if raw is None:
        return inherited
    value = mapping(raw, path)
    base = inherited or DEFAULT_CONDITION
    timeout = duration(value, "timeout", path, None)
    abnormal = integer(value, "consecutiveAbnormalities", path, 0) or base.consecutive_abnormalities
    normal = integer(value, "consecutiveNormalities", path, 0) or base.consecutive_normalities
    condition = AnomalyCondition(timeout if timeout is not None else base.timeout_s, abnormal, normal)
    if condition.consecutive_abnormalities <= 0:
        raise ArgsError(
            f"{path}.consecutiveAbnormalities: Invalid value: {condition.consecutive_abnormalities}: "
            "consecutiveAbnormalities must be greater than 0"
        )
    return condition


def _default_weights(
    pool_weights: Mapping[str, int] | None, *threshold_maps: Mapping[str, float]
) -> dict[str, int]:
    weights = {"cpu": 1, "memory": 1}
    for thresholds in threshold_maps:
        weights.update(dict.fromkeys(thresholds, 1))
    merged = dict(pool_weights or {})
    for name, weight in weights.items():
        if merged.get(name, 0) <= 0:
            merged[name] = weight
    return merged


def _check_low_high(pool: NodePool, path: str) -> None:
    for low_map, high_map, key in (
        (pool.low_thresholds, pool.high_thresholds, "lowThresholds"),
        (pool.prod_low_thresholds, pool.prod_high_thresholds, "prodLowThresholds"),
    ):
        for name, low in low_map.items():
            high = high_map.get(name)
            if high is not None and low > high:
                raise ArgsError(
                    f"{path}.{key}[{name}]: Invalid value: {low:g}: "
                    "low percentage must be less than or equal to highThresholds"
                )


def parse_args(raw: Any, path: str = "args") -> LowNodeLoadArgs:
    args = mapping(raw, path)
    number = integer(args, "numberOfNodes", path, 0) or 0
    if number < 0:
        raise ArgsError(f"{path}.numberOfNodes: Invalid value: {number}: must be greater than or equal to 0")
    expiration = integer(args, "nodeMetricExpirationSeconds", path, DEFAULT_EXPIRATION_S)
    assert expiration is not None
    if expiration <= 0:
        raise ArgsError(
            f"nodeMetricExpiredSeconds: Invalid value: {expiration}: "
            "nodeMetricExpiredSeconds should be a positive value"
        )
    include, exclude = namespaces(args, "evictableNamespaces", path)
    selectors: list[PodSelector] = []
    raw_selectors = args.get("podSelectors") or []
    if not isinstance(raw_selectors, list):
        raise ArgsError(f"{path}.podSelectors: must be a list")
    for i, entry in enumerate(raw_selectors):
        where = f"{path}.podSelectors[{i}]"
        entry = mapping(entry, where)
        selectors.append(PodSelector(str(entry.get("name") or ""), label_selector(entry, "selector", where)))
    high = _thresholds(args, "highThresholds", path)
    low = _thresholds(args, "lowThresholds", path)
    prod_high = _thresholds(args, "prodHighThresholds", path)
    prod_low = _thresholds(args, "prodLowThresholds", path)
    condition = (
        _condition(args.get("anomalyCondition"), f"{path}.anomalyCondition", None) or DEFAULT_CONDITION
    )
    weights = _default_weights(_weights(args, path), low, high)
    top = NodePool(
        name=DEFAULT_POOL,
        node_selector=label_selector(args, "nodeSelector", path),
        use_deviation_thresholds=boolean(args, "useDeviationThresholds", path, False),
        high_thresholds=high,
        low_thresholds=low,
        prod_high_thresholds=prod_high,
        prod_low_thresholds=prod_low,
        resource_weights=weights,
        anomaly_condition=condition,
    )
    raw_pools = args.get("nodePools") or []
    if not isinstance(raw_pools, list):
        raise ArgsError(f"{path}.nodePools: must be a list")
    pools: list[NodePool] = []
    for i, entry in enumerate(raw_pools):
        where = f"{path}.nodePools[{i}]"
        entry = mapping(entry, where)
        pool_high = _thresholds(entry, "highThresholds", where) or high
        pool_low = _thresholds(entry, "lowThresholds", where) or low
        pools.append(
            NodePool(
                name=str(entry.get("name") or ""),
                node_selector=label_selector(entry, "nodeSelector", where),
                use_deviation_thresholds=boolean(entry, "useDeviationThresholds", where, False),
                high_thresholds=pool_high,
                low_thresholds=pool_low,
                prod_high_thresholds=_thresholds(entry, "prodHighThresholds", where) or prod_high,
                prod_low_thresholds=_thresholds(entry, "prodLowThresholds", where) or prod_low,
                resource_weights=_default_weights({**weights, **(_weights(entry, where) or {})}),
                anomaly_condition=_condition(
                    entry.get("anomalyCondition"), f"{where}.anomalyCondition", condition
                )
                or condition,
            )
        )
    for i, pool in enumerate(pools or [top]):
        _check_low_high(pool, f"{path}.nodePools[{i}]" if pools else path)
    cache_timeout = duration(args, "detectorCacheTimeout", path, DEFAULT_DETECTOR_CACHE_TIMEOUT_S)
    return LowNodeLoadArgs(
        paused=boolean(args, "paused", path, False),
        dry_run=boolean(args, "dryRun", path, False),
        number_of_nodes=number,
        node_metric_expiration_seconds=expiration,
        include_namespaces=include,
        exclude_namespaces=exclude,
        node_selector=top.node_selector,
        pod_selectors=tuple(selectors),
        node_fit=boolean(args, "nodeFit", path, True),
        detector_cache_timeout_s=cache_timeout
        if cache_timeout is not None
        else DEFAULT_DETECTOR_CACHE_TIMEOUT_S,
        node_pools=tuple(pools) if pools else (top,),
    )
