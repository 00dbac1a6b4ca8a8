"""Dependency audit: the pins in requirements/ against what PyPI publishes about them.

    .venv/bin/python hack/depaudit.py              # make audit
    .venv/bin/python hack/depaudit.py --offline    # only the checks that need no network

What it checks, and what it can see:

* **The pins themselves** (offline): every line of the lock files is ``name==version`` and
  names no package twice.
* **The environment** (offline, with ``--environment``, on by default): every distribution
  installed beside this interpreter is pinned, at the pinned version, so what runs is what
  was audited.
* **Yanked releases** (PyPI's JSON API): a pinned version whose files were all yanked, with
  PyPI's reason. Seen for every pin.
* **Known vulnerabilities** (PyPI's JSON API, whose ``vulnerabilities`` come from the OSV
  database): PyPI lists them for a project's *latest* release only. A pin at the latest
  release is checked fully; for a pin behind it, PyPI publishes nothing about that version,
  so the audit says it cannot see its advisories (a note, not a failure: run
  ``hack/lock.sh`` to move the pins to the latest releases, which it can see).

It cannot see: advisories for versions behind the latest release, advisories not yet in
OSV, vulnerabilities in the C libraries the wheels bundle (OpenSSL in cryptography, ...),
and anything about Go binaries built by hack/ (kube-apiserver, etcd, vegeta). No other
advisory database is reachable from the machines this project builds on.

Exit status: 0 when nothing was found, 1 for findings, 2 when PyPI cannot be reached.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import importlib.metadata
import json
import re
import sys
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
LOCKS = (ROOT / "requirements" / "constraints.txt", ROOT / "requirements" / "build-constraints.txt")
#: the project's own distribution, installed editable and never pinned
PROJECT = "koordinator-py"
INDEX = "https://pypi.org"
TIMEOUT_S = 30.0
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;#]+)$")


def canonical(name: str) -> str:
    """PEP 503 normalised name: ``Typing_Extensions`` -> ``typing-extensions``."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Pin:
    name: str
    version: str
    source: str  # "file:line"


@dataclass(frozen=True)
class Finding:
    package: str
    problem: str
    fatal: bool = True

    def __str__(self) -> str:
        return f"{'FAIL' if self.fatal else 'note'}  {self.package}: {self.problem}"


def read_pins(paths: Iterable[Path]) -> tuple[list[Pin], list[Finding]]:
    """Pins from the lock files; malformed lines and duplicates are findings."""
    pins: list[Pin] = []
    findings: list[Finding] = []
    seen: dict[tuple[str, str], Pin] = {}
    for path in paths:
        for number, raw in enumerate(path.read_text().splitlines(), 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            where = f"{path.name}:{number}"
            match = _PIN.match(line)
            if match is None:
                findings.append(Finding(where, f"not a 'name==version' pin: {line!r}"))
                continue
            pin = Pin(match[1], match[2], where)
            key = (path.name, canonical(pin.name))
            if key in seen:
                findings.append(Finding(where, f"{pin.name} is pinned twice (also {seen[key].source})"))
                continue
            seen[key] = pin
            pins.append(pin)
    return pins, findings


def check_environment(pins: Iterable[Pin], installed: Mapping[str, str]) -> list[Finding]:
    """Every installed distribution is pinned in the main lock, at its pinned version."""
    pinned = {canonical(pin.name): pin for pin in pins if pin.source.startswith(LOCKS[0].name)}
    findings = []
    for name, version in sorted(installed.items()):
        if name == PROJECT:
            continue
        pin = pinned.get(name)
        if pin is None:
            findings.append(Finding(name, f"{version} is installed but not pinned in {LOCKS[0].name}"))
        elif pin.version != version:
            findings.append(Finding(name, f"{version} is installed, {pin.version} is pinned ({pin.source})"))
    return findings


def installed_distributions() -> dict[str, str]:
    return {canonical(dist.metadata["Name"]): dist.version for dist in importlib.metadata.distributions()}


def judge(pin: Pin, project: Mapping[str, Any]) -> list[Finding]:
    """What PyPI's project JSON says about one pin."""
    files = project.get("releases", {}).get(pin.version)
    if files is None:
        return [Finding(pin.name, f"{pin.version} is not published on the index")]
    findings = []
    if files and all(file.get("yanked") for file in files):
        reason = next((file.get("yanked_reason") for file in files if file.get("yanked_reason")), None)
        findings.append(Finding(pin.name, f"{pin.version} was yanked: {reason or 'no reason given'}"))
    latest = project.get("info", {}).get("version")
    if latest == pin.version:
        for vuln in project.get("vulnerabilities") or ():
            if vuln.get("withdrawn"):
                continue
            ids = ", ".join([vuln.get("id", "?"), *vuln.get("aliases", ())])
            fixed = ", ".join(vuln.get("fixed_in") or ()) or "no fixed release"
            summary = vuln.get("summary") or (vuln.get("details") or "").split("\n", 1)[0]
            findings.append(Finding(pin.name, f"{pin.version} has {ids} (fixed in {fixed}): {summary}"))
    else:
        findings.append(
            Finding(
                pin.name,
                f"pinned {pin.version}, latest {latest}: PyPI lists advisories for the latest release "
                f"only, so {pin.version}'s are not visible here",
                fatal=False,
            )
        )
    return findings


def fetch(index: str, name: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{index}/pypi/{canonical(name)}/json", timeout=TIMEOUT_S) as reply:
        data: dict[str, Any] = json.load(reply)
        return data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--offline", action="store_true", help="only the checks that need no network")
    parser.add_argument(
        "--no-environment",
        dest="environment",
        action="store_false",
        help="do not compare the installed distributions with the pins",
    )
    parser.add_argument("--index", default=INDEX, help=f"package index (default {INDEX})")
    args = parser.parse_args(argv)

    pins, findings = read_pins(LOCKS)
    if args.environment:
        findings += check_environment(pins, installed_distributions())
    unreachable = []
    if not args.offline:
        unique = {(canonical(pin.name), pin.version): pin for pin in pins}
        with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
            futures = {pool.submit(fetch, args.index, pin.name): pin for pin in unique.values()}
            for future in concurrent.futures.as_completed(futures):
                pin = futures[future]
                try:
                    findings += judge(pin, future.result())
                except (urllib.error.URLError, TimeoutError, OSError, ValueError) as exc:
                    unreachable.append(f"{pin.name}: {exc}")
    for finding in sorted(findings, key=lambda f: (not f.fatal, f.package)):
        print(finding)
    fatal = sum(finding.fatal for finding in findings)
    behind = sum(not finding.fatal for finding in findings)
    print(
        f"{len(pins)} pins: {fatal} problem(s)"
        + ("" if args.offline else f", {behind} behind the latest release (advisories not visible)")
    )
    if unreachable:
        print(f"cannot audit {len(unreachable)} pin(s) against {args.index}:", *unreachable, sep="\n  ")
        return 2
    return 1 if fatal else 0


if __name__ == "__main__":
    sys.exit(main())
