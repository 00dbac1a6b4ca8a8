"""ResourceAmplification: the ``node.koordinator.sh/resource-amplification-ratio`` of one node.

The node mutating webhook (:mod:`controlplane.manager.webhooks.node.mutating`) reads this
annotation on every node status update, keeps the kubelet's allocatable in
``raw-allocatable`` and multiplies ``cpu``/``memory`` allocatable by the ratios above 1.

Upstream's rules, from the node's ``resource-amplification-config`` strategy (cluster
fields, or the first matching ``nodeConfigs`` entry merged over them) and the node's CPU
normalization ratio:

* enabled: every configured ratio (``resourceAmplificationRatio``); disabled: none;
* ``cpu`` = (the configured cpu ratio, or 1) x the CPU normalization ratio (when there is
  one), kept only when the product is above 1 -- so CPU normalization alone amplifies cpu;
* every ratio must be at least 1 (the ConfigMap validation already refuses smaller ones);
* no ratio left: the annotation is removed; otherwise it is a JSON object, keys sorted,
  each value with two decimals (``{"cpu":1.50}``). A different text is written.

The normalization ratio used is the one the node carries after this reconcile (the ratio
CPUNormalization writes in the same patch, or the node's current one), so the two
annotations always agree; upstream reads the node's previous annotation and catches up on
the next reconcile.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from koordinator.api.sloconfig.types import ResourceAmplificationStrategy

__all__ = ["NAME", "AmplificationResult", "calculate_amplification", "format_ratios"]

NAME = "ResourceAmplification"


@dataclass(frozen=True, slots=True)
class AmplificationResult:
    """``annotation``: the value to hold, ``None`` to remove it; ``error``: leave it as it is."""

    annotation: str | None
    ratios: Mapping[str, float]
    error: str = ""


def format_ratios(ratios: Mapping[str, float]) -> str:
    """Upstream's JSON of the ratios: keys sorted, every value with two decimals."""
    return "{" + ",".join(f'"{name}":{ratios[name]:.2f}' for name in sorted(ratios)) + "}"


def calculate_amplification(
    strategy: ResourceAmplificationStrategy, normalization_ratio: float | None
) -> AmplificationResult:
    """The annotation for a node with ``strategy`` and CPU normalization ``normalization_ratio``."""
    ratios: dict[str, float] = {}
    if strategy.enable:
        ratios.update((name, float(value)) for name, value in strategy.resource_amplification_ratio.items())
    cpu = ratios.get("cpu", 0.0)
    cpu = cpu if cpu > 0 else 1.0
    if normalization_ratio is not None and normalization_ratio > 0:
        cpu *= normalization_ratio
    if cpu > 1:
        ratios["cpu"] = cpu
    for name, value in sorted(ratios.items()):
        if value < 1:
            return AmplificationResult(
                None, {}, f"ratio with resource type {name} and value {value} is invalid (must be at least 1)"
            )
    if not ratios:
        return AmplificationResult(None, {})
    return AmplificationResult(format_ratios(ratios), ratios)
