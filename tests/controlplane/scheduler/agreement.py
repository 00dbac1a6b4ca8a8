"""Checks that a filter and score plug-in's fast paths (byte masks, reason histograms,
kernel score parts) agree with its node-by-node explanation, shared by the plug-ins'
hand-computed and randomized tests."""

from __future__ import annotations

import random
from typing import Any

from controlplane.scheduler.cluster import Cluster
from controlplane.scheduler.kernel import twin
from controlplane.scheduler.podinfo import PodInfo


def verdicts(plugin: Any, target: PodInfo, cluster: Cluster) -> dict[str, str | None]:
    """Per node the reason ``explain`` gives (None: it passes), asserting on the way that
    the mask rejects exactly the nodes with a reason."""
    mask = plugin.mask(target, cluster)
    out = {}
    for info in cluster.nodes.values():
        why = plugin.explain(target, info, cluster)
        assert (mask is not None and not mask[info.row]) == (why is not None), info.name
        out[info.name] = why
    return out


def assert_fast_paths_agree(plugin: Any, target: PodInfo, cluster: Cluster, rng: random.Random) -> None:
    """The mask, the reason histogram and the kernel's score parts over a random window all
    agree with the node-by-node ``explain`` and ``window_scores``."""
    verdicts(plugin, target, cluster)
    live = bytes(cluster.table.live())
    mask = plugin.mask(target, cluster)
    if mask is not None:
        rejected = bytes(a & (1 - b) for a, b in zip(live, mask, strict=True))
        expected: dict[str, int] = {}
        for info in cluster.nodes.values():
            why = plugin.explain(target, info, cluster)
            if why is not None:
                expected[why] = expected.get(why, 0) + 1
        assert plugin.reasons(target, cluster, rejected) == expected
    extra = plugin.extra(target, cluster, 2)
    if extra is None:
        return
    rows = [r for r in range(cluster.table.count) if live[r]]
    window = rng.sample(rows, rng.randint(1, len(rows)))
    assert twin.window_scores(extra, window) == plugin.window_scores(target, cluster, window)
