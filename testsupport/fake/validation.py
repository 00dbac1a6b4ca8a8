"""Validation the fake apiserver applies before storing an object (422 Invalid on failure).

It covers what tests trip over in practice, with the apiserver's field paths and wording:
object names, labels, required pod fields, pod spec immutability, Lease durations,
PodDisruptionBudget exclusivity. CRD-backed kinds get a structural type check plus any
validator plugged into the fake's registry.
"""

from __future__ import annotations

import re
from typing import Any

from testsupport.fake.registry import ResourceType
from testsupport.fake.schema import check_types
from testsupport.fake.status import Cause

Obj = dict[str, Any]

_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation "
    "is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start "
    "and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
#: Kinds whose names must be DNS labels rather than subdomains.
_LABEL_NAMED = frozenset({"Namespace", "Service"})


def required(field: str, detail: str = "") -> Cause:
    return Cause("FieldValueRequired", f"Required value: {detail}" if detail else "Required value", field)


def invalid_value(field: str, value: Any, detail: str) -> Cause:
    rendered = f'"{value}"' if isinstance(value, str) else str(value)
    return Cause("FieldValueInvalid", f"Invalid value: {rendered}: {detail}", field)


def _check_name(field: str, name: str, as_label: bool) -> list[Cause]:
    if as_label:
        if len(name) > 63 or not _DNS1123_LABEL.match(name):
            return [invalid_value(field, name, _LABEL_MSG)]
    elif len(name) > 253 or not _DNS1123_SUBDOMAIN.match(name):
        return [invalid_value(field, name, _SUBDOMAIN_MSG)]
    return []


def _check_labels(labels: Any) -> list[Cause]:
    causes: list[Cause] = []
    if labels is None:
        return causes
    if not isinstance(labels, dict):
        return [invalid_value("metadata.labels", str(labels), "must be a map of strings")]
    for key, value in labels.items():
        prefix, _, name = key.rpartition("/")
        if (
            (prefix and (len(prefix) > 253 or not _DNS1123_SUBDOMAIN.match(prefix)))
            or not name
            or len(name) > 63
            or not _QUALIFIED_NAME.match(name)
        ):
            causes.append(
                invalid_value(
                    "metadata.labels",
                    key,
                    "name part must consist of alphanumeric characters, '-', '_' "
                    "or '.', and must start and end with an alphanumeric character",
                )
            )
        if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.match(value):
            causes.append(
                invalid_value(
                    "metadata.labels",
                    value,
                    "a valid label must be an empty string or consist of alphanumeric characters, "
                    "'-', '_' or '.', and must start and end with an alphanumeric character",
                )
            )
    return causes


def validate_meta(rtype: ResourceType, obj: Obj) -> list[Cause]:
    meta = obj.get("metadata") or {}
    causes: list[Cause] = []
    name = meta.get("name")
    if not name:
        causes.append(required("metadata.name", "name or generateName is required"))
    else:
        causes.extend(
            _check_name("metadata.name", str(name), rtype.kind in _LABEL_NAMED and not rtype.crd_name)
        )
    if rtype.namespaced and not meta.get("namespace"):
        causes.append(required("metadata.namespace"))
    causes.extend(_check_labels(meta.get("labels")))
    annotations = meta.get("annotations")
    if annotations is not None and (
        not isinstance(annotations, dict) or not all(isinstance(v, str) for v in annotations.values())
    ):
        causes.append(invalid_value("metadata.annotations", "", "annotation values must be strings"))
    finalizers = meta.get("finalizers")
    if finalizers is not None and (
        not isinstance(finalizers, list) or not all(isinstance(f, str) and f for f in finalizers)
    ):
        causes.append(
            invalid_value("metadata.finalizers", str(finalizers), "finalizers must be non-empty strings")
        )
    return causes


def _containers(spec: Obj, field: str, required_list: bool) -> list[Cause]:
    causes: list[Cause] = []
    containers = spec.get(field)
    if not containers:
        if required_list:
            causes.append(required(f"spec.{field}"))
        return causes
    if not isinstance(containers, list):
        return [invalid_value(f"spec.{field}", str(containers), "must be a list")]
    seen: set[str] = set()
    for i, container in enumerate(containers):
        path = f"spec.{field}[{i}]"
        if not isinstance(container, dict):
            causes.append(invalid_value(path, str(container), "must be an object"))
            continue
        name = container.get("name")
        if not name:
            causes.append(required(f"{path}.name"))
        else:
            causes.extend(_check_name(f"{path}.name", str(name), as_label=True))
            if name in seen:
                causes.append(Cause("FieldValueDuplicate", f'Duplicate value: "{name}"', f"{path}.name"))
            seen.add(str(name))
        if not container.get("image") and field != "ephemeralContainers":
            causes.append(required(f"{path}.image"))
    return causes


