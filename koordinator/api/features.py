"""Feature gates of every component, with upstream names, defaults and stages.

One table per process family, as upstream registers them: the koordlet has its own
gate set (its QoS, collector and runtime-hook gates), while koord-manager,
koord-scheduler and koord-descheduler share one registry (upstream adds the manager,
scheduler and descheduler gates to the same global gate). ``FeatureGates.parse``
accepts the ``--feature-gates`` syntax: ``Name=true|false,...`` plus ``AllAlpha`` and
``AllBeta``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum


class Stage(StrEnum):
    ALPHA = "ALPHA"
    BETA = "BETA"
    GA = "GA"
    DEPRECATED = "DEPRECATED"


@dataclass(frozen=True)
class FeatureSpec:
    default: bool
    stage: Stage
    #: GA and some deprecated gates cannot be changed from their default.
    locked: bool = False


ALL_ALPHA = "AllAlpha"
ALL_BETA = "AllBeta"


class FeatureGateError(ValueError):
    """A ``--feature-gates`` value names an unknown gate or a value that is not a bool."""


def _a(default: bool = False) -> FeatureSpec:
    return FeatureSpec(default, Stage.ALPHA)


def _b(default: bool = True) -> FeatureSpec:
    return FeatureSpec(default, Stage.BETA)


#: pkg/features/koordlet_features.go plus the runtime-hook gates of kl/runtimehooks/config.go,
#: which upstream adds to the koordlet's gate set.
KOORDLET_FEATURES: Mapping[str, FeatureSpec] = {
    "AuditEvents": _a(),
    "AuditEventsHTTPHandler": _a(),
    "BECPUSuppress": _b(True),
    "BECPUEvict": _a(),
    "BEMemoryEvict": _a(),
    "CPUEvict": _a(),
    "MemoryEvict": _a(),
    "CPUAllocatableEvict": _a(),
    "MemoryAllocatableEvict": _a(),
    "BECPUManager": _a(),
    "CPUBurst": _b(True),
    "SystemConfig": _a(),
    "RdtResctrl": _b(True),
    "ResctrlCollector": _a(),
    "CgroupReconcile": _a(),
    "NodeTopologyReport": _b(True),
    "Accelerators": _a(),
    "RDMADevices": _a(),
    "CPICollector": _a(),
    "Libpfm4": _a(),
    "PSICollector": _a(),
    "BlkIOReconcile": _a(),
    "ColdPageCollector": _a(),
    "HugePageReport": _a(),
    "PodResourcesProxy": _a(),
    "HamiCoreVGPUMonitor": _a(),
    "PerCPUMetric": _a(),
    "NodeMetricPromMetrics": _a(),
    # runtime hooks
    "GroupIdentity": _b(True),
    "CPUSetAllocator": _b(True),
    "BatchResource": _b(True),
    "GPUEnvInject": _a(),
    "RDMADeviceInject": _a(),
    "CPUNormalization": _a(),
    "CoreSched": _a(),
    "TerwayQoS": _a(),
    "TCNetworkQoS": _a(),
    "Resctrl": _a(),
    "OOMScoreAdj": _a(),
}

#: Koordlet gates that also need the NodeSLO switch ``resourceUsedThresholdWithBE.enable`` to be true
#: (upstream ``IsFeatureDisabled``); see ``sloconfig.nodeslo.feature_disabled_by_node_slo``.
NODE_SLO_SWITCHED_FEATURES: frozenset[str] = frozenset(
    {
        "BECPUSuppress",
        "BECPUEvict",
        "BEMemoryEvict",
        "CPUEvict",
        "MemoryEvict",
        "CPUAllocatableEvict",
        "MemoryAllocatableEvict",
    }
)

#: pkg/features/features.go (manager, webhooks) and scheduler_features.go / descheduler gates,
#: one registry as upstream.
CONTROL_PLANE_FEATURES: Mapping[str, FeatureSpec] = {
    # webhooks
    "PodMutatingWebhook": _b(True),
    "PodValidatingWebhook": _b(True),
    "ElasticMutatingWebhook": _b(True),
    "ElasticValidatingWebhook": _b(True),
    "NodeMutatingWebhook": _a(),
    "NodeValidatingWebhook": _a(),
    "ConfigMapValidatingWebhook": _a(),
    "ReservationMutatingWebhook": _a(),
    "BindingAdmissionWebhook": _a(),
    "WebhookFramework": _b(True),
    # colocation profile
    "ColocationProfileSkipMutatingResources": _a(),
    "ColocationProfileSkipValidatingPriority": _a(),
    "ColocationProfileController": _a(),
    # pod webhook plug-ins
    "EnablePodEnhancedValidator": _a(),
    "ValidatePodDeviceResource": _a(),
    "DisableExtendedResourceSpec": _a(),
    "DisableDeviceResourceSpec": _a(),
    # elastic quota
    "MultiQuotaTree": _a(),
    "ElasticQuotaIgnorePodOverhead": _a(),
    "ElasticQuotaIgnoreTerminatingPod": _a(),
    "ElasticQuotaImmediateIgnoreTerminatingPod": _a(),
    "ElasticQuotaGuaranteeUsage": _a(),
    "ElasticQuotaEnableUpdateResourceKey": _a(),
    "ElasticQuotaEvaluationTransformPod": _a(),
    "DisableDefaultQuota": _a(),
    "SupportParentQuotaSubmitPod": _a(),
    "EnableQuotaAdmission": _a(),
    "EnableQuotaAdmissionOnUpdate": _a(),
    # devices
    # upstream registers it Alpha but on by default
    "EnableSyncGPUSharedResource": _a(True),
    "DevicePluginAdaption": _a(),
    # informer transformers (upstream registers them off by default)
    "PriorityTransformer": _a(),
    "PreemptionPolicyTransformer": _a(),
    "ReplaceResourcesTransformer": _a(),
    # scheduler: reservation
    "LazyReservationRestore": _a(),
    "OmitNodeLabelsForReservation": _a(),
    "SkipReservationFitsNode": _a(),
    "CleanExpiredReservationAllocated": _a(),
    # scheduler: gang
    "GangPendingPodsConditionPatch": _b(True),
    "EnableInlineBatchSchedule": _a(),
    "EnableBatchScheduleNodeSnapshot": _b(True),
    # scheduler: misc
    "ResizePod": _a(),
    "DynamicSchedulerCheck": _b(True),
    "CrossSchedulerNomination": _a(),
    "SkipFilterWithNominatedPods": _a(),
    "SyncBarrier": _a(),
    # descheduler
    "DisablePVCReservation": _a(),
}


class FeatureGates:
    """The effective gate values of one process, built from a table and overrides."""

    def __init__(self, known: Mapping[str, FeatureSpec], overrides: Mapping[str, bool] | None = None):
        self._known = known
        self._enabled = {name: spec.default for name, spec in known.items()}
        if overrides:
            self.set(overrides)

    @property
    def known(self) -> Mapping[str, FeatureSpec]:
        return self._known

    def enabled(self, name: str) -> bool:
        try:
            return self._enabled[name]
        except KeyError:
            raise FeatureGateError(f"unrecognized feature gate: {name}") from None

    def as_dict(self) -> dict[str, bool]:
        return dict(self._enabled)

    def set(self, overrides: Mapping[str, bool]) -> None:
        """Apply overrides: ``AllAlpha``/``AllBeta`` first, then the named gates."""
        unknown = [n for n in overrides if n not in self._known and n not in (ALL_ALPHA, ALL_BETA)]
        if unknown:
            raise FeatureGateError(f"unrecognized feature gate: {unknown[0]}")
        for group, stage in ((ALL_ALPHA, Stage.ALPHA), (ALL_BETA, Stage.BETA)):
            if group in overrides:
                for name, spec in self._known.items():
                    if spec.stage is stage and not spec.locked:
                        self._enabled[name] = overrides[group]
        for name, value in overrides.items():
            if name in (ALL_ALPHA, ALL_BETA):
                continue
            spec = self._known[name]
            if spec.locked and value != spec.default:
                raise FeatureGateError(
                    f"cannot set feature gate {name} to {str(value).lower()}, feature is locked"
                )
            self._enabled[name] = value

    @classmethod
    def parse(cls, known: Mapping[str, FeatureSpec], text: str) -> FeatureGates:
        return cls(known, parse_overrides(text))


def parse_bool(value: str) -> bool:
    """Go's strconv.ParseBool: 1, t, T, TRUE, true, True, 0, f, F, FALSE, false, False."""
    if value in ("1", "t", "T", "TRUE", "true", "True"):
        return True
    if value in ("0", "f", "F", "FALSE", "false", "False"):
        return False
    raise FeatureGateError(f"invalid value of {value!r}, must be a bool")


