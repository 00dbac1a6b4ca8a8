"""The patch formats the fake apiserver accepts: JSON patch and JSON merge patch
(:mod:`koordinator.kube.patches`) and Kubernetes strategic merge patch
(:mod:`koordinator.kube.strategicmerge`, with the merge keys of
:class:`~testsupport.fake.schema.Structure`).
"""

from __future__ import annotations

from typing import Any

from koordinator.kube.patches import PatchError, json_patch, merge_patch
from koordinator.kube.strategicmerge import StrategicMergeError, strategic_merge
from testsupport.fake.schema import Path, Structure

__all__ = ["PatchError", "json_patch", "merge_patch", "strategic_merge_patch"]


# --- strategic merge patch ----------------------------------------------------------


def strategic_merge_patch(original: Any, patch: Any, structure: Structure) -> Any:
    """The apiserver's strategic merge, with the lists' rules from ``structure``."""

    def rule(path: Path) -> str | None:
        list_rule = structure.list_rule(path)
        return list_rule.smp_key if list_rule.smp_merge else None

    try:
        return strategic_merge(original if isinstance(original, dict) else {}, patch, rule)
    except StrategicMergeError as exc:
        raise PatchError(str(exc)) from exc
