"""Upstream NodeSLO defaults and the koordlet's merge of a NodeSLO spec onto them.

Defaults (``sloconfig.DefaultNodeSLOSpecConfig``):

* ``resourceUsedThresholdWithBE``: disabled, CPU suppress at 65 % with the cpuset policy,
  memory eviction at 70 %, CPU eviction by real limit; every other threshold unset.
* ``resourceQOSStrategy``: policies groupIdentity/tc; per class (all disabled) CPU QoS
  LSR/LS = group identity 2 with core expeller, BE = -1, SYSTEM = 0; resctrl 0-100 % LLC and
  100 % MBA (BE 0-30 % LLC); memory QoS watermark ratio 95, scale 20 permill, min adj -25
  (BE 50; SYSTEM ratio 0, scale 50, adj 0); block I/O disabled with no blocks; network QoS all 0.
  ``cgroupRoot`` only has block I/O disabled.
* ``cpuBurstStrategy``: policy none, burst 1000 %, cfs quota burst 300 %, period -1,
  share-pool threshold 50 %.
* ``systemStrategy``: ``totalNetworkBandwidth`` 0, every sysctl unset.

:func:`merge_node_slo_spec` is what the koordlet does with the NodeSLO it receives: each
section is overlaid on its default separately, ``extensions`` key by key, host applications
pass through, and then for LSR, LS and BE every disabled CPU, resctrl and memory QoS config is
replaced by the "none" config that turns the feature off on the host.
"""

from __future__ import annotations

from koordinator.api.features import NODE_SLO_SWITCHED_FEATURES
from koordinator.api.model import JSON
from koordinator.api.quantity import Quantity
from koordinator.api.sloconfig.merge import merge
from koordinator.api.types.slo import (
    CPUQOS,
    BlkIOQOSCfg,
    CPUBurstStrategy,
    CPUQOSCfg,
    MemoryQOS,
    MemoryQOSCfg,
    NetworkQOSCfg,
    NodeSLOSpec,
    ResctrlQOS,
    ResctrlQOSCfg,
    ResourceQOS,
    ResourceQOSPolicies,
    ResourceQOSStrategy,
    ResourceThresholdStrategy,
    SystemStrategy,
)

__all__ = [
    "default_cpu_burst_strategy",
    "default_node_slo_spec",
    "default_resource_qos_strategy",
    "default_resource_threshold_strategy",
    "default_system_strategy",
    "feature_disabled_by_node_slo",
    "merge_node_slo_spec",
    "none_cpu_qos",
    "none_memory_qos",
    "none_resctrl_qos",
]


def default_resource_threshold_strategy() -> ResourceThresholdStrategy:
    return ResourceThresholdStrategy(
        enable=False,
        cpu_suppress_threshold_percent=65,
        cpu_suppress_policy="cpuset",
        memory_evict_threshold_percent=70,
        cpu_evict_policy="evictByRealLimit",
    )


def _cpu_qos(group_identity: int, core_expeller: bool) -> CPUQOSCfg:
    return CPUQOSCfg(enable=False, group_identity=group_identity, sched_idle=0, core_expeller=core_expeller)


def _resctrl_qos(end_percent: int) -> ResctrlQOSCfg:
    return ResctrlQOSCfg(
        enable=False, cat_range_start_percent=0, cat_range_end_percent=end_percent, mba_percent=100
    )


def _memory_qos(ratio: int, scale_permill: int, min_adj: int) -> MemoryQOSCfg:
    return MemoryQOSCfg(
        enable=False,
        min_limit_percent=0,
        low_limit_percent=0,
        throttling_percent=0,
        wmark_ratio=ratio,
        wmark_scale_permill=scale_permill,
        wmark_min_adj=min_adj,
        priority_enable=0,
        priority=0,
        oom_kill_group=0,
    )


def _disabled_blkio() -> BlkIOQOSCfg:
    return BlkIOQOSCfg(enable=False)


def _disabled_network() -> NetworkQOSCfg:
    return NetworkQOSCfg(enable=False, ingress_request=0, ingress_limit=0, egress_request=0, egress_limit=0)


def _class(cpu: CPUQOSCfg, resctrl: ResctrlQOSCfg, memory: MemoryQOSCfg) -> ResourceQOS:
    return ResourceQOS(
        cpu_qos=cpu,
        resctrl_qos=resctrl,
        memory_qos=memory,
        blkio_qos=_disabled_blkio(),
        network_qos=_disabled_network(),
    )


