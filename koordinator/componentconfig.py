"""The component-base configuration blocks that KubeSchedulerConfiguration and
DeschedulerConfiguration share: ``clientConnection`` and ``leaderElection``, decoded strictly
(an unknown field is an error naming it), and the one :class:`ConfigError` both loaders
raise (the process exits 2 on it).

``leaderElection`` fields map onto the process options' names (``leaseDuration`` ->
``lease_duration_s``); only the ``leases`` lock exists.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from koordinator.api.goparse import parse_duration_seconds

__all__ = ["ClientConnection", "ConfigError", "check_unknown", "client_connection", "leader_election"]


class ConfigError(ValueError):
    """A configuration the component cannot run with; the message names the field."""


@dataclass(frozen=True)
class ClientConnection:
    """``clientConnection``: how the component reaches the apiserver (upstream's defaults)."""

    kubeconfig: str | None = None
    qps: float = 50.0
    burst: int = 100


#: leaderElection field -> (ProcessOptions field, parser)
_LEADER_ELECTION: dict[str, tuple[str | None, Any]] = {
    "leaderElect": ("leader_elect", bool),
    "leaseDuration": ("lease_duration_s", "duration"),
    "renewDeadline": ("renew_deadline_s", "duration"),
    "retryPeriod": ("retry_period_s", "duration"),
    "resourceName": ("lease_name", str),
    "resourceNamespace": ("lease_namespace", str),
    "resourceLock": (None, str),
}


def check_unknown(raw: Mapping[str, Any], known: frozenset[str], path: str) -> None:
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ConfigError(f"{path}: strict decoding error: unknown field(s) {unknown}")


def client_connection(raw: Any) -> ClientConnection:
    if raw is None:
        return ClientConnection()
    if not isinstance(raw, Mapping):
        raise ConfigError("clientConnection: must be a mapping")
    check_unknown(
        raw,
        frozenset({"kubeconfig", "acceptContentTypes", "contentType", "qps", "burst"}),
        "clientConnection",
    )
    qps, burst = raw.get("qps", 50.0), raw.get("burst", 100)
    if isinstance(qps, bool) or not isinstance(qps, (int, float)) or qps < 0:
        raise ConfigError(f"clientConnection.qps: Invalid value: {qps!r}: must be a non-negative number")
    if isinstance(burst, bool) or not isinstance(burst, int) or burst < 0:
        raise ConfigError(f"clientConnection.burst: Invalid value: {burst!r}: must be a non-negative integer")
    kubeconfig = raw.get("kubeconfig") or None
    if kubeconfig is not None and not isinstance(kubeconfig, str):
        raise ConfigError("clientConnection.kubeconfig: must be a path")
    return ClientConnection(kubeconfig, float(qps), burst)


def leader_election(raw: Any) -> dict[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ConfigError("leaderElection: must be a mapping")
    check_unknown(raw, frozenset(_LEADER_ELECTION), "leaderElection")
    out: dict[str, Any] = {}
    for name, value in raw.items():
        option, kind = _LEADER_ELECTION[name]
        path = f"leaderElection.{name}"
        if kind == "duration":
            try:
                parsed: Any = parse_duration_seconds(str(value))
            except ValueError as err:
                raise ConfigError(f"{path}: Invalid value: {value!r}: {err}") from None
        elif not isinstance(value, kind):
            raise ConfigError(f"{path}: Invalid value: {value!r}: must be a {kind.__name__}")
        else:
            parsed = value
        if name == "resourceLock" and value != "leases":
            raise ConfigError(f'{path}: Unsupported value: {value!r}: supported values: "leases"')
        if option is not None:
            out[option] = parsed
    return out
