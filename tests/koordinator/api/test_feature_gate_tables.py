"""Every component's feature gates carry upstream's names, defaults and stages."""

from __future__ import annotations

import pytest

from koordinator.api.features import (
    CONTROL_PLANE_FEATURES,
    KOORDLET_FEATURES,
    NODE_SLO_SWITCHED_FEATURES,
    Stage,
)
from koordinator.api.sloconfig.nodeslo import feature_disabled_by_node_slo
from koordinator.api.types.slo import NodeSLOSpec, ResourceThresholdStrategy

KOORDLET_ON = {
    "BECPUSuppress",
    "CPUBurst",
    "RdtResctrl",
    "NodeTopologyReport",
    "GroupIdentity",
    "CPUSetAllocator",
    "BatchResource",
}
KOORDLET_OFF = {
    "BECPUEvict",
    "BEMemoryEvict",
    "CPUEvict",
    "MemoryEvict",
    "CPUAllocatableEvict",
    "MemoryAllocatableEvict",
    "BECPUManager",
    "SystemConfig",
    "ResctrlCollector",
    "CgroupReconcile",
    "Accelerators",
    "RDMADevices",
    "CPICollector",
    "Libpfm4",
    "PSICollector",
    "BlkIOReconcile",
    "ColdPageCollector",
    "HugePageReport",
    "PodResourcesProxy",
    "HamiCoreVGPUMonitor",
    "PerCPUMetric",
    "NodeMetricPromMetrics",
    "AuditEvents",
    "AuditEventsHTTPHandler",
    "GPUEnvInject",
    "RDMADeviceInject",
    "CPUNormalization",
    "CoreSched",
    "TerwayQoS",
    "TCNetworkQoS",
    "Resctrl",
    "OOMScoreAdj",
}
CONTROL_PLANE_ON = {
    "PodMutatingWebhook",
    "PodValidatingWebhook",
    "ElasticMutatingWebhook",
    "ElasticValidatingWebhook",
    "WebhookFramework",
    "GangPendingPodsConditionPatch",
    "EnableBatchScheduleNodeSnapshot",
    "DynamicSchedulerCheck",
    "EnableSyncGPUSharedResource",
}
#: upstream's exceptions to "on by default means beta"
ALPHA_ON = {"EnableSyncGPUSharedResource"}
CONTROL_PLANE_OFF = {
    "NodeMutatingWebhook",
    "NodeValidatingWebhook",
    "ConfigMapValidatingWebhook",
    "ReservationMutatingWebhook",
    "BindingAdmissionWebhook",
    "ColocationProfileSkipMutatingResources",
    "ColocationProfileSkipValidatingPriority",
    "ColocationProfileController",
    "EnablePodEnhancedValidator",
    "ValidatePodDeviceResource",
    "DisableExtendedResourceSpec",
    "DisableDeviceResourceSpec",
    "MultiQuotaTree",
    "ElasticQuotaIgnorePodOverhead",
    "ElasticQuotaIgnoreTerminatingPod",
    "ElasticQuotaImmediateIgnoreTerminatingPod",
    "ElasticQuotaGuaranteeUsage",
    "ElasticQuotaEnableUpdateResourceKey",
    "ElasticQuotaEvaluationTransformPod",
    "DisableDefaultQuota",
    "SupportParentQuotaSubmitPod",
    "EnableQuotaAdmission",
    "EnableQuotaAdmissionOnUpdate",
    "DevicePluginAdaption",
    "PriorityTransformer",
    "PreemptionPolicyTransformer",
    "ReplaceResourcesTransformer",
    "LazyReservationRestore",
    "OmitNodeLabelsForReservation",
    "SkipReservationFitsNode",
    "CleanExpiredReservationAllocated",
    "EnableInlineBatchSchedule",
    "ResizePod",
    "CrossSchedulerNomination",
    "SkipFilterWithNominatedPods",
    "SyncBarrier",
    "DisablePVCReservation",
}


@pytest.mark.parametrize(
    ("table", "on", "off"),
    [
        pytest.param(KOORDLET_FEATURES, KOORDLET_ON, KOORDLET_OFF, id="koordlet"),
        pytest.param(CONTROL_PLANE_FEATURES, CONTROL_PLANE_ON, CONTROL_PLANE_OFF, id="control-plane"),
    ],
)
def test_names_defaults_and_stages(table, on, off):
    assert set(table) == on | off
    for name, spec in table.items():
        assert spec.default is (name in on), name
        # upstream: gates on by default are beta (but for ALPHA_ON), gates off by default are alpha
        assert spec.stage is (Stage.BETA if spec.default and name not in ALPHA_ON else Stage.ALPHA), name


def test_node_slo_switch_governs_be_gates():
    assert set(KOORDLET_FEATURES) >= NODE_SLO_SWITCHED_FEATURES
    on = NodeSLOSpec(resource_used_threshold_with_be=ResourceThresholdStrategy(enable=True))
    off = NodeSLOSpec(resource_used_threshold_with_be=ResourceThresholdStrategy(enable=False))
    assert feature_disabled_by_node_slo(on, "BECPUSuppress") == (False, "")
    assert feature_disabled_by_node_slo(off, "BEMemoryEvict") == (True, "")
    disabled, reason = feature_disabled_by_node_slo(None, "BECPUSuppress")
    assert disabled
    assert reason
    unset = NodeSLOSpec(resource_used_threshold_with_be=ResourceThresholdStrategy())
    assert feature_disabled_by_node_slo(unset, "BECPUEvict")[0] is True
    assert feature_disabled_by_node_slo(on, "CPUBurst")[0] is True
