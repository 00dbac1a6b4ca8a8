"""MigrationControllerArgs (``descheduler/v1alpha2``): parsing, upstream's defaults and
validation (``v1alpha2/defaults.go``, ``validation_pluginargs.go``).

Defaults: ``maxConcurrentReconciles`` 1, ``maxMigratingPerNode`` 2, ``defaultJobMode``
ReservationFirst, ``defaultJobTTL`` 5m, ``evictionPolicy`` Eviction, ``evictQPS`` 10 (a
number or a numeric string), ``evictBurst`` 1, ``schedulerNames`` [koord-scheduler],
``objectLimiters`` {workload: {duration: 5m}} (only when none is given), ``arbitrationArgs``
{enabled: true, interval: 500ms} when it is not given at all (``enabled`` is a plain bool in
upstream: a given ``arbitrationArgs`` without it is disabled; a missing ``interval`` is 500ms
either way). The per-namespace, global and per-workload limits are off unless set; a limit of
0 is off too.

``skipEvictionGates`` names the gates of :data:`EVICTION_GATES` that are not applied (the
names are this implementation's: upstream does not publish its list).
"""

from __future__ import annotations

import math
import re
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
    strings,
)

__all__ = [
    "EVICTION_GATES",
    "EVICTION_POLICIES",
    "MODE_EVICT_DIRECTLY",
    "MODE_RESERVATION_FIRST",
    "IntOrPercent",
    "MigrationControllerArgs",
    "ObjectLimiter",
    "parse_args",
]

NAME = "MigrationController"
MODE_RESERVATION_FIRST = "ReservationFirst"
MODE_EVICT_DIRECTLY = "EvictDirectly"
POLICY_EVICTION = "Eviction"
POLICY_DELETE = "Delete"
POLICY_SOFT_EVICTION = "SoftEviction"
EVICTION_POLICIES = (POLICY_EVICTION, POLICY_DELETE, POLICY_SOFT_EVICTION)
LIMITER_WORKLOAD = "workload"
LIMITER_NAMESPACE = "namespace"

#: the gates a pod passes before a job is made for it, or before a waiting job runs
EVICTION_GATES = (
    "Namespaces",
    "LabelSelector",
    "BarePods",
    "SystemCritical",
    "PriorityThreshold",
    "LocalStorage",
    "PVC",
    "NodeFit",
    "EvictionCost",
    "ExpectedReplicas",
    "MaxMigratingPerNode",
    "MaxMigratingPerNamespace",
    "MaxMigratingGlobally",
    "MaxMigratingPerWorkload",
    "MaxUnavailablePerWorkload",
    "ObjectLimiter",
)

_PERCENT = re.compile(r"^(\d+)%$")


@dataclass(frozen=True)
class IntOrPercent:
    """An ``IntOrString`` that is a count or a percentage of the workload's replicas."""

    value: int
    percent: bool = False

    def scaled(self, total: int) -> int:
        """``GetScaledValueFromIntOrPercent`` rounding down."""
        return math.floor(self.value * total / 100) if self.percent else self.value


@dataclass(frozen=True)
class ObjectLimiter:
    duration_s: float
    max_migrating: IntOrPercent | None = None


