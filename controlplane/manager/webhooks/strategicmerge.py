"""Strategic merge patch for pods and reservations (the ClusterColocationProfile ``patch``).

Upstream applies a profile's ``patch`` with ``strategicpatch.StrategicMergePatch`` against
the Go ``Pod`` (or ``Reservation``) struct, whose ``patchStrategy``/``patchMergeKey`` tags
decide how lists merge. The same tags are tabulated here by field path (containers and
init/ephemeral containers by ``name``, ``env`` by ``name``, ``ports`` by ``containerPort``,
``volumeMounts`` by ``mountPath``, ``volumes`` by ``name``, ``metadata.finalizers`` a union;
``tolerations`` and every other list are replaced); the merge itself is
:mod:`koordinator.kube.strategicmerge`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from koordinator.kube import strategicmerge
from koordinator.kube.strategicmerge import Path, StrategicMergeError

__all__ = ["POD_RULES", "RESERVATION_RULES", "StrategicMergeError", "strategic_merge"]

#: path of a list (field names only) -> merge key, or "" for a merged primitive list.
_CONTAINER_LISTS: dict[Path, str] = {
    ("ports",): "containerPort",
    ("env",): "name",
    ("volumeMounts",): "mountPath",
    ("volumeDevices",): "devicePath",
}
_POD_SPEC_LISTS: dict[Path, str] = {
    ("volumes",): "name",
    ("imagePullSecrets",): "name",
    ("hostAliases",): "ip",
    ("topologySpreadConstraints",): "topologyKey",
    ("resourceClaims",): "name",
    ("schedulingGates",): "name",
}
for _containers in ("containers", "initContainers", "ephemeralContainers"):
    _POD_SPEC_LISTS[(_containers,)] = "name"
    for _path, _key in _CONTAINER_LISTS.items():
        _POD_SPEC_LISTS[(_containers, *_path)] = _key
_METADATA_LISTS: dict[Path, str] = {("finalizers",): "", ("ownerReferences",): "uid"}


def _mount(prefix: Path, table: Mapping[Path, str]) -> dict[Path, str]:
    return {prefix + path: key for path, key in table.items()}


POD_RULES: dict[Path, str] = {
    **_mount(("metadata",), _METADATA_LISTS),
    **_mount(("spec",), _POD_SPEC_LISTS),
    ("status", "conditions"): "type",
    ("status", "podIPs"): "ip",
}
RESERVATION_RULES: dict[Path, str] = {
    **_mount(("metadata",), _METADATA_LISTS),
    **_mount(("spec", "template", "metadata"), _METADATA_LISTS),
    **_mount(("spec", "template", "spec"), _POD_SPEC_LISTS),
    ("status", "conditions"): "type",
}


def strategic_merge(original: Mapping[str, Any], patch: Any, rules: Mapping[Path, str]) -> dict[str, Any]:
    """``original`` with ``patch`` applied under one of the tables above; raises
    :class:`StrategicMergeError`."""
    return strategicmerge.strategic_merge(original, patch, rules.get)
