"""Envtest: every generated CRD applies to a real kube-apiserver, which accepts the valid
samples and refuses each invalid case with the errors the project's own validator gives."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from koordinator.kube.client import ApiClient
from koordinator.kube.errors import InvalidError
from koordinator.kube.resources import Resource
from tests.koordinator.api.crd_cases import ALL_SAMPLES, BASES, DATA, INVALID, sample_id

CRDS = Path(__file__).resolve().parents[3] / "crds"
APISERVER_ERRORS: dict[str, list[str]] = json.loads((DATA / "apiserver_errors.json").read_text())


def _resource(obj: dict[str, Any]) -> Resource:
    from koordinator.api.types.registry import crd_for

    crd = crd_for(obj["apiVersion"], obj["kind"])
    assert crd is not None
    group, _, version = obj["apiVersion"].rpartition("/")
    return Resource(group, version, crd.plural, crd.kind, crd.scope == "Namespaced")


def _placed(obj: dict[str, Any], namespace: str) -> tuple[Resource, dict[str, Any]]:
    resource = _resource(obj)
    body = copy.deepcopy(obj)
    if resource.namespaced:
        body["metadata"]["namespace"] = namespace
    else:
        body["metadata"].pop("namespace", None)
    return resource, body


async def test_crds_apply_and_the_apiserver_judges_objects_like_our_validator(
    envtest, envtest_client: ApiClient, envtest_namespace: str
):
    client = envtest_client
    names = await envtest.apply_crds(client, [CRDS])
    assert len(names) == len(list(CRDS.glob("*.yaml")))
    refused_valid = []
    for obj in ALL_SAMPLES + BASES:
        resource, body = _placed(obj, envtest_namespace)
        try:
            await client.create(resource, body, dry_run=True)
        except InvalidError as err:
            refused_valid.append(f"{sample_id(obj)}: {err}")
    assert not refused_valid
    mismatches = []
    for case in INVALID:
        resource, body = _placed(case.obj, envtest_namespace)
        try:
            await client.create(resource, body, dry_run=True)
        except InvalidError as err:
            got = sorted(f"{c.field}: {c.message}" for c in err.causes)
            if got != sorted(APISERVER_ERRORS[case.id]):
                mismatches.append(f"{case.id}: {got}")
        else:
            mismatches.append(f"{case.id}: accepted")
    assert not mismatches, mismatches
    assert len(INVALID) >= 40
