"""ElasticQuotaArgs parsing and the quota objects the scheduler creates at start."""

from __future__ import annotations

import pytest

from controlplane.scheduler.plugins.args import ArgsError
from controlplane.scheduler.quota import (
    ElasticQuotaArgs,
    HookPluginConf,
    builtin_quotas,
    elastic_quota_args,
)
from koordinator.api.quantity import Format, Quantity

MAX_INT64_FIFTH = ((1 << 63) - 1) // 5


def test_defaults_are_upstreams():
    args = elastic_quota_args(None)
    assert args == ElasticQuotaArgs()
    assert args.delay_evict_time == 120.0
    assert args.revoke_pod_interval == 1.0
    assert args.quota_group_namespace == "koordinator-system"
    assert (args.monitor_all_quotas, args.enable_check_parent_quota) == (False, False)
    assert (args.enable_runtime_quota, args.enable_min_quota_scale) == (True, True)
    assert (args.disable_default_quota_preemption, args.enable_queue_hint) == (True, False)
    assert args.quota_snapshot_update_interval == 120.0
    assert args.hook_plugins == ()
    assert args.default_quota_group_max == {
        "cpu": Quantity.from_int(MAX_INT64_FIFTH),
        "memory": Quantity.from_int(MAX_INT64_FIFTH),
    }
    assert args.system_quota_group_max["memory"].format is Format.BINARY_SI
    assert args.default_quota_group_max["memory"].format is Format.DECIMAL_SI


def test_every_field_is_read():
    args = elastic_quota_args(
        {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "ElasticQuotaArgs",
            "delayEvictTime": "5m",
            "revokePodInterval": "500ms",
            "defaultQuotaGroupMax": {"cpu": "10", "memory": "20Gi"},
            "systemQuotaGroupMax": {"cpu": "4"},
            "quotaGroupNamespace": "quota-system",
            "monitorAllQuotas": True,
            "enableCheckParentQuota": True,
            "enableRuntimeQuota": False,
            "enableMinQuotaScale": False,
            "disableDefaultQuotaPreemption": False,
            "enableQueueHint": True,
            "quotaSnapshotUpdateInterval": "30s",
            "hookPlugins": [{"key": "limits", "factoryKey": "custom-limiter", "factoryArgs": '{"a":1}'}],
        }
    )
    assert args.delay_evict_time == 300.0
    assert args.revoke_pod_interval == 0.5
    assert args.default_quota_group_max == {"cpu": Quantity.parse("10"), "memory": Quantity.parse("20Gi")}
    assert args.system_quota_group_max == {"cpu": Quantity.parse("4")}
    assert args.quota_group_namespace == "quota-system"
    assert args.monitor_all_quotas
    assert args.enable_check_parent_quota
    assert args.enable_queue_hint
    assert not (args.enable_runtime_quota)
    assert not (args.enable_min_quota_scale)
    assert not (args.disable_default_quota_preemption)
    assert args.quota_snapshot_update_interval == 30.0
    assert args.hook_plugins == (HookPluginConf("limits", "custom-limiter", '{"a":1}'),)


def test_empty_resource_lists_fall_back_to_the_defaults():
    args = elastic_quota_args({"defaultQuotaGroupMax": {}, "quotaGroupNamespace": ""})
    assert args.default_quota_group_max == ElasticQuotaArgs().default_quota_group_max
    assert args.quota_group_namespace == "koordinator-system"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        pytest.param(
            {"delayEvictTime": "-1s"},
            "ElasticQuota.delayEvictTime: elasticQuotaArgs error, DelayEvictTime should be a positive value",
            id="negative-delay",
        ),
        pytest.param(
            {"revokePodInterval": "-2s"},
            "ElasticQuota.revokePodInterval: elasticQuotaArgs error, "
            "RevokePodCycle should be a positive value",
            id="negative-interval",
        ),
        pytest.param(
            {"delayEvictTime": "2 minutes"},
            "ElasticQuota.delayEvictTime: Invalid value: '2 minutes': time: ",
            id="bad-duration",
        ),
        pytest.param(
            {"delayEvictTime": 120},
            "ElasticQuota.delayEvictTime: Invalid value: 120: must be a duration such as 120s",
            id="number-duration",
        ),
        pytest.param(
            {"defaultQuotaGroupMax": {"cpu": "-1"}},
            "ElasticQuota.defaultQuotaGroupMax: elasticQuotaArgs error, defaultQuotaGroupMax should be a "
            "positive value, resourceName:cpu, got -1",
            id="negative-max",
        ),
        pytest.param(
            {"systemQuotaGroupMax": {"cpu": "lots"}}, "ElasticQuota.systemQuotaGroupMax.cpu", id="bad-q"
        ),
        pytest.param(
            {"monitorAllQuotas": "yes"},
            "ElasticQuota.monitorAllQuotas: Invalid value: 'yes': must be true or false",
            id="bool",
        ),
        pytest.param({"enableQuota": True}, "unknown field(s) ['enableQuota']", id="unknown"),
        pytest.param(
            {"quotaSnapshotUpdateInterval": "0s"}, "must be a positive duration", id="zero-interval"
        ),
        pytest.param({"hookPlugins": [{"factoryKey": "f"}]}, "hookPlugins[0].key", id="hook-without-key"),
        pytest.param({"hookPlugins": [{"key": "k"}]}, "factory key is empty", id="hook-without-factory"),
    ],
)
def test_bad_values_are_refused_with_the_field(raw, message):
    with pytest.raises(ArgsError) as err:
        elastic_quota_args(raw)
    assert message in str(err.value)


def test_builtin_quotas_follow_the_args():
    args = elastic_quota_args({"defaultQuotaGroupMax": {"cpu": "10"}, "quotaGroupNamespace": "qs"})
    root, system, default = builtin_quotas(args)
    assert root == {
        "apiVersion": "scheduling.sigs.k8s.io/v1alpha1",
        "kind": "ElasticQuota",
        "metadata": {
            "name": "koordinator-root-quota",
            "namespace": "qs",
            "labels": {
                "quota.scheduling.koordinator.sh/is-parent": "true",
                "quota.scheduling.koordinator.sh/allow-lent-resource": "false",
                "quota.scheduling.koordinator.sh/parent": "",
            },
        },
        "spec": {},
    }
    assert system["metadata"] == {"name": "koordinator-system-quota", "namespace": "qs"}
    assert system["spec"] == {"max": {"cpu": str(MAX_INT64_FIFTH), "memory": str(MAX_INT64_FIFTH)}}
    assert default["metadata"] == {"name": "koordinator-default-quota", "namespace": "qs"}
    assert default["spec"] == {"max": {"cpu": "10"}}
