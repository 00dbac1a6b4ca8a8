"""Upstream's reason texts and PostFilter's summary of why matched reservations failed."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

import controlplane.scheduler.reservation as package
from controlplane.scheduler.reservation.messages import (
    NodeDiagnosis,
    is_reservation_reason,
    post_filter_reasons,
    reservation_reason,
)


def test_reservation_reasons_carry_the_prefix():
    assert reservation_reason("Insufficient cpu") == "Reservation(s) Insufficient cpu"
    assert is_reservation_reason("Reservation(s) Too many pods")
    assert not is_reservation_reason("Insufficient cpu by node")


def test_post_filter_summary():
    diagnoses = {
        "n1": NodeDiagnosis(
            owner_matched=3,
            name_unmatched=1,
            affinity_unmatched=1,
            taints_unmatched=1,
            taints_unmatched_reasons={"{k: v}": 1},
        ),
        "n2": NodeDiagnosis(owner_matched=2),
    }
    node_reasons = {
        "n1": ["Insufficient memory"],
        "n2": ["Insufficient cpu", "Reservation(s) Insufficient memory"],
    }
    assert post_filter_reasons(diagnoses, node_reasons, has_affinity=False) == [
        "1 Reservation(s) didn't match the requested reservation name",
        "1 Reservation(s) didn't match affinity rules",
        "1 Reservation(s) had untolerated taint {k: v}",
        # n2: 2 remaining, one used up by the reservation-level reason
        "1 Reservation(s) for node reason that Insufficient cpu",
        "5 Reservation(s) matched owner total",
    ]


@pytest.mark.parametrize(
    ("has_affinity", "want"),
    [
        pytest.param(False, [], id="nothing-said-without-owner-match-or-affinity"),
        pytest.param(True, ["0 Reservation(s) matched owner total"], id="affinity-always-reports-the-total"),
    ],
)
def test_post_filter_without_owner_matches(has_affinity, want):
    assert post_filter_reasons({"n1": NodeDiagnosis(ignored=2)}, {}, has_affinity=has_affinity) == want


def test_named_exact_and_unschedulable_counts():
    diagnoses = {
        "n1": NodeDiagnosis(owner_matched=3, name_matched=1, not_exact_matched=1, unschedulable_unmatched=1)
    }
    assert post_filter_reasons(diagnoses, {}, has_affinity=False) == [
        "1 Reservation(s) exactly matches the requested reservation name",
        "1 Reservation(s) is unschedulable",
        "1 Reservation(s) is not exact matched",
        "3 Reservation(s) matched owner total",
    ]


ALLOWED = (
    "controlplane.scheduler.reservation",
    "controlplane.scheduler.resourcescore",
    "koordinator.api",
    "koordinator.kube.timeutil",
)


def test_the_core_imports_only_the_vocabulary_and_the_standard_library():
    for path in Path(package.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                assert name.startswith(ALLOWED) or top in sys.stdlib_module_names or top == "__future__", (
                    f"{path.name} imports {name}"
                )
