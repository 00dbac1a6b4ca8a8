"""The shipped Koordinator profile parses and enables the Koordinator plug-ins at upstream's
points, in upstream's order, with its args."""

from __future__ import annotations

from controlplane.scheduler import config
from controlplane.scheduler.plugins.loadaware.args import LoadAwareArgs
from controlplane.scheduler.profiles import KOORDINATOR


def test_the_koordinator_profile_enables_its_plugins_in_upstreams_order():
    loaded = config.load(str(KOORDINATOR))
    (profile,) = loaded.profiles
    assert profile.scheduler_name == "koord-scheduler"
    # after kube-scheduler's filters
    assert profile.filters[-4:] == ["LoadAwareScheduling", "NodeNUMAResource", "DeviceShare", "Reservation"]
    assert profile.points["preFilter"][-6:] == [
        "SchedulingHint",
        "Reservation",
        "NodeNUMAResource",
        "DeviceShare",
        "Coscheduling",
        "ElasticQuota",
    ]
    assert profile.points["postFilter"] == [
        "Reservation",
        "Coscheduling",
        "ElasticQuota",
        "DefaultPreemption",
    ]
    assert profile.points["reserve"][-6:] == [
        "LoadAwareScheduling",
        "NodeNUMAResource",
        "DeviceShare",
        "Reservation",
        "Coscheduling",
        "ElasticQuota",
    ]
    assert profile.points["preBind"][-5:] == [
        "NodeNUMAResource",
        "DeviceShare",
        "Reservation",
        "Coscheduling",
        "DefaultPreBind",
    ]
    assert profile.points["bind"] == ["Reservation", "DefaultBinder"]
    assert profile.points["permit"] == ["Coscheduling"]
    assert profile.points["preEnqueue"] == ["SchedulingGates", "Coscheduling"]
    koordinator = ("LoadAwareScheduling", "NodeNUMAResource", "DeviceShare", "Reservation", "Coscheduling")
    assert {n: profile.scores[n] for n in koordinator} == {
        "LoadAwareScheduling": 1,
        "NodeNUMAResource": 1,
        "DeviceShare": 1,
        "Reservation": 5000,
        "Coscheduling": 1,
    }
    # upstream's deployment overrides: expired metrics do not filter, the batch resources score
    args = profile.args["LoadAwareScheduling"]
    assert isinstance(args, LoadAwareArgs)
    assert not args.filter_expired_node_metrics
    assert args.node_metric_expiration_s == 300
    assert dict(profile.fit.resources) == {
        "cpu": 1,
        "memory": 1,
        "kubernetes.io/batch-cpu": 1,
        "kubernetes.io/batch-memory": 1,
    }
    assert loaded.leader_election == {
        "leader_elect": True,
        "lease_name": "koord-scheduler",
        "lease_namespace": "koordinator-system",
    }
