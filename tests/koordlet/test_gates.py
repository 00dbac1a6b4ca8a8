"""Every koordlet gate is read by the agent's code or reported as not built when enabled."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from koordinator.api.features import KOORDLET_FEATURES, FeatureGates
from koordlet.gates import NOT_BUILT, report_gates

ROOT = Path(__file__).resolve().parents[2]
KOORDLET = ROOT / "koordlet"


def gates_read_by_the_koordlet() -> set[str]:
    """Gate names that appear as string literals in the koordlet's code (its gate table aside)."""
    found: set[str] = set()
    for source in KOORDLET.rglob("*.py"):
        if source == KOORDLET / "gates.py":
            continue
        found |= set(re.findall(r"[\"']([A-Z][A-Za-z0-9]+)[\"']", source.read_text()))
    return found & set(KOORDLET_FEATURES)


@pytest.mark.parametrize("gate", sorted(KOORDLET_FEATURES))
def test_every_gate_is_read_or_reported(gate):
    read, not_built = gate in gates_read_by_the_koordlet(), gate in NOT_BUILT
    assert read != not_built, f"{gate}: {'read and listed as not built' if read else 'accepted and ignored'}"


def test_enabled_gates_that_are_not_built_are_reported(caplog):
    caplog.set_level(logging.INFO)
    report_gates(
        FeatureGates(KOORDLET_FEATURES, {"Libpfm4": True, "CPUBurst": False}), logging.getLogger("t")
    )
    assert [r.getMessage() for r in caplog.records] == [
        "feature gate Libpfm4 is not implemented in this release: there is no libpfm4 path for perf events"
    ]
