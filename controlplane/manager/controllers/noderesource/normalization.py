"""CPUNormalization: the ``node.koordinator.sh/cpu-normalization-ratio`` of one node.

The ratio says how much faster one CPU of this node is than the cluster's reference CPU;
batch-cpu (node and NUMA zones) and the ``resource-amplification-ratio`` of ``cpu`` are
scaled by it. Inputs: the node's ``cpu-normalization-config`` strategy (cluster fields, or
the first ``nodeConfigs`` entry whose selector matches the node, merged over them), the
node label ``node.koordinator.sh/cpu-normalization-enabled`` and the ``cpu-basic-info``
annotation the koordlet writes on the node's NodeResourceTopology.

Upstream's rules:

* enabled = the label when it is set (``strconv.ParseBool``), else the strategy's
  ``enable`` (default false). Disabled: the annotation holds ``1.00``, as upstream's
  plug-in writes it. Not removing it matters: upstream's koordlet reads an absent ratio
  as "normalization off" and leaves the CFS quotas as they are, so on a node going from
  ``2.00`` to disabled its LS pods would stay throttled at half their limits; ``1.00``
  gives them their limits back;
* enabled: ``ratioModel[cpuModel]``, the field chosen by the CPU's state -- hyper-threading
  and turbo on: ``hyperThreadTurboEnabledRatio``; hyper-threading only:
  ``hyperThreadEnabledRatio``; turbo only: ``turboEnabledRatio``; neither: ``baseRatio``;
* the ratio must lie in [1, 5]; it is written with two decimals;
* anything missing or invalid (the label does not parse, no NodeResourceTopology, no
  ``cpu-basic-info``, a model without an entry or without the needed field, a ratio out of
  range) is an error: the node's annotation is left as it is. ``defaultRatio`` is accepted
  in the config but, as upstream, never used for a node;
* a new ratio within 0.01 of the node's current one is not written.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from koordinator.api.extension.annotations import AnnotationError
from koordinator.api.extension.node import (
    ANNOTATION_CPU_NORMALIZATION_RATIO,
    LABEL_CPU_NORMALIZATION_ENABLED,
    format_ratio,
    get_cpu_normalization_ratio,
)
from koordinator.api.extension.topology import CPUBasicInfo
from koordinator.api.goparse import GoParseError, parse_bool
from koordinator.api.sloconfig.types import CPUNormalizationStrategy

__all__ = [
    "DISABLED_RATIO",
    "MAX_RATIO",
    "MIN_RATIO",
    "NAME",
    "RATIO_EPSILON",
    "NormalizationResult",
    "calculate_normalization",
    "normalization_changed",
    "ratio_for_model",
]

NAME = "CPUNormalization"
MIN_RATIO = 1.0
MAX_RATIO = 5.0
#: ratios closer than this are the same ratio (upstream's NormalizationRatioDiffEpsilon)
RATIO_EPSILON = 0.01
#: what a node holds while normalization is disabled (upstream's defaultRatioStr)
DISABLED_RATIO = format_ratio(1.0)


class NormalizationError(ValueError):
    """The node's ratio cannot be computed; its annotation is left as it is."""


@dataclass(frozen=True, slots=True)
class NormalizationResult:
    """``ratio``: the annotation value to hold (``1.00`` with ``disabled``); ``None`` with
    ``error``: leave it as it is."""

    ratio: str | None
    error: str = ""
    disabled: bool = False


def ratio_for_model(info: CPUBasicInfo, strategy: CPUNormalizationStrategy) -> float:
    """The configured ratio of the node's CPU model and state; :class:`NormalizationError` when none."""
    if not strategy.ratio_model:
        raise NormalizationError("ratio model is nil")
    model = info.cpu_model
    cfg = strategy.ratio_model.get(model)
    if cfg is None:
        raise NormalizationError(f"no ratio for CPU {model}")
    if info.hyper_thread_enabled and info.turbo_enabled:
        value, field = cfg.hyper_thread_turbo_enabled_ratio, "HyperThreadTurboEnabledRatio"
    elif info.hyper_thread_enabled:
        value, field = cfg.hyper_thread_enabled_ratio, "HyperThreadEnabledRatio"
    elif info.turbo_enabled:
        value, field = cfg.turbo_enabled_ratio, "TurboEnabledRatio"
    else:
        value, field = cfg.base_ratio, "BaseRatio"
    if value is None:
        raise NormalizationError(f"missing {field} for CPU {model}")
    return float(value)


def _enabled(strategy: CPUNormalizationStrategy, labels: Mapping[str, str]) -> bool:
    raw = labels.get(LABEL_CPU_NORMALIZATION_ENABLED)
    if raw is not None:
        try:
            return parse_bool(raw)
        except GoParseError as exc:
            raise NormalizationError(f"label {LABEL_CPU_NORMALIZATION_ENABLED}: {exc}") from None
    return bool(strategy.enable)


def calculate_normalization(
    strategy: CPUNormalizationStrategy,
    labels: Mapping[str, str],
    basic_info: CPUBasicInfo | None,
    basic_info_problem: str = "",
) -> NormalizationResult:
    """The ratio of a node with ``labels`` whose NodeResourceTopology carries ``basic_info``.

    ``basic_info_problem`` says why ``basic_info`` is ``None`` (no NodeResourceTopology, an
    unreadable annotation); an empty one means the annotation is absent.
    """
    try:
        if not _enabled(strategy, labels):
            return NormalizationResult(DISABLED_RATIO, disabled=True)
        if basic_info is None:
            raise NormalizationError(basic_info_problem or "CPUBasicInfo is missing")
        ratio = ratio_for_model(basic_info, strategy)
        if ratio < MIN_RATIO:
            raise NormalizationError(f"the ratio {ratio} is too small (minimum {MIN_RATIO})")
        if ratio > MAX_RATIO:
            raise NormalizationError(f"the ratio {ratio} is too big (maximum {MAX_RATIO})")
    except NormalizationError as exc:
        return NormalizationResult(None, str(exc))
    return NormalizationResult(format_ratio(ratio))


def normalization_changed(current: str | None, desired: str) -> bool:
    """Whether ``desired`` must replace the node's ``current`` annotation (upstream's NeedSyncMeta)."""
    old = ratio_value(current)
    if old is None:  # absent, or unreadable: replaced
        return True
    new = float(desired)
    return old > new + RATIO_EPSILON or old < new - RATIO_EPSILON


def held_ratio(current: str | None, result: NormalizationResult) -> str | None:
    """The annotation a node with ``current`` holds after ``result``: ``current`` when the
    ratio could not be computed or is within :data:`RATIO_EPSILON` of it, the new ratio
    (``1.00`` when normalization is disabled) otherwise."""
    if result.error or result.ratio is None:
        return current
    return result.ratio if normalization_changed(current, result.ratio) else current


def ratio_value(text: str | None) -> float | None:
    """The ratio an annotation value stands for; None when absent or unreadable."""
    try:
        return get_cpu_normalization_ratio({ANNOTATION_CPU_NORMALIZATION_RATIO: text} if text else None)
    except AnnotationError:
        return None