@dataclass(frozen=True)
class MigrationControllerArgs:
    dry_run: bool = False
    max_concurrent_reconciles: int = 1
    evict_failed_bare_pods: bool = False
    evict_all_bare_pods: bool = False
    evict_local_storage_pods: bool = False
    evict_system_critical_pods: bool = False
    ignore_pvc_pods: bool = False
    priority_threshold: int | None = None
    priority_threshold_name: str = ""
    label_selector: Mapping[str, Any] | None = None
    include_namespaces: tuple[str, ...] = ()
    exclude_namespaces: tuple[str, ...] = ()
    node_fit: bool = False
    node_selector: str = ""
    max_migrating_per_node: int | None = 2
    max_migrating_per_namespace: int | None = None
    max_migrating_globally: int | None = None
    max_migrating_per_workload: IntOrPercent | None = None
    max_unavailable_per_workload: IntOrPercent | None = None
    skip_check_expected_replicas: bool = False
    object_limiters: Mapping[str, ObjectLimiter] = field(
        default_factory=lambda: {LIMITER_WORKLOAD: ObjectLimiter(300.0)}
    )
    default_job_mode: str = MODE_RESERVATION_FIRST
    default_job_ttl_s: float = 300.0
    scheduler_names: tuple[str, ...] = ("koord-scheduler",)
    evict_qps: float = 10.0
    evict_burst: int = 1
    eviction_policy: str = POLICY_EVICTION
    default_delete_options: Mapping[str, Any] | None = None
    arbitration_enabled: bool = True
    arbitration_interval_s: float = 0.5
    skip_eviction_gates: frozenset[str] = frozenset()

    def gate(self, name: str) -> bool:
        """Whether the gate applies (not skipped)."""
        return name not in self.skip_eviction_gates


def _int_or_percent(raw: Mapping[str, Any], key: str, path: str) -> IntOrPercent | None:
    value = raw.get(key)
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return IntOrPercent(value)
    if isinstance(value, str):
        match = _PERCENT.match(value)
        if match:
            return IntOrPercent(int(match.group(1)), percent=True)
        raise ArgsError(
            f"{path}.{key}: Invalid value: {value!r}: {key} is invalid, err: invalid value for IntOrString: "
            "invalid type: string is not a percentage"
        )
    raise ArgsError(
        f"{path}.{key}: Invalid value: {value!r}: {key} is invalid, err: invalid value for IntOrString"
    )


def _non_negative(raw: Mapping[str, Any], key: str, path: str, default: int | None) -> int | None:
    value = integer(raw, key, path, default)
    if value is not None and value < 0:
        raise ArgsError(f"{path}.{key}: Invalid value: {value}: {key} should be greater or equal 0")
    return value


def _limiters(raw: Any, path: str) -> dict[str, ObjectLimiter]:
    value = mapping(raw, path)
    out: dict[str, ObjectLimiter] = {}
    for kind, entry in value.items():
        if kind not in (LIMITER_WORKLOAD, LIMITER_NAMESPACE):
            raise ArgsError(
                f"{path}[{kind}]: Unsupported value: {kind!r}: supported values: workload, namespace"
            )
        where = f"{path}[{kind}]"
        entry = mapping(entry, where)
        window = duration(entry, "duration", where, 0.0) or 0.0
        out[kind] = ObjectLimiter(window, _int_or_percent(entry, "maxMigrating", where))
    return out