_POD_MUTABLE_MSG = (
    "Forbidden: pod updates may not change fields other than `spec.containers[*].image`,"
    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to "
    "existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was "
    "previously negative)"
)


def _pod_spec_for_compare(spec: Obj) -> Obj:
    out = dict(spec)
    for field in ("containers", "initContainers"):
        out[field] = [
            {k: v for k, v in c.items() if k != "image"} for c in spec.get(field) or () if isinstance(c, dict)
        ]
    out.pop("activeDeadlineSeconds", None)
    out.pop("tolerations", None)
    out.pop("schedulingGates", None)
    return out


def validate_pod(obj: Obj, old: Obj | None) -> list[Cause]:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return [required("spec.containers")]
    causes = _containers(spec, "containers", required_list=True)
    causes += _containers(spec, "initContainers", required_list=False)
    if old is not None and not causes:
        old_spec = old.get("spec") or {}
        if _pod_spec_for_compare(spec) != _pod_spec_for_compare(old_spec):
            causes.append(Cause("FieldValueForbidden", _POD_MUTABLE_MSG, "spec"))
        old_tolerations = old_spec.get("tolerations") or []
        new_tolerations = spec.get("tolerations") or []
        if any(t not in new_tolerations for t in old_tolerations):
            causes.append(Cause("FieldValueForbidden", _POD_MUTABLE_MSG, "spec.tolerations"))
        old_gates = old_spec.get("schedulingGates") or []
        if any(g not in old_gates for g in spec.get("schedulingGates") or []):
            causes.append(
                Cause(
                    "FieldValueForbidden",
                    "Forbidden: only deletion is allowed, but found new scheduling gate",
                    "spec.schedulingGates",
                )
            )
    return causes


def validate_lease(obj: Obj, old: Obj | None) -> list[Cause]:
    spec = obj.get("spec") or {}
    causes = []
    duration = spec.get("leaseDurationSeconds")
    if duration is not None and (not isinstance(duration, int) or duration <= 0):
        causes.append(invalid_value("spec.leaseDurationSeconds", duration, "must be greater than 0"))
    transitions = spec.get("leaseTransitions")
    if transitions is not None and (not isinstance(transitions, int) or transitions < 0):
        causes.append(
            invalid_value("spec.leaseTransitions", transitions, "must be greater than or equal to 0")
        )
    return causes


def validate_pdb(obj: Obj, old: Obj | None) -> list[Cause]:
    spec = obj.get("spec") or {}
    if spec.get("minAvailable") is not None and spec.get("maxUnavailable") is not None:
        return [invalid_value("spec", "", "minAvailable and maxUnavailable cannot be both set")]
    return []


def validate_node(obj: Obj, old: Obj | None) -> list[Cause]:
    causes = []
    for i, taint in enumerate((obj.get("spec") or {}).get("taints") or ()):
        if not isinstance(taint, dict) or not taint.get("key"):
            causes.append(required(f"spec.taints[{i}].key"))
        elif taint.get("effect") not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
            causes.append(
                Cause(
                    "FieldValueNotSupported",
                    f'Unsupported value: "{taint.get("effect", "")}": supported '
                    'values: "NoSchedule", "PreferNoSchedule", "NoExecute"',
                    f"spec.taints[{i}].effect",
                )
            )
    return causes


BUILTIN_VALIDATORS = {
    ("", "Pod"): validate_pod,
    ("coordination.k8s.io", "Lease"): validate_lease,
    ("policy", "PodDisruptionBudget"): validate_pdb,
    ("", "Node"): validate_node,
}


def validate(rtype: ResourceType, obj: Obj, old: Obj | None) -> list[Cause]:
    causes = validate_meta(rtype, obj)
    builtin = BUILTIN_VALIDATORS.get((rtype.group, rtype.kind)) if not rtype.crd_name else None
    if builtin is not None:
        causes += builtin(obj, old)
    if rtype.crd_schema is not None:
        causes += [
            Cause(reason, message, field) for field, reason, message in check_types(obj, rtype.crd_schema)
        ]
    for extra in rtype.validators:
        causes += extra(obj, old)
    return causes
