"""Generate the CRD manifests in ``crds/`` from the models (``make crds``).

``python -m koordinator.api.crdgen --output-dir crds`` writes one
``apiextensions.k8s.io/v1`` CustomResourceDefinition per file, named
``<group>_<plural>.yaml`` like upstream's ``config/crd/bases``; ``--check`` only compares and
exits 1 when a file is missing, stale or unexpected. Output is deterministic: keys are
sorted and nothing depends on time or environment.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from koordinator.api.openapi import root_schema
from koordinator.api.types.registry import CRDS, CRDDefinition

__all__ = ["HEADER", "crd_manifest", "main", "render", "render_all"]

HEADER = "# Generated from koordinator.api models by `make crds` (koordinator.api.crdgen). Do not edit.\n"


def crd_manifest(crd: CRDDefinition) -> dict[str, Any]:
    """The CustomResourceDefinition object of one CRD, as a dict."""
    metadata: dict[str, Any] = {"name": crd.name}
    if crd.annotations:
        metadata["annotations"] = dict(crd.annotations)
    names: dict[str, Any] = {
        "kind": crd.kind,
        "listKind": crd.list_kind,
        "plural": crd.plural,
        "singular": crd.singular,
    }
    if crd.short_names:
        names["shortNames"] = list(crd.short_names)
    if crd.categories:
        names["categories"] = list(crd.categories)
    versions = []
    for version in crd.versions:
        entry: dict[str, Any] = {
            "name": version.name,
            "served": version.served,
            "storage": version.storage,
            "schema": {"openAPIV3Schema": root_schema(version.model)},
        }
        if version.status_subresource:
            entry["subresources"] = {"status": {}}
        if version.printer_columns:
            entry["additionalPrinterColumns"] = [c.to_manifest() for c in version.printer_columns]
        versions.append(entry)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": metadata,
        "spec": {"group": crd.group, "names": names, "scope": crd.scope, "versions": versions},
    }


class _Dumper(yaml.SafeDumper):
    """Block-style YAML that indents list items under their key, as kubectl and controller-gen do."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


def render(crd: CRDDefinition) -> str:
    body = yaml.dump(
        crd_manifest(crd),
        Dumper=_Dumper,
        sort_keys=True,
        default_flow_style=False,
        allow_unicode=True,
        width=120,
    )
    return HEADER + "---\n" + body


@cache
def render_all() -> dict[str, str]:
    """File name -> YAML text for every CRD."""
    return {crd.file_name: render(crd) for crd in CRDS}


def _check(output_dir: Path) -> list[str]:
    problems = []
    expected = render_all()
    for name, text in sorted(expected.items()):
        path = output_dir / name
        if not path.exists():
            problems.append(f"{path}: missing")
        elif path.read_text(encoding="utf-8") != text:
            problems.append(f"{path}: differs from the generator's output")
    for path in sorted(output_dir.glob("*.yaml")):
        if path.name not in expected:
            problems.append(f"{path}: not produced by the generator")
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m koordinator.api.crdgen", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--output-dir",
        type=Path,
        action="append",
        required=True,
        help="directory for the CRD YAML files (repeatable: crds/ and the chart's copy)",
    )
    parser.add_argument("--check", action="store_true", help="compare only; exit 1 when the files are stale")
    args = parser.parse_args(argv)
    output_dirs: list[Path] = args.output_dir
    if args.check:
        problems = [problem for output_dir in output_dirs for problem in _check(output_dir)]
        for problem in problems:
            print(problem, file=sys.stderr)
        return 1 if problems else 0
    expected = render_all()
    for output_dir in output_dirs:
        output_dir.mkdir(parents=True, exist_ok=True)
        for path in sorted(output_dir.glob("*.yaml")):
            if path.name not in expected:
                path.unlink()
        for name, text in sorted(expected.items()):
            (output_dir / name).write_text(text, encoding="utf-8")
        print(f"wrote {len(expected)} CRDs to {output_dir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
