"""A fake apiserver that validates Device objects as the real one does (the generated CRD's
schema, through :mod:`koordinator.api.schema`), so a report the real apiserver would refuse
(a resource value that is not a quantity, a condition reason outside its pattern) is refused
here too."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from koordinator.api.schema import validator_for
from testsupport.fake import Cause, FakeApiServer

CRDS = Path(__file__).resolve().parents[3] / "crds"
DEVICE_CRD = CRDS / "scheduling.koordinator.sh_devices.yaml"


def _validator(schema: Mapping[str, Any]) -> Callable[[Mapping[str, Any]], list[Cause]]:
    def check(obj: Mapping[str, Any]) -> list[Cause]:
        validator = validator_for(str(obj.get("apiVersion")), str(obj.get("kind")))
        if validator is None:
            return []
        _, errors = validator.admit(obj)
        return [Cause(e.type.value, e.detail, e.field) for e in errors]

    return check


def validating_apiserver() -> FakeApiServer:
    """A fake apiserver with the Device CRD registered and its schema enforced."""
    fake = FakeApiServer(schema_validator=_validator)
    fake.register_crd(DEVICE_CRD)
    return fake
