"""Test tiers and shared fixtures.

Tiers are pytest markers: unit (unmarked), ``host`` (root, this machine's real cgroups),
``envtest`` (real kube-apiserver + etcd), ``node`` (a real kubelet, containerd and runc
node with its control plane), ``gpu`` and ``perf``. ``KOORD_REQUIRE_TIERS``
(set by ``.ci/run``) names tiers that must really run: a skipped test of a required
tier is reported as a failure, and a required tier with no tests fails collection, so a
missing install step cannot hide behind a skip.
"""

from __future__ import annotations

import os
from collections.abc import Generator

import pytest

pytest_plugins = ["tests.envtest", "tests.nodetier", "tests.helm"]

TIERS = ("host", "envtest", "node", "gpu", "perf")


def required_tiers() -> set[str]:
    raw = os.environ.get("KOORD_REQUIRE_TIERS", "")
    tiers = {t.strip() for t in raw.split(",") if t.strip()}
    unknown = tiers - set(TIERS)
    if unknown:
        raise pytest.UsageError(f"KOORD_REQUIRE_TIERS names unknown tiers: {', '.join(sorted(unknown))}")
    return tiers


def _tiers_of(item: pytest.Item) -> set[str]:
    return {m.name for m in item.iter_markers() if m.name in TIERS}


def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    required = required_tiers()
    if not required or config.getoption("keyword") or config.getoption("markexpr"):
        return
    present = set().union(*(_tiers_of(i) for i in items)) if items else set()
    missing = required - present
    if missing:
        raise pytest.UsageError(
            f"required test tier(s) with no tests collected: {', '.join(sorted(missing))}"
        )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.skipped:
        tiers = _tiers_of(item) & required_tiers()
        if tiers:
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
            report.outcome = "failed"
            report.longrepr = f"required tier {', '.join(sorted(tiers))} was skipped: {reason}"
    return report
