"""ElasticQuotaArgs: the ElasticQuota plug-in's pluginConfig args, defaulted and validated.

Field names, defaults and the checks follow upstream's ``v1`` ``ElasticQuotaArgs``,
``SetDefaults_ElasticQuotaArgs`` and ``ValidateElasticQuotaArgs``; durations are Go
duration strings (``"120s"``) and resource lists the usual JSON quantities. Anything
upstream would refuse raises :class:`~controlplane.scheduler.plugins.args.ArgsError` with
the field's path.

``hookPlugins`` entries are parsed and checked as upstream's ``initHookPlugins`` checks
them (a key and a factory key); resolving a factory is left to whoever builds the plug-in.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from controlplane.scheduler.plugins.args import ArgsError, boolean, duration
from koordinator.api.extension.constants import KOORDINATOR_SYSTEM_NAMESPACE
from koordinator.api.quantity import Format, Quantity
from koordinator.api.resourcelist import ResourceList, ResourceListError, parse

__all__ = [
    "DEFAULT_QUOTA_GROUP_MAX",
    "NAME",
    "SYSTEM_QUOTA_GROUP_MAX",
    "ElasticQuotaArgs",
    "HookPluginConf",
    "elastic_quota_args",
]

NAME = "ElasticQuota"

_MAX_INT64 = (1 << 63) - 1


def _default_quota_group_max() -> ResourceList:
    # upstream: cpu and memory NewQuantity(MaxInt64/5, DecimalSI)
    return {
        "cpu": Quantity.from_int(_MAX_INT64 // 5, Format.DECIMAL_SI),
        "memory": Quantity.from_int(_MAX_INT64 // 5, Format.DECIMAL_SI),
    }


def _system_quota_group_max() -> ResourceList:
    # upstream: cpu DecimalSI, memory BinarySI
    return {
        "cpu": Quantity.from_int(_MAX_INT64 // 5, Format.DECIMAL_SI),
        "memory": Quantity.from_int(_MAX_INT64 // 5, Format.BINARY_SI),
    }


DEFAULT_QUOTA_GROUP_MAX = _default_quota_group_max()
SYSTEM_QUOTA_GROUP_MAX = _system_quota_group_max()

_FIELDS = frozenset(
    {
        "apiVersion",
        "kind",
        "delayEvictTime",
        "revokePodInterval",
        "defaultQuotaGroupMax",
        "systemQuotaGroupMax",
        "quotaGroupNamespace",
        "monitorAllQuotas",
        "enableCheckParentQuota",
        "enableRuntimeQuota",
        "enableMinQuotaScale",
        "disableDefaultQuotaPreemption",
        "enableQueueHint",
        "quotaSnapshotUpdateInterval",
        "hookPlugins",
    }
)


@dataclass(frozen=True)
class HookPluginConf:
    """One ``hookPlugins`` entry: the plug-in's key, the factory building it, the factory's args."""

    key: str
    factory_key: str
    factory_args: str = ""


@dataclass(frozen=True)
class ElasticQuotaArgs:
    """ElasticQuotaArgs with upstream's defaults; durations in seconds."""

    #: how long a quota's used may exceed its runtime before pods are revoked
    delay_evict_time: float = 120.0
    #: how often the overuse revoke controller looks
    revoke_pod_interval: float = 1.0
    default_quota_group_max: ResourceList = field(default_factory=_default_quota_group_max)
    system_quota_group_max: ResourceList = field(default_factory=_system_quota_group_max)
    #: where the default, system and root quotas live
    quota_group_namespace: str = KOORDINATOR_SYSTEM_NAMESPACE
    #: run the overuse revoke controller
    monitor_all_quotas: bool = False
    #: PreFilter also checks every ancestor's used against its runtime
    enable_check_parent_quota: bool = False
    #: PreFilter limits by runtime (False: by max)
    enable_runtime_quota: bool = True
    #: scale children's min down when they add up to more than the parent's total
    enable_min_quota_scale: bool = True
    #: pods of the default quota are never preemption victims
    disable_default_quota_preemption: bool = True
    enable_queue_hint: bool = False
    quota_snapshot_update_interval: float = 120.0
    hook_plugins: tuple[HookPluginConf, ...] = ()


def _duration(raw: Mapping[str, Any], key: str, path: str, default: float, label: str) -> float:
    if key not in raw or raw[key] is None:
        return default
    seconds = duration(raw[key], f"{path}.{key}", "120s")
    if seconds < 0:
        raise ArgsError(f"{path}.{key}: elasticQuotaArgs error, {label} should be a positive value")
    return seconds


