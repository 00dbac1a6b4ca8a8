"""The pure-Python twin of the compiled filter/score kernel (``native/schedkernel``).

Same signatures, same integer arithmetic (Go's truncating division where upstream divides
signed values), same random tie-break sequence: one test body runs against both. The
semantics are kube-scheduler's:

* **Filter** (NodeResourcesFit): a node fails on "Too many pods" when its pod count is at
  its limit, and on "Insufficient <resource>" for each resource the pod requests more of
  than the node has left (a resource the pod does not request never fails it).
* **Score**: NodeResourcesFit (LeastAllocated, MostAllocated or RequestedToCapacityRatio
  over its weighted resources, CPU and memory with the non-zero defaults of pods that
  request none) times its plug-in weight, plus NodeResourcesBalancedAllocation (one minus
  the standard deviation of the requested fractions, skipped for pods that request none of
  its resources) times its plug-in weight. A resource the node has none of is skipped; an
  extended resource the pod does not request is skipped.
* **Sampling** (``find``): start at ``start``, stop once ``want`` feasible nodes were
  found (upstream's ``numFeasibleNodesToFind``), keep the best total, break ties by
  reservoir sampling with the shared xorshift generator.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field

from controlplane.scheduler.kernel.table import (
    LEAST_ALLOCATED,
    MOST_ALLOCATED,
    NodeTable,
    PodVector,
    ScoreConfig,
)

MAX_NODE_SCORE = 100


@dataclass
class Extra:
    """A score plug-in outside the kernel, given as weighted row masks: its raw score of a
    row is the sum of the weights of the parts whose mask has the row; the window's scores
    are then normalized as upstream's ``DefaultNormalizeScore`` (``reverse``: fewer is
    better) and weighted by the plug-in's ``weight``."""

    name: str
    weight: int
    reverse: bool
    parts: list[tuple[bytes, int]] = field(default_factory=list)


_MASK64 = (1 << 64) - 1
#: reason codes of :func:`node_fails`; resource reasons are FIRST_RESOURCE + column
TOO_MANY_PODS = 0
FIRST_RESOURCE = 1


def _trunc_div(a: int, b: int) -> int:
    """Go's integer division (truncates toward zero)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def next_random(state: array[int]) -> int:
    """xorshift64*: advances ``state[0]`` and returns 31 random bits."""
    x = state[0]
    x ^= x >> 12
    x = (x ^ (x << 25)) & _MASK64
    x ^= x >> 27
    state[0] = x
    return ((x * 2685821657736338717) & _MASK64) >> 33


def fits(t: NodeTable, i: int, pod: PodVector) -> bool:
    return not node_fails(t, i, pod)


def node_fails(t: NodeTable, i: int, pod: PodVector) -> list[int]:
    """Every reason node ``i`` rejects the pod (empty when it fits), as reason codes."""
    out = []
    if t.pods[i] + 1 > t.pods_alloc[i]:
        out.append(TOO_MANY_PODS)
    width = t.width
    base = i * width
    req = pod.req
    for r in range(min(width, len(req))):
        want = req[r]
        if want > 0 and want > t.alloc[base + r] - t.req[base + r]:
            out.append(FIRST_RESOURCE + r)
    return out


def _fit_resource(strategy: int, requested: int, capacity: int, cfg: ScoreConfig) -> int:
    if strategy == LEAST_ALLOCATED:
        if requested > capacity:
            return 0
        return (capacity - requested) * MAX_NODE_SCORE // capacity
    if strategy == MOST_ALLOCATED:
        return min(requested, capacity) * MAX_NODE_SCORE // capacity
    utilization = MAX_NODE_SCORE if requested > capacity else requested * MAX_NODE_SCORE // capacity
    return _broken_linear(utilization, cfg)


def _broken_linear(p: int, cfg: ScoreConfig) -> int:
    xs, ys = cfg.shape_utilization, cfg.shape_score
    for k in range(len(xs)):
        if p <= xs[k]:
            if k == 0:
                return ys[0]
            return ys[k - 1] + _trunc_div((ys[k] - ys[k - 1]) * (p - xs[k - 1]), xs[k] - xs[k - 1])
    return ys[len(ys) - 1] if len(ys) else 0


def score(t: NodeTable, i: int, pod: PodVector, cfg: ScoreConfig) -> tuple[int, int]:
    """(NodeResourcesFit, NodeResourcesBalancedAllocation) scores of node ``i``, 0-100 each,
    before plug-in weights; balanced is -1 when the plug-in skips the pod."""
    width = t.width
    base = i * width
    req = pod.req
    total = weights = 0
    for r in range(min(width, len(cfg.fit_weights))):
        weight = cfg.fit_weights[r]
        want = req[r] if r < len(req) else 0
        if weight == 0 or (want == 0 and t.scalar[r]):
            continue
        capacity = t.alloc[base + r]
        if capacity == 0:
            continue
        if r < 2:  # cpu, memory: non-zero requested, as upstream scores them
            requested = t.nonzero[2 * i + r] + pod.nonzero[r]
        else:
            requested = t.req[base + r] + want
        part = _fit_resource(cfg.strategy, requested, capacity, cfg)
        if cfg.strategy == LEAST_ALLOCATED or cfg.strategy == MOST_ALLOCATED or part > 0:
            total += part * weight
            weights += weight
    if weights == 0:
        fit = 0
    elif cfg.strategy == LEAST_ALLOCATED or cfg.strategy == MOST_ALLOCATED:
        fit = total // weights
    else:
        fit = int(total / weights + 0.5)  # Go's math.Round (half away from zero; positive here)
    return fit, _balanced(t, i, pod, cfg)


def _balanced(t: NodeTable, i: int, pod: PodVector, cfg: ScoreConfig) -> int:
    width = t.width
    base = i * width
    req = pod.req
    fractions: list[float] = []
    requests_any = False
    for r in range(min(width, len(cfg.balanced))):
        if not cfg.balanced[r]:
            continue
        want = req[r] if r < len(req) else 0
        if want:
            requests_any = True
        if want == 0 and t.scalar[r]:
            continue
        capacity = t.alloc[base + r]
        if capacity == 0:
            continue
        fraction = (t.req[base + r] + want) / capacity
        fractions.append(1.0 if fraction > 1 else fraction)
    if not requests_any:
        return -1
    std = 0.0
    if len(fractions) == 2:
        std = abs((fractions[0] - fractions[1]) / 2)
    elif len(fractions) > 2:
        mean = sum(fractions) / len(fractions)
        std = (sum((f - mean) * (f - mean) for f in fractions) / len(fractions)) ** 0.5
    return int((1 - std) * MAX_NODE_SCORE)


def total_score(t: NodeTable, i: int, pod: PodVector, cfg: ScoreConfig) -> int:
    fit, balanced = score(t, i, pod, cfg)
    return fit * cfg.fit_plugin_weight + max(balanced, 0) * cfg.balanced_plugin_weight


def extra_raw(extra: Extra, i: int) -> int:
    """A plug-in's raw score of row ``i``: the weights of its parts whose mask has the row."""
    return sum(weight for part, weight in extra.parts if i < len(part) and part[i])


