"""``CoschedulingArgs``: the Coscheduling plug-in's configuration, defaulted and validated
as koord-scheduler's ``SetDefaults_CoschedulingArgs`` and ``ValidateCoschedulingArgs`` do.

Fields (pluginConfig ``args`` of the ``Coscheduling`` plug-in):

=========================  ===================  ==================================================
field                      default              meaning
=========================  ===================  ==================================================
``defaultTimeout``         ``600s``             Permit wait of a gang that names none (Go duration)
``controllerWorkers``      ``1``                workers of the PodGroup status controller (>= 1)
``skipCheckScheduleCycle`` ``false``            accepted for older configurations; no effect
``enablePreemption``       ``false``            job-level preemption for gangs
``awareNetworkTopology``   ``false``            network-topology-aware placement of gang groups
``defaultMatchPolicy``     ``once-satisfied``   match policy of a gang that names none
=========================  ===================  ==================================================
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from controlplane.scheduler.plugins.args import ArgsError, boolean, duration
from koordinator.api.extension.gang import GANG_MATCH_POLICIES, MATCH_POLICY_ONCE_SATISFIED

__all__ = ["DEFAULT_TIMEOUT_S", "NAME", "CoschedulingArgs", "coscheduling_args"]

NAME = "Coscheduling"
#: upstream's ``defaultTimeout`` (600 s)
DEFAULT_TIMEOUT_S = 600.0
_FIELDS = frozenset(
    {
        "apiVersion",
        "kind",
        "defaultTimeout",
        "controllerWorkers",
        "skipCheckScheduleCycle",
        "enablePreemption",
        "awareNetworkTopology",
        "defaultMatchPolicy",
    }
)


@dataclass(frozen=True, slots=True)
class CoschedulingArgs:
    """The plug-in's args after defaulting; durations in seconds."""

    default_timeout_s: float = DEFAULT_TIMEOUT_S
    controller_workers: int = 1
    skip_check_schedule_cycle: bool = False
    enable_preemption: bool = False
    aware_network_topology: bool = False
    default_match_policy: str = MATCH_POLICY_ONCE_SATISFIED


def _timeout(raw: Mapping[str, Any], path: str) -> float:
    value = raw.get("defaultTimeout")
    if value is None:
        return DEFAULT_TIMEOUT_S
    seconds = duration(value, f"{path}.defaultTimeout", "600s")
    if seconds < 0:
        # upstream's wording, field name included
        raise ArgsError(f"{path}: coeSchedulingArgs DefaultTimeoutSeconds invalid")
    return seconds


def _workers(raw: Mapping[str, Any], path: str) -> int:
    value = raw.get("controllerWorkers")
    if value is None:
        return 1
    if isinstance(value, bool) or not isinstance(value, int):
        raise ArgsError(f"{path}.controllerWorkers: Invalid value: {value!r}: must be an integer")
    if value < 1:
        raise ArgsError(f"{path}: coeSchedulingArgs ControllerWorkers invalid")
    return value


def _match_policy(raw: Mapping[str, Any], path: str) -> str:
    value = raw.get("defaultMatchPolicy")
    if value is None or value == "":
        return MATCH_POLICY_ONCE_SATISFIED
    if value not in GANG_MATCH_POLICIES:
        listed = ", ".join(f'"{p}"' for p in GANG_MATCH_POLICIES)
        raise ArgsError(
            f'{path}.defaultMatchPolicy: Unsupported value: "{value}": supported values: {listed}'
        )
    return str(value)


def coscheduling_args(raw: Mapping[str, Any] | None, path: str = NAME) -> CoschedulingArgs:
    """CoschedulingArgs from a pluginConfig ``args`` mapping, defaulted and validated
    (``ArgsError`` names the field)."""
    raw = raw or {}
    unknown = set(raw) - _FIELDS
    if unknown:
        raise ArgsError(f"{path}: unknown field(s) {sorted(unknown)}")
    return CoschedulingArgs(
        default_timeout_s=_timeout(raw, path),
        controller_workers=_workers(raw, path),
        skip_check_schedule_cycle=boolean(raw, "skipCheckScheduleCycle", path),
        enable_preemption=boolean(raw, "enablePreemption", path),
        aware_network_topology=boolean(raw, "awareNetworkTopology", path),
        default_match_policy=_match_policy(raw, path),
    )