def default_resource_qos_strategy() -> ResourceQOSStrategy:
    return ResourceQOSStrategy(
        policies=ResourceQOSPolicies(cpu_policy="groupIdentity", net_qos_policy="tc"),
        lsr_class=_class(_cpu_qos(2, True), _resctrl_qos(100), _memory_qos(95, 20, -25)),
        ls_class=_class(_cpu_qos(2, True), _resctrl_qos(100), _memory_qos(95, 20, -25)),
        be_class=_class(_cpu_qos(-1, False), _resctrl_qos(30), _memory_qos(95, 20, 50)),
        system_class=_class(_cpu_qos(0, False), _resctrl_qos(100), _memory_qos(0, 50, 0)),
        cgroup_root=ResourceQOS(blkio_qos=_disabled_blkio()),
    )


def default_cpu_burst_strategy() -> CPUBurstStrategy:
    return CPUBurstStrategy(
        policy="none",
        cpu_burst_percent=1000,
        cfs_quota_burst_percent=300,
        cfs_quota_burst_period_seconds=-1,
        share_pool_threshold_percent=50,
    )


def default_system_strategy() -> SystemStrategy:
    return SystemStrategy(total_network_bandwidth=Quantity())


def default_node_slo_spec() -> NodeSLOSpec:
    return NodeSLOSpec(
        resource_used_threshold_with_be=default_resource_threshold_strategy(),
        resource_qos_strategy=default_resource_qos_strategy(),
        cpu_burst_strategy=default_cpu_burst_strategy(),
        system_strategy=default_system_strategy(),
    )


# ---- "none" configs: what a disabled QoS class is reset to ------------------------------------


def none_cpu_qos() -> CPUQOS:
    return CPUQOS(group_identity=0, sched_idle=0, core_expeller=False)


def none_resctrl_qos() -> ResctrlQOS:
    return ResctrlQOS(cat_range_start_percent=0, cat_range_end_percent=100, mba_percent=100)


def none_memory_qos() -> MemoryQOS:
    return MemoryQOS(
        min_limit_percent=0,
        low_limit_percent=0,
        throttling_percent=0,
        wmark_ratio=0,
        wmark_scale_permill=50,
        wmark_min_adj=0,
        priority_enable=0,
        priority=0,
        oom_kill_group=0,
    )


def _reset_disabled(qos: ResourceQOS | None) -> None:
    if qos is None:
        return
    if qos.cpu_qos is not None and not qos.cpu_qos.enable:
        qos.cpu_qos = CPUQOSCfg(enable=qos.cpu_qos.enable, **vars(none_cpu_qos()))
    if qos.resctrl_qos is not None and not qos.resctrl_qos.enable:
        qos.resctrl_qos = ResctrlQOSCfg(enable=qos.resctrl_qos.enable, **vars(none_resctrl_qos()))
    if qos.memory_qos is not None and not qos.memory_qos.enable:
        qos.memory_qos = MemoryQOSCfg(enable=qos.memory_qos.enable, **vars(none_memory_qos()))


def _merge_extensions(base: JSON | None, override: JSON | None) -> JSON | None:
    if not override:
        return base
    merged = dict(base or {})
    merged.update(override)
    return merged


def merge_node_slo_spec(spec: NodeSLOSpec | None) -> NodeSLOSpec:
    """The effective spec the koordlet acts on: ``spec`` overlaid on the defaults, section by section."""
    defaults = default_node_slo_spec()
    given = spec or NodeSLOSpec()
    merged = NodeSLOSpec(
        resource_used_threshold_with_be=merge(
            default_resource_threshold_strategy(), given.resource_used_threshold_with_be
        ),
        resource_qos_strategy=merge(default_resource_qos_strategy(), given.resource_qos_strategy),
        cpu_burst_strategy=merge(default_cpu_burst_strategy(), given.cpu_burst_strategy),
        system_strategy=merge(default_system_strategy(), given.system_strategy),
        extensions=_merge_extensions(defaults.extensions, given.extensions),
        host_applications=[app.copy() for app in given.host_applications],
    )
    strategy = merged.resource_qos_strategy
    assert strategy is not None
    for qos in (strategy.lsr_class, strategy.ls_class, strategy.be_class):
        _reset_disabled(qos)
    return merged


def feature_disabled_by_node_slo(spec: NodeSLOSpec | None, feature: str) -> tuple[bool, str]:
    """Whether the NodeSLO turns ``feature`` off (``IsFeatureDisabled``), and why.

    The BE suppress/evict gates need ``resourceUsedThresholdWithBE.enable`` to be true; a
    missing NodeSLO, a missing switch or a feature the NodeSLO does not govern counts as
    disabled, with the reason in the second element ("" when the switch says enabled/disabled).
    """
    if spec is None or spec == NodeSLOSpec():
        return True, "no NodeSLO spec to read the feature switch from"
    if feature not in NODE_SLO_SWITCHED_FEATURES:
        return True, f"the NodeSLO does not switch feature {feature}"
    threshold = spec.resource_used_threshold_with_be
    if threshold is None or threshold.enable is None:
        return True, "resourceUsedThresholdWithBE.enable is not set"
    return not threshold.enable, ""
