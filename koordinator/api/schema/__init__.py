"""Validation of custom resources against their CRD, the way the apiserver does it.

:class:`CRDValidator` wraps one CustomResourceDefinition (a manifest dict, e.g. from
``crds/``, or a :class:`~koordinator.api.types.registry.CRDDefinition`). ``admit(obj)``
runs the apiserver's pipeline for a create/update — prune unknown fields and nulls, apply
defaults, validate the structural schema and the CEL rules — and returns the stored form
with the errors; an empty error list means the apiserver would accept it.

    validator = validator_for("scheduling.koordinator.sh/v1alpha1", "Reservation")
    stored, errors = validator.admit(obj)
    for error in errors:
        print(error)   # spec.ttl: Invalid value: "12 hours": spec.ttl in body should match '...'
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from koordinator.api.crdgen import crd_manifest
from koordinator.api.schema.errors import ErrorType, FieldError
from koordinator.api.schema.structural import apply_defaults, prune, validate
from koordinator.api.types.registry import CRDS, crd_for

__all__ = [
    "CRDValidator",
    "ErrorType",
    "FieldError",
    "apply_defaults",
    "prune",
    "validate",
    "validator_for",
    "validators",
]


@dataclass(frozen=True, slots=True)
class _Version:
    name: str
    served: bool
    storage: bool
    schema: Mapping[str, Any]
    status_subresource: bool


class CRDValidator:
    """The validation behaviour of one CRD."""

    def __init__(self, manifest: Mapping[str, Any]) -> None:
        spec = manifest["spec"]
        self.name: str = manifest["metadata"]["name"]
        self.group: str = spec["group"]
        names = spec["names"]
        self.kind: str = names["kind"]
        self.plural: str = names["plural"]
        self.namespaced: bool = spec["scope"] == "Namespaced"
        self._versions = {
            v["name"]: _Version(
                v["name"],
                bool(v.get("served", True)),
                bool(v.get("storage", False)),
                v["schema"]["openAPIV3Schema"],
                "status" in (v.get("subresources") or {}),
            )
            for v in spec["versions"]
        }

    @property
    def versions(self) -> tuple[str, ...]:
        return tuple(self._versions)

    @property
    def storage_version(self) -> str:
        return next(v.name for v in self._versions.values() if v.storage)

    def schema(self, version: str) -> Mapping[str, Any]:
        return self._versions[version].schema

    def has_status_subresource(self, version: str) -> bool:
        return self._versions[version].status_subresource

    def _version_of(self, obj: Mapping[str, Any]) -> tuple[_Version | None, list[FieldError]]:
        api_version = obj.get("apiVersion")
        group, _, version = str(api_version or "").rpartition("/")
        errors = []
        if group != self.group or version not in self._versions or not self._versions[version].served:
            served = [f"{self.group}/{v.name}" for v in self._versions.values() if v.served]
            errors.append(FieldError.not_supported("apiVersion", api_version, served))
        if obj.get("kind") != self.kind:
            errors.append(FieldError.not_supported("kind", obj.get("kind"), [self.kind]))
        return (self._versions.get(version) if not errors else None), errors

    def admit(
        self, obj: Mapping[str, Any], *, old: Mapping[str, Any] | None = None
    ) -> tuple[dict[str, Any], list[FieldError]]:
        """Prune, default and validate ``obj``; returns the object as the apiserver would store it."""
        version, errors = self._version_of(obj)
        if version is None:
            return dict(obj), errors
        stored = apply_defaults(prune(obj, version.schema), version.schema)
        return stored, validate(stored, version.schema, old=old)

    def validate(self, obj: Mapping[str, Any], *, old: Mapping[str, Any] | None = None) -> list[FieldError]:
        """Errors of ``obj`` as given (no pruning or defaulting)."""
        version, errors = self._version_of(obj)
        if version is None:
            return errors
        return validate(obj, version.schema, old=old)


@cache
def validators() -> dict[str, CRDValidator]:
    """Validators of every CRD Koordinator installs, by CRD name (``<plural>.<group>``)."""
    return {crd.name: CRDValidator(crd_manifest(crd)) for crd in CRDS}


def validator_for(api_version: str, kind: str) -> CRDValidator | None:
    """The validator for ``apiVersion``/``kind``, or ``None`` when it is not a Koordinator CRD."""
    crd = crd_for(api_version, kind)
    return validators()[crd.name] if crd is not None else None
