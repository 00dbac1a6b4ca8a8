"""The dependency pins and their audit (hack/depaudit.py): the suite runs on exactly the
pinned versions, and the audit's verdicts on what PyPI publishes (yanked, vulnerable, behind)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("depaudit", ROOT / "hack" / "depaudit.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["depaudit"] = module
    spec.loader.exec_module(module)
    return module


depaudit = _load()


def project(
    latest: str, releases: dict[str, list[dict[str, Any]]], vulns: list[dict[str, Any]]
) -> dict[str, Any]:
    return {"info": {"version": latest}, "releases": releases, "vulnerabilities": vulns}


FILE = {"yanked": False, "yanked_reason": None}
VULN = {
    "id": "GHSA-xxxx",
    "aliases": ["CVE-2026-1"],
    "fixed_in": ["3.0.1"],
    "summary": "request smuggling",
    "withdrawn": None,
}


def test_this_environment_is_exactly_the_pins() -> None:
    """make install installs from requirements/constraints.txt: nothing unpinned, nothing drifted."""
    pins, problems = depaudit.read_pins(depaudit.LOCKS)
    assert problems == []
    assert depaudit.check_environment(pins, depaudit.installed_distributions()) == []


def test_a_vulnerability_of_the_pinned_latest_release_fails() -> None:
    pin = depaudit.Pin("aiohttp", "3.0.0", "constraints.txt:1")
    findings = depaudit.judge(pin, project("3.0.0", {"3.0.0": [FILE]}, [VULN]))
    assert [str(f) for f in findings] == [
        "FAIL  aiohttp: 3.0.0 has GHSA-xxxx, CVE-2026-1 (fixed in 3.0.1): request smuggling"
    ]


def test_withdrawn_advisories_are_ignored() -> None:
    pin = depaudit.Pin("aiohttp", "3.0.0", "constraints.txt:1")
    withdrawn = {**VULN, "withdrawn": "2026-01-01T00:00:00Z"}
    assert depaudit.judge(pin, project("3.0.0", {"3.0.0": [FILE]}, [withdrawn])) == []


def test_a_yanked_pin_fails_with_the_reason() -> None:
    pin = depaudit.Pin("orjson", "1.0", "constraints.txt:2")
    yanked = {"yanked": True, "yanked_reason": "broken wheel"}
    findings = depaudit.judge(pin, project("1.0", {"1.0": [yanked, yanked]}, []))
    assert [str(f) for f in findings] == ["FAIL  orjson: 1.0 was yanked: broken wheel"]


def test_a_pin_behind_the_latest_release_is_a_note_saying_what_is_not_visible() -> None:
    pin = depaudit.Pin("orjson", "1.0", "constraints.txt:2")
    findings = depaudit.judge(pin, project("2.0", {"1.0": [FILE], "2.0": [FILE]}, [VULN]))
    assert len(findings) == 1
    assert not findings[0].fatal
    assert "1.0's are not visible" in findings[0].problem


def test_an_unpublished_pin_fails() -> None:
    pin = depaudit.Pin("orjson", "9.9", "constraints.txt:2")
    assert depaudit.judge(pin, project("2.0", {"2.0": [FILE]}, []))[0].fatal


@pytest.mark.parametrize(
    ("text", "problem"),
    [("orjson>=3\n", "not a 'name==version' pin"), ("orjson==3.1\nORJSON==3.2\n", "pinned twice")],
)
def test_malformed_lock_lines_are_findings(tmp_path: Path, text: str, problem: str) -> None:
    lock = tmp_path / "constraints.txt"
    lock.write_text("# header\n" + text)
    _, findings = depaudit.read_pins([lock])
    assert len(findings) == 1
    assert problem in findings[0].problem


def test_an_installed_distribution_that_drifted_or_is_unpinned_fails() -> None:
    pins = [depaudit.Pin("aiohttp", "3.0.0", "constraints.txt:1")]
    findings = depaudit.check_environment(pins, {"aiohttp": "3.0.1", "extra": "1.0", "koordinator-py": "0.1"})
    assert [str(f) for f in findings] == [
        "FAIL  aiohttp: 3.0.1 is installed, 3.0.0 is pinned (constraints.txt:1)",
        "FAIL  extra: 1.0 is installed but not pinned in constraints.txt",
    ]
