"""The CRD manifests in crds/ are exactly what the generator produces, and are structural."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from koordinator.api import crdgen
from koordinator.api.types.registry import CRDS, crd_named

ROOT = Path(__file__).resolve().parents[3]
CRD_DIR = ROOT / "crds"
CHART_CRD_DIR = ROOT / "charts" / "koordinator" / "files" / "crds"


def test_committed_crds_match_the_generator():
    argv = ["--output-dir", str(CRD_DIR), "--output-dir", str(CHART_CRD_DIR), "--check"]
    assert crdgen.main(argv) == 0, "run `make crds` and commit crds/ and the chart's copy"


def test_output_is_deterministic():
    assert {c.file_name: crdgen.render(c) for c in CRDS} == crdgen.render_all()
    assert crdgen.render(CRDS[0]) == crdgen.render(CRDS[0])


def test_check_reports_stale_and_unexpected_files(tmp_path, capsys):
    assert crdgen.main(["--output-dir", str(tmp_path)]) == 0
    assert crdgen.main(["--output-dir", str(tmp_path), "--check"]) == 0
    (tmp_path / CRDS[0].file_name).write_text("stale")
    (tmp_path / "extra.yaml").write_text("x")
    assert crdgen.main(["--output-dir", str(tmp_path), "--check"]) == 1
    err = capsys.readouterr().err
    assert "differs" in err
    assert "not produced" in err
    assert crdgen.main(["--output-dir", str(tmp_path)]) == 0
    assert not (tmp_path / "extra.yaml").exists()


# group, kind, plural, scope, short names, status subresource (per version)
UPSTREAM = [
    ("slo.koordinator.sh", "NodeMetric", "nodemetrics", "Cluster", [], [True]),
    ("slo.koordinator.sh", "NodeSLO", "nodeslos", "Cluster", [], [True]),
    ("config.koordinator.sh", "ClusterColocationProfile", "clustercolocationprofiles", "Cluster", [], [True]),
    ("scheduling.koordinator.sh", "Reservation", "reservations", "Cluster", [], [True]),
    ("scheduling.koordinator.sh", "PodMigrationJob", "podmigrationjobs", "Cluster", ["pmj"], [True]),
    ("scheduling.koordinator.sh", "Device", "devices", "Cluster", [], [False]),
    (
        "scheduling.koordinator.sh",
        "ClusterNetworkTopology",
        "clusternetworktopologies",
        "Cluster",
        [],
        [True],
    ),
    (
        "scheduling.koordinator.sh",
        "ScheduleExplanation",
        "scheduleexplanations",
        "Namespaced",
        ["sched-exp"],
        [True],
    ),
    ("scheduling.sigs.k8s.io", "ElasticQuota", "elasticquotas", "Namespaced", [], [False]),
    ("scheduling.sigs.k8s.io", "PodGroup", "podgroups", "Namespaced", [], [False]),
    ("quota.koordinator.sh", "ElasticQuotaProfile", "elasticquotaprofiles", "Namespaced", ["eqp"], [False]),
    ("analysis.koordinator.sh", "Recommendation", "recommendations", "Namespaced", ["recom"], [True]),
    (
        "topology.node.k8s.io",
        "NodeResourceTopology",
        "noderesourcetopologies",
        "Cluster",
        ["node-res-topo"],
        [False, False],
    ),
]


def _manifest(plural: str, group: str) -> dict[str, Any]:
    manifest: dict[str, Any] = yaml.safe_load((CRD_DIR / f"{group}_{plural}.yaml").read_text())
    return manifest


@pytest.mark.parametrize(
    ("group", "kind", "plural", "scope", "short", "status"), UPSTREAM, ids=[u[1] for u in UPSTREAM]
)
def test_names_scope_and_subresources_follow_upstream(group, kind, plural, scope, short, status):
    manifest = _manifest(plural, group)
    assert manifest["apiVersion"] == "apiextensions.k8s.io/v1"
    assert manifest["metadata"]["name"] == f"{plural}.{group}"
    names = manifest["spec"]["names"]
    assert (names["kind"], names["plural"], names["singular"], names["listKind"]) == (
        kind,
        plural,
        kind.lower(),
        f"{kind}List",
    )
    assert names.get("shortNames", []) == short
    assert manifest["spec"]["scope"] == scope
    assert ["status" in (v.get("subresources") or {}) for v in manifest["spec"]["versions"]] == status
    assert sum(v["storage"] for v in manifest["spec"]["versions"]) == 1
    assert crd_named(f"{plural}.{group}") is not None


def test_every_crd_is_listed():
    assert len(CRDS) == len(UPSTREAM) == len(list(CRD_DIR.glob("*.yaml")))


def test_protected_groups_carry_the_api_approval_annotation():
    for crd in CRDS:
        manifest = _manifest(crd.plural, crd.group)
        annotations = manifest["metadata"].get("annotations", {})
        assert ("api-approved.kubernetes.io" in annotations) == crd.group.endswith(".k8s.io")


def test_reservation_printer_columns_and_rules():
    version = _manifest("reservations", "scheduling.koordinator.sh")["spec"]["versions"][0]
    columns = [(c["name"], c["jsonPath"]) for c in version["additionalPrinterColumns"]]
    assert columns == [
        ("Phase", ".status.phase"),
        ("Age", ".metadata.creationTimestamp"),
        ("Node", ".status.nodeName"),
        ("TTL", ".spec.ttl"),
        ("Expires", ".spec.expires"),
    ]
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert spec["required"] == ["template", "owners"]
    assert spec["properties"]["owners"]["minItems"] == 1
    assert spec["properties"]["allocatePolicy"]["enum"] == ["Aligned", "Restricted"]
    assert spec["properties"]["allocateOnce"]["default"] is True
    assert "default" not in spec["properties"]["ttl"]
    assert spec["x-kubernetes-validations"] == [
        {"rule": "!(has(self.ttl) && has(self.expires))", "message": "ttl and expires are mutually exclusive"}
    ]


def _structural_problems(schema: dict[str, Any], path: str) -> list[str]:
    problems = []
    typed = (
        "type" in schema
        or schema.get("x-kubernetes-int-or-string")
        or schema.get("x-kubernetes-preserve-unknown-fields")
    )
    if not typed:
        problems.append(f"{path}: no type")
    if "properties" in schema and "additionalProperties" in schema:
        problems.append(f"{path}: properties and additionalProperties together")
    for key in ("oneOf", "allOf", "not"):
        if key in schema:
            problems.append(f"{path}: {key} is not allowed at this level")
    for name, sub in (schema.get("properties") or {}).items():
        problems += _structural_problems(sub, f"{path}.{name}")
    if isinstance(schema.get("additionalProperties"), dict):
        problems += _structural_problems(schema["additionalProperties"], f"{path}.*")
    if isinstance(schema.get("items"), dict):
        problems += _structural_problems(schema["items"], f"{path}[]")
    return problems


@pytest.mark.parametrize("crd", CRDS, ids=[c.kind + "-" + c.group for c in CRDS])
def test_schemas_are_structural(crd):
    for version in _manifest(crd.plural, crd.group)["spec"]["versions"]:
        root = version["schema"]["openAPIV3Schema"]
        assert _structural_problems(root, version["name"]) == []
        assert root["properties"]["metadata"] == {"type": "object"}
