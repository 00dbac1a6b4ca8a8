"""The hook server configuration files koord-runtime-proxy reads (``koordlet.json``): hook
names are matched as upstream matches them, as strings, so a name the proxy does not know is
set aside alone instead of costing the whole file."""

from __future__ import annotations

import json

import pytest

from koordinator.api import runtimehook as rh


def test_upstreams_koordlet_json_is_read_with_its_uncalled_stage():
    text = json.dumps(
        {
            "remote-endpoint": "/var/run/koordlet/koordlet.sock",
            "failure-policy": "Ignore",
            "runtime-hooks": ["PreRunPodSandbox", "PreCreateContainer", "PreRemoveRunPodSandbox"],
        }
    )
    config = rh.HookServerConfig.from_json(text)
    assert config == rh.HookServerConfig(
        "/var/run/koordlet/koordlet.sock",
        rh.FailurePolicy.IGNORE,
        (rh.HookType.PRE_RUN_POD_SANDBOX, rh.HookType.PRE_CREATE_CONTAINER),
        ("PreRemoveRunPodSandbox",),
    )


def test_an_unknown_name_is_set_aside_and_the_file_still_used():
    text = json.dumps({"remote-endpoint": "/run/k.sock", "runtime-hooks": ["PreStartContainer", "Bogus"]})
    config = rh.HookServerConfig.from_json(text)
    assert config.runtime_hooks == (rh.HookType.PRE_START_CONTAINER,)
    assert config.ignored_hooks == ("Bogus",)
    assert config.failure_policy is rh.FailurePolicy.IGNORE


def test_the_koordlets_own_file_round_trips():
    config = rh.HookServerConfig("/run/k.sock", rh.FailurePolicy.FAIL, tuple(rh.HookType))
    assert rh.HookServerConfig.from_json(config.to_json()) == config


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        pytest.param({"runtime-hooks": []}, "remote-endpoint", id="no-endpoint"),
        pytest.param({"remote-endpoint": "/s", "failure-policy": "Maybe"}, "Maybe", id="bad-policy"),
        pytest.param({"remote-endpoint": "/s", "runtime-hooks": "PreRunPodSandbox"}, "list", id="not-a-list"),
        pytest.param({"remote-endpoint": "/s", "runtime-hooks": [1]}, "list of hook names", id="not-a-name"),
    ],
)
def test_a_file_that_cannot_be_used_is_refused(raw, message):
    with pytest.raises(rh.HookServerConfigError, match=message):
        rh.HookServerConfig.from_json(json.dumps(raw))