def parse_overrides(text: str) -> dict[str, bool]:
    """Parse ``Name=true,Other=false`` (whitespace around items is ignored, empty items skipped)."""
    result: dict[str, bool] = {}
    for item in _items(text):
        name, sep, value = item.partition("=")
        name, value = name.strip(), value.strip()
        if not sep or not name:
            raise FeatureGateError(f"missing bool value for {name or item!r}")
        try:
            result[name] = parse_bool(value)
        except FeatureGateError:
            raise FeatureGateError(f"invalid value of {name}={value}, err: must be a bool") from None
    return result


def _items(text: str) -> Iterable[str]:
    return (s.strip() for s in text.split(",") if s.strip())


def report_unhonoured_gates(
    gates: FeatureGates,
    component: str,
    not_built: Mapping[str, str],
    log: logging.Logger,
    elsewhere: Mapping[str, str] | None = None,
) -> None:
    """Log what a component will not do about the gates it accepts.

    ``not_built``: gate -> what is missing while it is enabled (a warning each).
    ``elsewhere``: gate -> the component that reads it; set away from its default, it is
    reported (info) as having no effect on ``component``.
    """
    for gate, consequence in not_built.items():
        if gates.enabled(gate):
            log.warning("feature gate %s is not implemented in this release: %s", gate, consequence)
    for gate, reader in (elsewhere or {}).items():
        value = gates.enabled(gate)
        if value != gates.known[gate].default:
            log.info(
                "feature gate %s=%s has no effect on %s (%s reads it)",
                gate,
                str(value).lower(),
                component,
                reader,
            )
