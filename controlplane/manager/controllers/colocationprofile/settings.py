"""The colocationprofile controller's settings (upstream's ``--colocation-profile-*`` flags) and
the profile rules it runs.

The rules are the pod webhook's own code (:mod:`controlplane.manager.webhooks.colocation`),
handed over by koord-manager when it builds the controllers, because the controllers and
the webhooks may not import each other: one way to match a profile, one way to apply it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["ColocationProfileSettings", "ProfileRules"]

Obj = dict[str, Any]


@dataclass(frozen=True)
class ProfileRules:
    #: whether one profile matches a pod: (profile, pod labels, namespace labels, warnings)
    matches: Callable[[Mapping[str, Any], Mapping[str, str], Mapping[str, str], list[str]], Awaitable[bool]]
    #: the probability rule: (profile, rand.Intn) -> skip this time
    should_skip: Callable[[Mapping[str, Any], Callable[[int], int]], bool]
    #: apply the profile's label and annotation settings and its patch to a pod copy; returns it
    apply: Callable[[Obj, Mapping[str, Any]], Awaitable[Obj]]


@dataclass(frozen=True)
class ColocationProfileSettings:
    #: reconcile every profile, not only those labelled ``config.koordinator.sh/controller-managed=true``
    reconcile_by_default: bool = False
    #: seconds between two reconciles of a profile
    reconcile_interval_s: float = 30.0
    #: a pod updated for a profile is not updated for it again within this many seconds
    force_update_pod_s: float = 300.0
    update_pod_qps: float = 10.0
    update_pod_burst: int = 100

    def __post_init__(self) -> None:
        if self.reconcile_interval_s <= 0 or self.force_update_pod_s < 0:
            raise ValueError("colocation-profile durations must be positive")
        if self.update_pod_qps <= 0 or self.update_pod_burst < 1:
            raise ValueError("colocation-profile update QPS must be positive and burst at least 1")
