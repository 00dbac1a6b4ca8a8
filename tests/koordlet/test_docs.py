"""The koordlet's docs say what the code does: every strategy it runs is named, and every
key of the ``koordlet plan`` scenario format is documented."""

from __future__ import annotations

from pathlib import Path

import pytest

from koordlet.qosmanager import scenario_format
from koordlet.qosmanager.registry import strategies

DOCS = Path(__file__).parents[2] / "docs"


@pytest.mark.parametrize("page", ["koordlet.md", "qos.md"])
def test_every_strategy_the_agent_runs_is_named(page):
    text = (DOCS / page).read_text()
    missing = [s.NAME for s in strategies() if s.NAME not in text]
    assert missing == []


def test_the_koordlet_page_does_not_put_off_what_is_built():
    assert "later release" not in (DOCS / "koordlet.md").read_text()


def test_every_scenario_key_is_documented():
    text = (DOCS / "plan-scenario.md").read_text()
    keys = [
        *scenario_format.SCENARIO_KEYS,
        *(f"usage.node.{k}" for k in scenario_format.NODE_USAGE_KEYS),
        *(f"usage.pods.<namespace/name>.{k}" for k in scenario_format.POD_USAGE_KEYS),
        *(f"usage.hostApplications.<name>.{k}" for k in scenario_format.HOST_APPLICATION_USAGE_KEYS),
    ]
    assert [k for k in keys if f"`{k}`" not in text] == []
    assert [k for k in scenario_format.USAGE_KEYS if f"`usage.{k}." not in text] == []
    assert "(plan-scenario.md)" in (DOCS / "koordlet.md").read_text()
