"""Overuse revoke: evict pods of a quota that has used more than its runtime for too long.

Upstream's ``QuotaOverUsedRevokeController`` runs every ``revokePodInterval`` when
``monitorAllQuotas`` (and runtime quota) is on. Each quota but the system and root ones has
an :class:`OveruseMonitor`; once ``used <= runtime`` has been false for longer than
``delayEvictTime`` the monitor fires (and starts counting again), and
:func:`select_revoke_victims` picks the pods to evict:

1. the quota's assigned pods, from the least to the most important (lower priority first;
   at equal priority the later start first);
2. preemptible pods are taken away in that order until ``used <= runtime``;
3. if that is still not enough, every pod taken is evicted; otherwise the taken pods are
   put back from the most important down, each one kept if it still fits, and the rest are
   the victims.

Upstream judges with the runtime last stored on the quota, which only a PreFilter of one
of the quota's pods (or a periodic refresh) updates, so a quota whose share shrank because
a sibling grew was not seen as overused (koordinator#2342); here the runtime is recomputed
whenever its inputs changed, before each judgement.

Time is passed in (``now``, seconds); nothing here reads a clock or evicts anything.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from controlplane.scheduler.quota.args import ElasticQuotaArgs
from controlplane.scheduler.quota.forest import QuotaForest
from controlplane.scheduler.quota.pods import QuotaPod, revoke_order
from koordinator.api.extension.quota import SYSTEM_QUOTA_NAME
from koordinator.api.quantity import Quantity
from koordinator.api.resourcelist import ResourceList, add, less_than_or_equal, subtract

__all__ = ["OveruseMonitor", "OveruseRevoker", "select_revoke_victims"]


class OveruseMonitor:
    """One quota's overuse clock (``QuotaOverUsedGroupMonitor``)."""

    def __init__(self, delay_evict_time: float, now: float) -> None:
        self.delay_evict_time = delay_evict_time
        self.last_under_used = now

    def observe(self, used: Mapping[str, Quantity], runtime: Mapping[str, Quantity], now: float) -> bool:
        """Whether the quota has been over its runtime for longer than the delay, as of ``now``."""
        within, _ = less_than_or_equal(used, runtime)
        if within:
            self.last_under_used = now
            return False
        if now - self.last_under_used > self.delay_evict_time:
            self.last_under_used = now
            return True
        return False


def select_revoke_victims(
    used: Mapping[str, Quantity],
    runtime: Mapping[str, Quantity],
    pods: Sequence[tuple[QuotaPod, Mapping[str, Quantity]]],
) -> list[QuotaPod]:
    """The pods to evict so that ``used`` fits ``runtime``; ``pods`` pairs each assigned pod
    with the request its quota counts. Victims come from the most to the least important."""
    remaining: ResourceList = dict(used)
    taken: list[tuple[QuotaPod, Mapping[str, Quantity]]] = []
    for pod, request in sorted(pods, key=lambda item: revoke_order(item[0])):
        if less_than_or_equal(remaining, runtime)[0]:
            break
        if pod.non_preemptible:
            continue
        remaining = subtract(remaining, request)
        taken.append((pod, request))
    if not less_than_or_equal(remaining, runtime)[0]:
        return [pod for pod, _ in taken]
    victims: list[QuotaPod] = []
    for pod, request in reversed(taken):
        trial = add(remaining, request)
        if less_than_or_equal(trial, runtime)[0]:
            remaining = trial
        else:
            victims.append(pod)
    return victims


class OveruseRevoker:
    """The monitors of every quota of a forest; :meth:`tick` returns the pods to evict."""

    def __init__(self, forest: QuotaForest, args: ElasticQuotaArgs | None = None) -> None:
        self.forest = forest
        self.args = args or forest.args
        self._monitors: dict[str, OveruseMonitor] = {}

    @property
    def enabled(self) -> bool:
        return self.args.monitor_all_quotas and self.args.enable_runtime_quota

    def tick(self, now: float) -> list[QuotaPod]:
        """One round (every ``revokePodInterval``): the pods to evict now, quota by quota."""
        names = [name for name in self.forest.quota_names() if name != SYSTEM_QUOTA_NAME]
        for name in set(self._monitors) - set(names):
            del self._monitors[name]
        for name in names:
            self._monitors.setdefault(name, OveruseMonitor(self.args.delay_evict_time, now))
        if not self.enabled:
            return []
        victims: list[QuotaPod] = []
        for name in names:
            tree = self.forest.tree_of(name)
            if tree is None:
                continue
            used, runtime = tree.used(name), tree.runtime(name)
            if not self._monitors[name].observe(used, runtime, now):
                continue
            pods = [(pod, tree.counted_request(name, pod.key) or {}) for pod in tree.assigned_pods(name)]
            victims.extend(select_revoke_victims(used, runtime, pods))
        return victims
