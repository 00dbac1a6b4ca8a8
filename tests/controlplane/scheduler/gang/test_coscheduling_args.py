"""CoschedulingArgs: upstream's defaults (600 s, one controller worker, no preemption, no
network-topology awareness, ``once-satisfied``), every field parsed, and the errors
upstream's validation raises."""

from __future__ import annotations

import pytest

from controlplane.scheduler.gang import CoschedulingArgs, coscheduling_args
from controlplane.scheduler.plugins.args import ArgsError


def test_defaults_are_upstreams():
    assert coscheduling_args(None) == CoschedulingArgs(
        default_timeout_s=600.0,
        controller_workers=1,
        skip_check_schedule_cycle=False,
        enable_preemption=False,
        aware_network_topology=False,
        default_match_policy="once-satisfied",
    )
    assert coscheduling_args(
        {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "CoschedulingArgs"}
    ) == (CoschedulingArgs())


def test_every_field_is_read():
    args = coscheduling_args(
        {
            "defaultTimeout": "1m30s",
            "controllerWorkers": 4,
            "skipCheckScheduleCycle": True,
            "enablePreemption": True,
            "awareNetworkTopology": True,
            "defaultMatchPolicy": "waiting-and-running",
        }
    )
    assert args == CoschedulingArgs(90.0, 4, True, True, True, "waiting-and-running")


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        pytest.param(
            {"defaultTimeout": "-1s"},
            "Coscheduling: coeSchedulingArgs DefaultTimeoutSeconds invalid",
            id="negative-timeout",
        ),
        pytest.param(
            {"defaultTimeout": "ten minutes"},
            "Coscheduling.defaultTimeout: Invalid value: 'ten minutes': "
            'time: invalid duration "ten minutes"',
            id="unparsable-timeout",
        ),
        pytest.param(
            {"defaultTimeout": 600},
            "Coscheduling.defaultTimeout: Invalid value: 600: must be a duration such as 600s",
            id="timeout-not-a-string",
        ),
        pytest.param(
            {"controllerWorkers": 0},
            "Coscheduling: coeSchedulingArgs ControllerWorkers invalid",
            id="no-workers",
        ),
        pytest.param(
            {"controllerWorkers": "2"},
            "Coscheduling.controllerWorkers: Invalid value: '2': must be an integer",
            id="workers-not-an-integer",
        ),
        pytest.param(
            {"enablePreemption": "yes"},
            "Coscheduling.enablePreemption: Invalid value: 'yes': must be true or false",
            id="flag-not-a-boolean",
        ),
        pytest.param(
            {"defaultMatchPolicy": "always"},
            'Coscheduling.defaultMatchPolicy: Unsupported value: "always": supported values: '
            '"only-waiting", "waiting-and-running", "once-satisfied"',
            id="unknown-policy",
        ),
        pytest.param(
            {"permitWaitingTimeSeconds": 10},
            "Coscheduling: unknown field(s) ['permitWaitingTimeSeconds']",
            id="unknown-field",
        ),
    ],
)
def test_invalid_args_name_the_field(raw, message):
    with pytest.raises(ArgsError) as err:
        coscheduling_args(raw)
    assert str(err.value) == message
