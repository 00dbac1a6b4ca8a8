"""The webhook duration histogram: what the steps record is what ``Histogram.observe`` records."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from controlplane.manager.webhooks.metrics import DURATION_BUCKETS, WebhookMetrics
from tests.controlplane.manager.builders import Admission, make_pod, profile, review

LABELS = ("mutate", "pod", "CREATE", "ClusterColocationProfile")
#: Every bound, just below and above it, zero, and beyond the last bound (+Inf).
AMOUNTS_MS = sorted(
    {
        0.0,
        5000.0,
        *DURATION_BUCKETS,
        *(b * 0.999 for b in DURATION_BUCKETS),
        *(b * 1.001 for b in DURATION_BUCKETS),
    }
)


def rendered(metrics: WebhookMetrics) -> list[str]:
    text = generate_latest(metrics.registry).decode()
    return [line for line in text.splitlines() if "_created" not in line]


@pytest.mark.parametrize("rejected", [False, True], ids=["allowed", "rejected"])
def test_steps_record_what_observe_records(rejected):
    fast, reference = WebhookMetrics(CollectorRegistry()), WebhookMetrics(CollectorRegistry())
    series = fast.step(*LABELS)
    status = "rejected" if rejected else "allowed"
    for amount in AMOUNTS_MS:
        series.observe(rejected, amount / 1000.0)
        reference.duration.labels(*LABELS, status).observe(amount / 1000.0 * 1000.0)
    assert rendered(fast) == rendered(reference)
    assert f'status="{status}"' in "\n".join(rendered(fast))


async def test_every_step_of_an_admission_is_counted_once():
    admission = Admission()
    await admission.call("/mutate-pod", review(make_pod().build()))
    await admission.call("/mutate-pod", review(make_pod().build()))
    registry = admission.ctx.metrics.registry
    for plugin in ("ClusterColocationProfile", "ExtendedResourceSpec", "DeviceResourceSpec"):
        labels = {
            "webhook_type": "mutate",
            "object_type": "pod",
            "operation": "CREATE",
            "plugin_name": plugin,
            "status": "allowed",
        }
        count = registry.get_sample_value("koord_manager_webhook_webhook_duration_milliseconds_count", labels)
        assert count == 2.0, plugin


async def test_a_failing_step_is_counted_as_rejected():
    broken = profile("p", selector={"matchLabels": {"app": "x"}}, priorityClassName="missing")
    admission = Admission([broken])
    response = await admission.call("/mutate-pod", review(make_pod().labels(app="x").build()))
    assert response["status"]["code"] == 500
    count = admission.ctx.metrics.registry.get_sample_value(
        "koord_manager_webhook_webhook_duration_milliseconds_count",
        {
            "webhook_type": "mutate",
            "object_type": "pod",
            "operation": "CREATE",
            "plugin_name": "ClusterColocationProfile",
            "status": "rejected",
        },
    )
    assert count == 1.0
