"""Feature-gate parsing: Go's bool syntax, AllAlpha/AllBeta, unknown gates refused."""

from __future__ import annotations

import pytest

from koordinator.api.features import (
    CONTROL_PLANE_FEATURES,
    KOORDLET_FEATURES,
    FeatureGateError,
    FeatureGates,
    FeatureSpec,
    Stage,
    parse_overrides,
)


def test_defaults_follow_upstream():
    gates = FeatureGates(KOORDLET_FEATURES)
    assert gates.enabled("BECPUSuppress") is True
    assert gates.enabled("CPUBurst") is True
    assert gates.enabled("BEMemoryEvict") is False
    cp = FeatureGates(CONTROL_PLANE_FEATURES)
    assert cp.enabled("PodMutatingWebhook") is True
    assert cp.enabled("NodeMutatingWebhook") is False


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("BEMemoryEvict=true", {"BEMemoryEvict": True}, id="single"),
        pytest.param(
            " BEMemoryEvict=1 , CPUBurst=F ", {"BEMemoryEvict": True, "CPUBurst": False}, id="go-bools"
        ),
        pytest.param("", {}, id="empty"),
        pytest.param("A=true,,", {"A": True}, id="empty-items"),
    ],
)
def test_parse_overrides(text, expected):
    assert parse_overrides(text) == expected


@pytest.mark.parametrize("text", ["Foo=maybe", "Foo", "=true", "Foo=yes"])
def test_bad_values_are_refused(text):
    with pytest.raises(FeatureGateError):
        parse_overrides(text)


def test_unknown_gate_is_refused_with_its_name():
    with pytest.raises(FeatureGateError, match="NoSuchGate"):
        FeatureGates.parse(KOORDLET_FEATURES, "NoSuchGate=true")


def test_all_alpha_then_explicit_override():
    gates = FeatureGates.parse(KOORDLET_FEATURES, "AllAlpha=true,BEMemoryEvict=false")
    assert gates.enabled("BECPUEvict") is True
    assert gates.enabled("BEMemoryEvict") is False
    assert gates.enabled("CPUBurst") is True  # beta untouched


def test_all_beta_false_turns_off_beta_gates_only():
    gates = FeatureGates.parse(KOORDLET_FEATURES, "AllBeta=false")
    assert gates.enabled("BECPUSuppress") is False
    assert gates.enabled("BEMemoryEvict") is False


def test_locked_gate_cannot_change():
    table = {"Done": FeatureSpec(True, Stage.GA, locked=True)}
    with pytest.raises(FeatureGateError, match="locked"):
        FeatureGates.parse(table, "Done=false")
    assert FeatureGates.parse(table, "Done=true").enabled("Done") is True