def _resources(raw: Mapping[str, Any], key: str, path: str, default: ResourceList) -> ResourceList:
    value = raw.get(key)
    if value is None:
        return dict(default)
    try:
        resources = parse(value, path=f"{path}.{key}")
    except ResourceListError as err:
        raise ArgsError(str(err)) from None
    if not resources:
        # upstream defaults an empty list (len == 0)
        return dict(default)
    for name in sorted(resources):
        if resources[name].sign() < 0:
            raise ArgsError(
                f"{path}.{key}: elasticQuotaArgs error, {key} should be a positive value, "
                f"resourceName:{name}, got {resources[name]}"
            )
    return resources


def _hook_plugins(raw: Mapping[str, Any], path: str) -> tuple[HookPluginConf, ...]:
    value = raw.get("hookPlugins")
    if value is None:
        return ()
    if not isinstance(value, list):
        raise ArgsError(f"{path}.hookPlugins: must be a list of {{key, factoryKey, factoryArgs}}")
    confs: list[HookPluginConf] = []
    for i, item in enumerate(value):
        where = f"{path}.hookPlugins[{i}]"
        if not isinstance(item, Mapping):
            raise ArgsError(f"{where}: must be a mapping with key, factoryKey and factoryArgs")
        unknown = sorted(set(item) - {"key", "factoryKey", "factoryArgs"})
        if unknown:
            raise ArgsError(f"{where}: unknown field(s) {unknown}")
        key, factory, factory_args = (
            item.get("key", ""),
            item.get("factoryKey", ""),
            item.get("factoryArgs", ""),
        )
        for name, text in (("key", key), ("factoryKey", factory), ("factoryArgs", factory_args)):
            if not isinstance(text, str):
                raise ArgsError(f"{where}.{name}: must be a string")
        if not key:
            raise ArgsError(f"{where}.key: failed to initialize index-{i} hook plugin: key is empty")
        if not factory:
            raise ArgsError(
                f"{where}.factoryKey: failed to initialize hook plugin {key}: factory key is empty"
            )
        confs.append(HookPluginConf(key, factory, factory_args))
    return tuple(confs)


def elastic_quota_args(raw: Mapping[str, Any] | None, path: str = NAME) -> ElasticQuotaArgs:
    """ElasticQuotaArgs from a pluginConfig ``args`` mapping (absent: all defaults)."""
    raw = raw or {}
    if not isinstance(raw, Mapping):
        raise ArgsError(f"{path}: must be a mapping")
    unknown = sorted(set(raw) - _FIELDS)
    if unknown:
        raise ArgsError(f"{path}: unknown field(s) {unknown}")
    namespace = raw.get("quotaGroupNamespace")
    if namespace is not None and not isinstance(namespace, str):
        raise ArgsError(f"{path}.quotaGroupNamespace: must be a string, got {namespace!r}")
    interval = _duration(raw, "quotaSnapshotUpdateInterval", path, 120.0, "QuotaSnapshotUpdateInterval")
    if interval == 0:
        # a zero period would make upstream's wait.Until loop without pause
        raise ArgsError(f"{path}.quotaSnapshotUpdateInterval: must be a positive duration")
    return ElasticQuotaArgs(
        delay_evict_time=_duration(raw, "delayEvictTime", path, 120.0, "DelayEvictTime"),
        revoke_pod_interval=_duration(raw, "revokePodInterval", path, 1.0, "RevokePodCycle"),
        default_quota_group_max=_resources(raw, "defaultQuotaGroupMax", path, DEFAULT_QUOTA_GROUP_MAX),
        system_quota_group_max=_resources(raw, "systemQuotaGroupMax", path, SYSTEM_QUOTA_GROUP_MAX),
        quota_group_namespace=namespace or KOORDINATOR_SYSTEM_NAMESPACE,
        monitor_all_quotas=boolean(raw, "monitorAllQuotas", path, False),
        enable_check_parent_quota=boolean(raw, "enableCheckParentQuota", path, False),
        enable_runtime_quota=boolean(raw, "enableRuntimeQuota", path, True),
        enable_min_quota_scale=boolean(raw, "enableMinQuotaScale", path, True),
        disable_default_quota_preemption=boolean(raw, "disableDefaultQuotaPreemption", path, True),
        enable_queue_hint=boolean(raw, "enableQueueHint", path, False),
        quota_snapshot_update_interval=interval,
        hook_plugins=_hook_plugins(raw, path),
    )
