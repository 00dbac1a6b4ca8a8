"""Leader election configuration checks and the Lease record mapping."""

from __future__ import annotations

import pytest

from koordinator.kube.leaderelection import (
    LeaderElectionConfig,
    LeaderElectionConfigError,
    LeaderElectionRecord,
)


@pytest.mark.parametrize(
    "kwargs",
    [
        pytest.param({"identity": ""}, id="no-identity"),
        pytest.param({"lease_duration": 10.0, "renew_deadline": 10.0}, id="lease-not-longer-than-deadline"),
        pytest.param(
            {"renew_deadline": 2.0, "retry_period": 2.0}, id="deadline-not-longer-than-jittered-retry"
        ),
    ],
)
def test_invalid_durations(kwargs):
    with pytest.raises(LeaderElectionConfigError):
        LeaderElectionConfig(**{"namespace": "ns", "name": "n", "identity": "me", **kwargs})


def test_defaults_are_client_go_defaults():
    config = LeaderElectionConfig(namespace="ns", name="n", identity="me")
    assert (config.lease_duration, config.renew_deadline, config.retry_period) == (15.0, 10.0, 2.0)


def test_record_round_trip():
    lease = {
        "spec": {
            "holderIdentity": "a",
            "leaseDurationSeconds": 15,
            "acquireTime": "t1",
            "renewTime": "t2",
            "leaseTransitions": 3,
        }
    }
    record = LeaderElectionRecord.from_lease(lease)
    assert record == LeaderElectionRecord("a", 15, "t1", "t2", 3)
    assert record.as_spec() == lease["spec"]