def normalized(raw: int, highest: int, reverse: bool) -> int:
    """Upstream's ``DefaultNormalizeScore`` of one score (the highest of the window -> 100)."""
    if highest == 0:
        return MAX_NODE_SCORE if reverse else 0
    score = MAX_NODE_SCORE * raw // highest
    return MAX_NODE_SCORE - score if reverse else score


def find(
    t: NodeTable,
    pod: PodVector,
    cfg: ScoreConfig,
    mask: bytes | bytearray,
    start: int,
    want: int,
    state: array[int],
    extras: Sequence[Extra] = (),
) -> tuple[int, int, int, int]:
    """(chosen row or -1, feasible nodes found, nodes processed, best total score).

    Rows of ``mask`` (one byte per row, 0 = rejected by another filter) are visited from
    ``start`` round the table; rejected rows count as processed; the search stops after
    ``want`` feasible rows. ``extras`` are score plug-ins outside the kernel, normalized
    over the feasible rows found (their scores need the whole window first); the best
    total wins, ties broken by reservoir sampling in visiting order. (The compiled kernel
    has a one-pass path for calls without extras; the result is the same.)"""
    n = len(mask)
    window: list[tuple[int, int]] = []
    processed = 0
    for j in range(n):
        if len(window) >= want:
            break
        i = (start + j) % n
        processed += 1
        if mask[i] and fits(t, i, pod):
            window.append((i, total_score(t, i, pod, cfg)))
    raws = [[extra_raw(e, i) for i, _ in window] for e in extras]
    highest = [max(r, default=0) for r in raws]
    chosen, best, ties = -1, -1, 0
    for k, (i, base) in enumerate(window):
        total = base + sum(
            e.weight * normalized(raws[x][k], highest[x], e.reverse) for x, e in enumerate(extras)
        )
        if total > best:
            chosen, best, ties = i, total, 1
        elif total == best:
            ties += 1
            if next_random(state) % ties == 0:
                chosen = i
    return chosen, len(window), processed, best


def diagnose(t: NodeTable, pod: PodVector, mask: bytes | bytearray) -> array[int]:
    """Per reason code, how many rows of ``mask`` reject the pod for it (upstream counts
    every reason of every node in "0/N nodes are available: ...")."""
    counts = array("q", bytes(8 * (FIRST_RESOURCE + t.width)))
    for i in range(len(mask)):
        if mask[i]:
            for code in node_fails(t, i, pod):
                counts[code] += 1
    return counts