def parse_args(raw: Any, path: str = "args") -> MigrationControllerArgs:
    args = mapping(raw, path)
    reconciles = integer(args, "maxConcurrentReconciles", path, 1)
    assert reconciles is not None
    if reconciles < 1:
        raise ArgsError(
            f"{path}.maxConcurrentReconciles: Invalid value: {reconciles}: "
            "maxConcurrentReconciles should be greater than or equal to 1"
        )
    include, exclude = namespaces(args, "namespaces", path)
    mode = args.get("defaultJobMode") or MODE_RESERVATION_FIRST
    if mode not in (MODE_RESERVATION_FIRST, MODE_EVICT_DIRECTLY):
        raise ArgsError(
            f"{path}.defaultJobMode: Invalid value: {mode!r}: "
            "defaultJobMode must be ReservationFirst or EvictDirectly"
        )
    ttl = duration(args, "defaultJobTTL", path, 300.0)
    assert ttl is not None
    if ttl < 0:
        raise ArgsError(
            f"{path}.defaultJobTTL: Invalid value: {ttl:g}s: defaultJobTTL should be positive or zero"
        )
    qps_raw = args.get("evictQPS", 10.0)
    try:
        if isinstance(qps_raw, bool):
            raise ValueError
        qps = float(qps_raw)
    except (TypeError, ValueError):
        raise ArgsError(f"{path}.evictQPS: Invalid value: {qps_raw!r}: must be a number") from None
    if not qps > 0 or not math.isfinite(qps):
        raise ArgsError(f"{path}.evictQPS: Invalid value: {qps_raw!r}: evictQPS must be greater than 0")
    burst = integer(args, "evictBurst", path, 1)
    assert burst is not None
    if burst <= 0:
        raise ArgsError(f"{path}.evictBurst: Invalid value: {burst}: evictBurst must be greater than 0")
    policy = args.get("evictionPolicy") or POLICY_EVICTION
    if policy not in EVICTION_POLICIES:
        raise ArgsError(
            f"{path}.evictionPolicy: Unsupported value: {policy!r}: supported values: "
            + ", ".join(EVICTION_POLICIES)
        )
    threshold = mapping(args.get("priorityThreshold"), f"{path}.priorityThreshold")
    arbitration = mapping(args.get("arbitrationArgs"), f"{path}.arbitrationArgs")
    skip = strings(args, "skipEvictionGates", path)
    for gate in skip:
        if gate not in EVICTION_GATES:
            raise ArgsError(
                f"{path}.skipEvictionGates: Unsupported value: {gate!r}: supported values: "
                + ", ".join(EVICTION_GATES)
            )
    delete_options = args.get("defaultDeleteOptions")
    limiters = _limiters(args.get("objectLimiters"), f"{path}.objectLimiters") or {
        LIMITER_WORKLOAD: ObjectLimiter(300.0)
    }
    names = strings(args, "schedulerNames", path) or ("koord-scheduler",)
    node_selector = args.get("nodeSelector") or ""
    if not isinstance(node_selector, str):
        raise ArgsError(f"{path}.nodeSelector: must be a label selector string")
    return MigrationControllerArgs(
        dry_run=boolean(args, "dryRun", path, False),
        max_concurrent_reconciles=reconciles,
        evict_failed_bare_pods=boolean(args, "evictFailedBarePods", path, False),
        evict_all_bare_pods=boolean(args, "evictAllBarePods", path, False),
        evict_local_storage_pods=boolean(args, "evictLocalStoragePods", path, False),
        evict_system_critical_pods=boolean(args, "evictSystemCriticalPods", path, False),
        ignore_pvc_pods=boolean(args, "ignorePvcPods", path, False),
        priority_threshold=integer(threshold, "value", f"{path}.priorityThreshold", None),
        priority_threshold_name=str(threshold.get("name") or ""),
        label_selector=label_selector(args, "labelSelector", path),
        include_namespaces=include,
        exclude_namespaces=exclude,
        node_fit=boolean(args, "nodeFit", path, False),
        node_selector=node_selector,
        max_migrating_per_node=_non_negative(args, "maxMigratingPerNode", path, 2),
        max_migrating_per_namespace=_non_negative(args, "maxMigratingPerNamespace", path, None),
        max_migrating_globally=_non_negative(args, "maxMigratingGlobally", path, None),
        max_migrating_per_workload=_int_or_percent(args, "maxMigratingPerWorkload", path),
        max_unavailable_per_workload=_int_or_percent(args, "maxUnavailablePerWorkload", path),
        skip_check_expected_replicas=boolean(args, "skipCheckExpectedReplicas", path, False),
        object_limiters=limiters,
        default_job_mode=mode,
        default_job_ttl_s=ttl,
        scheduler_names=names,
        evict_qps=qps,
        evict_burst=burst,
        eviction_policy=policy,
        default_delete_options=mapping(delete_options, f"{path}.defaultDeleteOptions")
        if delete_options
        else None,
        arbitration_enabled=boolean(
            arbitration, "enabled", f"{path}.arbitrationArgs", args.get("arbitrationArgs") is None
        ),
        arbitration_interval_s=duration(arbitration, "interval", f"{path}.arbitrationArgs", 0.5) or 0.5,
        skip_eviction_gates=frozenset(skip),
    )
