"""ImageLocality (score): favour nodes that already hold the pod's container images.

Upstream's rules (``plugins/imagelocality``, v1.34): every container, init containers
included, whose image (normalized: ``:latest`` appended when the name has no tag) a node
lists in ``status.images`` adds the image's size scaled by its spread, ``int(size *
nodesWithImage / allNodes)``; the sum, clamped to [23 MiB, 1000 MiB x containers], maps
linearly onto 0..100. The image's size is the one the first node listing it reported.
There is no NormalizeScore: that is the node's final score.

The cluster keeps each image name as the rows listing it (a bit set) and its size, so the
pod's score splits the rows by which of its images they hold (a few big-integer ANDs per
image) and each part carries its final score: the plug-in's ``Extra`` asks the kernel for
no normalization (``NO_NORMALIZE``).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from controlplane.scheduler.cluster import Cluster, NodeInfo
from controlplane.scheduler.kernel.twin import MAX_NODE_SCORE, NO_NORMALIZE, Extra
from controlplane.scheduler.plugins.interface import rows_mask
from controlplane.scheduler.podinfo import PodInfo

NAME = "ImageLocality"
MB = 1024 * 1024
MIN_THRESHOLD = 23 * MB
MAX_CONTAINER_THRESHOLD = 1000 * MB


@functools.lru_cache(maxsize=4096)
def normalized_image_name(name: str) -> str:
    """Upstream's ``normalizedImageName``: ``:latest`` when the name carries no tag."""
    if name.rfind(":") <= name.rfind("/"):
        return name + ":latest"
    return name


def scaled_image_score(size: int, nodes_with_image: int, total_nodes: int) -> int:
    """Upstream's ``scaledImageScore``: the size times the image's spread, truncated as Go's
    ``int64(float64(size) * spread)``."""
    return int(float(size) * (nodes_with_image / total_nodes))


def calculate_priority(sum_scores: int, containers: int) -> int:
    """Upstream's ``calculatePriority``: the clamped sum scaled onto 0..100."""
    max_threshold = MAX_CONTAINER_THRESHOLD * containers
    if sum_scores < MIN_THRESHOLD:
        sum_scores = MIN_THRESHOLD
    elif sum_scores > max_threshold:
        sum_scores = max_threshold
    return MAX_NODE_SCORE * (sum_scores - MIN_THRESHOLD) // (max_threshold - MIN_THRESHOLD)


class ImageLocality:
    NAME = NAME
    reverse = False

    def __init__(self) -> None:
        self._cluster: Cluster | None = None

    def _images(self, pod: PodInfo, cluster: Cluster) -> list[tuple[int, int]]:
        """(rows holding it, its scaled score times the containers using it) per image of
        the pod that some node lists."""
        total = len(cluster.nodes)
        if not total or not cluster.images:
            return []
        counts: dict[str, int] = {}
        for image in pod.images:
            name = normalized_image_name(image)
            counts[name] = counts.get(name, 0) + 1
        out = []
        for name, count in counts.items():
            state = cluster.images.get(name)
            if state is not None:
                out.append(
                    (state.rows, count * scaled_image_score(state.size, state.rows.bit_count(), total))
                )
        return out

    def extra(self, pod: PodInfo, cluster: Cluster, weight: int) -> Extra | None:
        self._cluster = cluster
        # split the rows by the images they hold: each group has one sum, so one score
        groups: list[tuple[int, int]] = []
        for rows, score in self._images(pod, cluster):
            split = []
            rest = rows
            for group, total in groups:
                inside = group & rows
                if inside:
                    split.append((inside, total + score))
                if group & ~rows:
                    split.append((group & ~rows, total))
                rest &= ~group
            if rest:
                split.append((rest, score))
            groups = split
        by_score: dict[int, int] = {}
        containers = len(pod.images)
        for group, total in groups:
            score = calculate_priority(total, containers)
            if score:
                by_score[score] = by_score.get(score, 0) | group
        if not by_score:
            return None  # every node scores 0: nothing to add
        n = cluster.table.count
        parts = [(rows_mask(rows, n), score) for score, rows in by_score.items()]
        return Extra(NAME, weight, False, parts, normalize=NO_NORMALIZE)

    def raw_score(self, pod: PodInfo, node: NodeInfo) -> int:
        """The node's score (final: upstream normalizes nothing)."""
        cluster = self._cluster
        if cluster is None or not pod.images:
            return 0
        return self._score(self._images(pod, cluster), node.row, len(pod.images))

    def window_scores(self, pod: PodInfo, cluster: Cluster, rows: Sequence[int]) -> list[int]:
        """The scores of ``rows`` as they are (``simulate``: no normalization over the window)."""
        images = self._images(pod, cluster)
        return [self._score(images, row, len(pod.images)) for row in rows]

    @staticmethod
    def _score(images: list[tuple[int, int]], row: int, containers: int) -> int:
        return calculate_priority(sum(score for rows, score in images if rows >> row & 1), containers)
