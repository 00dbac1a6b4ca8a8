"""NodeResourcesFit and NodeResourcesBalancedAllocation: their args, as upstream validates
them, turned into the kernel's configuration (the kernel runs both; see
:mod:`controlplane.scheduler.kernel.twin` for the rules).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from controlplane.scheduler.kernel.table import (
    LEAST_ALLOCATED,
    MOST_ALLOCATED,
    REQUESTED_TO_CAPACITY_RATIO,
    NodeTable,
    ScoreConfig,
    is_scalar,
)
from controlplane.scheduler.kernel.twin import FIRST_RESOURCE, TOO_MANY_PODS
from controlplane.scheduler.plugins.args import ArgsError, resource_weights

FIT = "NodeResourcesFit"
BALANCED = "NodeResourcesBalancedAllocation"
STRATEGIES = {
    "LeastAllocated": LEAST_ALLOCATED,
    "MostAllocated": MOST_ALLOCATED,
    "RequestedToCapacityRatio": REQUESTED_TO_CAPACITY_RATIO,
}
MAX_CUSTOM_PRIORITY_SCORE = 10


@dataclass
class FitArgs:
    strategy: int = LEAST_ALLOCATED
    resources: dict[str, int] = field(default_factory=lambda: {"cpu": 1, "memory": 1})
    shape: list[tuple[int, int]] = field(default_factory=list)
    ignored_resources: frozenset[str] = frozenset()
    ignored_groups: frozenset[str] = frozenset()

    def ignores(self, name: str) -> bool:
        """Extended resources the filter and score leave out (``ignoredResources``,
        ``ignoredResourceGroups``: the part before ``/``)."""
        return is_scalar(name) and (
            name in self.ignored_resources or name.split("/", 1)[0] in self.ignored_groups
        )


@dataclass
class BalancedArgs:
    resources: list[str] = field(default_factory=lambda: ["cpu", "memory"])


def _shape(raw: Any, path: str) -> list[tuple[int, int]]:
    if not isinstance(raw, list) or not raw:
        raise ArgsError(f"{path}: Required value: at least one point must be specified")
    points: list[tuple[int, int]] = []
    for i, point in enumerate(raw):
        where = f"{path}[{i}]"
        utilization, score = (point or {}).get("utilization"), (point or {}).get("score")
        if not isinstance(utilization, int) or not 0 <= utilization <= 100:
            raise ArgsError(
                f"{where}.utilization: Invalid value: {utilization!r}: not in valid range [0-100]"
            )
        if not isinstance(score, int) or not 0 <= score <= MAX_CUSTOM_PRIORITY_SCORE:
            raise ArgsError(f"{where}.score: Invalid value: {score!r}: not in valid range [0-10]")
        if points and utilization <= points[-1][0]:
            raise ArgsError(
                f"{where}.utilization: Invalid value: {utilization}: utilization values must be sorted"
            )
        points.append((utilization, score))
    return points


def fit_args(raw: Mapping[str, Any] | None, path: str = FIT) -> FitArgs:
    """NodeResourcesFitArgs, defaulted and validated as upstream does."""
    raw = raw or {}
    args = FitArgs()
    strategy = raw.get("scoringStrategy") or {}
    name = strategy.get("type", "LeastAllocated")
    if name not in STRATEGIES:
        raise ArgsError(
            f"{path}.scoringStrategy.type: Unsupported value: {name!r}: "
            f"supported values: {', '.join(STRATEGIES)}"
        )
    args.strategy = STRATEGIES[name]
    if "resources" in strategy:
        args.resources = resource_weights(strategy["resources"], f"{path}.scoringStrategy.resources")
    if args.strategy == REQUESTED_TO_CAPACITY_RATIO:
        rtcr = strategy.get("requestedToCapacityRatio") or {}
        args.shape = _shape(rtcr.get("shape"), f"{path}.scoringStrategy.requestedToCapacityRatio.shape")
    args.ignored_resources = frozenset(raw.get("ignoredResources") or ())
    args.ignored_groups = frozenset(raw.get("ignoredResourceGroups") or ())
    for group in args.ignored_groups:
        if "/" in group:
            raise ArgsError(
                f"{path}.ignoredResourceGroups: Invalid value: {group!r}: "
                "resource group name can't contain '/'"
            )
    return args


def balanced_args(raw: Mapping[str, Any] | None, path: str = BALANCED) -> BalancedArgs:
    raw = raw or {}
    if "resources" not in raw:
        return BalancedArgs()
    return BalancedArgs(list(resource_weights(raw["resources"], f"{path}.resources", weights=False)))


def score_config(
    table: NodeTable, fit: FitArgs, fit_weight: int, balanced: BalancedArgs | None, balanced_weight: int
) -> ScoreConfig:
    """The kernel's configuration: NodeResourcesFit's score at ``fit_weight`` (0: not a score
    plug-in), BalancedAllocation's at ``balanced_weight`` (``balanced`` None: not enabled)."""
    return table.score_config(
        fit.strategy,
        fit.resources if fit_weight else {},
        balanced.resources if balanced is not None else (),
        fit_plugin_weight=fit_weight,
        balanced_plugin_weight=balanced_weight if balanced is not None else 0,
        shape=fit.shape,
    )


def reason_texts(table: NodeTable, counts: Any) -> dict[str, int]:
    """The kernel's diagnosis as upstream's reasons: "Too many pods", "Insufficient <resource>"."""
    out: dict[str, int] = {}
    if counts[TOO_MANY_PODS]:
        out["Too many pods"] = counts[TOO_MANY_PODS]
    for col, name in enumerate(table.resources):
        n = counts[FIRST_RESOURCE + col] if FIRST_RESOURCE + col < len(counts) else 0
        if n:
            out[f"Insufficient {name}"] = n
    return out
