"""CRD registration in the fake: from YAML, pruning, structural checks and a plugged-in validator."""

from __future__ import annotations

import pytest

from koordinator.kube.errors import InvalidError
from koordinator.kube.resources import Resource
from testsupport.fake import Cause, FakeApiServer

CRD_YAML = """
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.example.koordinator.sh
spec:
  group: example.koordinator.sh
  scope: Cluster
  names: {plural: gadgets, singular: gadget, kind: Gadget, listKind: GadgetList}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [mode]
            properties:
              mode: {type: string, enum: [fast, slow]}
              count: {type: integer}
              extra: {type: object, x-kubernetes-preserve-unknown-fields: true}
"""
GADGETS = Resource("example.koordinator.sh", "v1", "gadgets", "Gadget", False)


def gadget(name: str, **spec: object) -> dict[str, object]:
    return {
        "apiVersion": "example.koordinator.sh/v1",
        "kind": "Gadget",
        "metadata": {"name": name},
        "spec": spec,
    }


async def test_crd_from_yaml_is_served_pruned_and_checked():
    async with FakeApiServer() as fake:
        crd = fake.register_crd(CRD_YAML)
        assert [c["type"] for c in crd["status"]["conditions"]] == ["NamesAccepted", "Established"]
        async with fake.client() as client:
            created = await client.create(
                GADGETS, gadget("g", mode="fast", unknown=1, extra={"free": "form"})
            )
            assert created["spec"] == {"mode": "fast", "extra": {"free": "form"}}
            assert created["metadata"]["generation"] == 1
            with pytest.raises(InvalidError) as info:
                await client.create(GADGETS, gadget("h", mode="warp", count="many"))
            assert {(c.field, c.reason) for c in info.value.causes} == {
                ("spec.mode", "FieldValueNotSupported"),
                ("spec.count", "FieldValueTypeInvalid"),
            }
            with pytest.raises(InvalidError) as info:
                await client.create(GADGETS, gadget("i"))
            assert [c.field for c in info.value.causes] == ["spec.mode"]


async def test_a_plugged_in_schema_validator_runs_on_every_write():
    seen_schemas: list[object] = []

    def factory(schema):
        seen_schemas.append(schema)

        def check(obj):
            count = obj.get("spec", {}).get("count", 0)
            return (
                [Cause("FieldValueInvalid", "Invalid value: must be even", "spec.count")] if count % 2 else []
            )

        return check

    async with FakeApiServer(schema_validator=factory) as fake:
        fake.register_crd(CRD_YAML)
        assert len(seen_schemas) == 1
        async with fake.client() as client:
            await client.create(GADGETS, gadget("ok", mode="slow", count=2))
            with pytest.raises(InvalidError, match="must be even"):
                await client.create(GADGETS, gadget("odd", mode="slow", count=3))


async def test_deleting_the_crd_removes_its_objects_and_kinds():
    async with FakeApiServer() as fake:
        fake.register_crd(CRD_YAML)
        fake.create(GADGETS, gadget("g", mode="fast"))
        async with fake.client() as client:
            from koordinator.kube import resources as res
            from koordinator.kube.errors import NotFoundError

            await client.delete(res.CUSTOM_RESOURCE_DEFINITIONS, "gadgets.example.koordinator.sh")
            with pytest.raises(NotFoundError):
                await client.list(GADGETS)
