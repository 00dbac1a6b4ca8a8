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
* **Score plug-ins outside the kernel** (:class:`Extra`): a raw score per row from
  weighted row masks and per-domain lookups, normalized over the window of feasible rows
  found, each plug-in the way upstream normalizes it (:func:`window_scores`).
"""

from __future__ import annotations

import math
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
#: how an :class:`Extra`'s raw scores are normalized over the window
#: DEFAULT_NORMALIZE: upstream's ``DefaultNormalizeScore`` (the highest -> 100; ``reverse``)
#: MIN_MAX: InterPodAffinity's ``MaxNodeScore * (s - min) / (max - min)`` in float64, truncated
#: SPREAD: PodTopologySpread's score and ``MaxNodeScore * (max + min - s) / max``
#: NO_NORMALIZE: the raw score is the final score (ImageLocality)
DEFAULT_NORMALIZE, MIN_MAX, SPREAD, NO_NORMALIZE = 0, 1, 2, 3


@dataclass
class Domains:
    """A raw score looked up by topology domain: ``ids[row]`` is the row's domain id for one
    topology key (-1: the node lacks the key) and ``values[id]`` the domain's score.

    For SPREAD, ``values`` are matching-pod counts (per row when ``by_row``: the hostname
    key, counted per node) and the row's part is ``count * log(size + 2) + max_skew - 1``,
    ``size`` being the number of distinct domains among the window's scored rows (its
    scored rows when ``by_row``); ``absent`` is the domain a row lacking the key counts as
    for that size (-1: none)."""

    ids: array[int]
    values: array[int]
    max_skew: int = 1
    by_row: bool = False
    absent: int = -1


@dataclass
class Extra:
    """A score plug-in outside the kernel. Its raw score of a row is the sum of the weights
    of the ``parts`` whose mask has the row plus the ``domains``' values for the row; the
    window's raw scores are normalized by ``normalize`` and weighted by the plug-in's
    ``weight``. Rows of ``ignored`` (SPREAD) score 0 and stay out of the window's min and max."""

    name: str
    weight: int
    reverse: bool
    parts: list[tuple[bytes, int]] = field(default_factory=list)
    normalize: int = DEFAULT_NORMALIZE
    domains: list[Domains] = field(default_factory=list)
    ignored: bytes = b""


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


def _domain(d: Domains, i: int) -> int:
    return d.ids[i] if i < len(d.ids) else -1


def _lookup(values: array[int], index: int) -> int:
    return values[index] if 0 <= index < len(values) else 0


def extra_raw(extra: Extra, i: int) -> int:
    """A plug-in's raw score of row ``i`` (DEFAULT_NORMALIZE, MIN_MAX): the weights of its
    parts whose mask has the row, plus its domains' values for the row."""
    raw = sum(weight for part, weight in extra.parts if i < len(part) and part[i])
    for d in extra.domains:
        domain = _domain(d, i)
        if domain >= 0:
            raw += _lookup(d.values, domain)
    return raw


def go_round(x: float) -> int:
    """Go's ``math.Round``: half away from zero."""
    t = math.trunc(x)
    if abs(x - t) >= 0.5:
        t += 1 if x > 0 else -1
    return t


def _spread_scores(extra: Extra, rows: Sequence[int]) -> list[int]:
    ignored = extra.ignored
    scored = [i for i in rows if not (i < len(ignored) and ignored[i])]
    weights = []
    for d in extra.domains:
        if d.by_row:
            size = len(scored)
        else:
            seen = set()
            for i in scored:
                domain = _domain(d, i)
                if domain < 0:
                    domain = d.absent
                if 0 <= domain < len(d.values):
                    seen.add(domain)
            size = len(seen)
        weights.append(math.log(size + 2))
    raws: dict[int, int] = {}
    for i in scored:
        total = 0.0
        for d, weight in zip(extra.domains, weights, strict=True):
            domain = _domain(d, i)
            if domain >= 0:
                total += _lookup(d.values, i if d.by_row else domain) * weight + (d.max_skew - 1)
        raws[i] = go_round(total)
    lowest = min(raws.values(), default=0)
    highest = max(0, max(raws.values(), default=0))
    out = []
    for i in rows:
        if i not in raws:
            out.append(0)
        elif highest == 0:
            out.append(MAX_NODE_SCORE)
        else:
            out.append(MAX_NODE_SCORE * (highest + lowest - raws[i]) // highest)
    return out


def window_scores(extra: Extra, rows: Sequence[int]) -> list[int]:
    """The normalized scores (0-100, before the plug-in weight) of ``rows``, the window of
    feasible rows found."""
    if extra.normalize == SPREAD:
        return _spread_scores(extra, rows)
    raws = [extra_raw(extra, i) for i in rows]
    if extra.normalize == NO_NORMALIZE:
        return raws
    if extra.normalize == MIN_MAX:
        lowest, highest = min(raws, default=0), max(raws, default=0)
        diff = highest - lowest
        return [int(MAX_NODE_SCORE * ((raw - lowest) / diff)) if diff > 0 else 0 for raw in raws]
    highest = max(0, max(raws, default=0))  # upstream's maxCount starts at 0
    return [normalized(raw, highest, extra.reverse) for raw in raws]


def normalized(raw: int, highest: int, reverse: bool) -> int:
    """Upstream's ``DefaultNormalizeScore`` of one score (the highest of the window -> 100)."""
    if highest == 0:
        return MAX_NODE_SCORE if reverse else 0
    score = _trunc_div(MAX_NODE_SCORE * raw, highest)
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
    over the feasible rows found (:func:`window_scores`: they need the whole window); the best
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
    rows = [i for i, _ in window]
    scores = [window_scores(e, rows) for e in extras]
    chosen, best, ties = -1, -1, 0
    for k, (i, base) in enumerate(window):
        total = base + sum(e.weight * scores[x][k] for x, e in enumerate(extras))
        if total > best:
            chosen, best, ties = i, total, 1
        elif total == best:
            ties += 1
            if next_random(state) % ties == 0:
                chosen = i
    return chosen, len(window), processed, best


def fit_mask(t: NodeTable, pod: PodVector, mask: bytes | bytearray) -> bytes:
    """The rows of ``mask`` that NodeResourcesFit's filter passes (1 bytes)."""
    return bytes(1 if mask[i] and fits(t, i, pod) else 0 for i in range(len(mask)))


def diagnose(t: NodeTable, pod: PodVector, mask: bytes | bytearray) -> array[int]:
    """Per reason code, how many rows of ``mask`` reject the pod for it (upstream counts
    every reason of every node in "0/N nodes are available: ...")."""
    counts = array("q", bytes(8 * (FIRST_RESOURCE + t.width)))
    for i in range(len(mask)):
        if mask[i]:
            for code in node_fails(t, i, pod):
                counts[code] += 1
    return counts
