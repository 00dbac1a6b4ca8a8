"""SchedulingHint (preFilter): a pod's ``internal.scheduling.koordinator.sh/scheduling-hint``
annotation (``{"nodeNames": [...], "extensions": {...}}``, written by a controller that
already knows where the pod belongs) narrows the nodes the filters look at to those named,
as upstream's PreFilterResult (the others: "node(s) didn't satisfy plugin(s)
[SchedulingHint]"). A hint that is not such JSON fails the pod with why.
"""

from __future__ import annotations

import orjson

from controlplane.scheduler.cluster import Cluster
from controlplane.scheduler.plugins.interface import PreFilterResult
from controlplane.scheduler.podinfo import PodInfo
from koordinator.api.extension.scheduling import ANNOTATION_SCHEDULING_HINT

NAME = "SchedulingHint"


def hinted_nodes(raw: str) -> list[str]:
    """The ``nodeNames`` of a hint; ValueError when it is not a hint."""
    try:
        hint = orjson.loads(raw)
    except orjson.JSONDecodeError as err:
        raise ValueError(f"scheduling hint is not JSON: {err}") from None
    if not isinstance(hint, dict):
        raise ValueError("scheduling hint must be a JSON object")
    names = hint.get("nodeNames") or []
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ValueError("scheduling hint nodeNames must be a list of node names")
    return names


class SchedulingHint:
    NAME = NAME

    def pre_filter(self, pod: PodInfo, cluster: Cluster) -> PreFilterResult | None:
        raw = pod.annotations.get(ANNOTATION_SCHEDULING_HINT)
        if not raw:
            return None
        try:
            names = hinted_nodes(raw)
        except ValueError as err:
            return PreFilterResult(message=str(err))
        if not names:
            return None
        rows = 0
        for name in names:
            info = cluster.nodes.get(name)
            if info is not None:
                rows |= 1 << info.row
        return PreFilterResult(rows=rows)
