"""koord-manager's flags and environment, validated into one :class:`ManagerOptions`.

Flags follow upstream's names; the webhook settings also read upstream's environment
variables (the chart sets them): ``WEBHOOK_PORT`` (9876), ``WEBHOOK_CERT_DIR``
(``/tmp/koordinator-webhook-certs``), ``WEBHOOK_HOST`` (call the webhooks at this host or
IP instead of through the Service), ``POD_NAMESPACE`` (``koordinator-system``),
``SECRET_NAME`` (``koordinator-webhook-certs``), ``SERVICE_NAME``
(``koordinator-webhook-service``) and ``WEBHOOK_CERT_WRITER`` (``secret`` or ``fs``). A
flag given on the command line wins over its variable.

Controllers (``--controllers``, upstream's syntax: ``*`` for all, ``-name`` to leave one
out) run only on the replica holding the ``koordinator-manager`` Lease
(``--enable-leader-election``, on by default); webhooks serve on every replica. A
:class:`ManagerOptions` built in code runs no controllers unless it names them.
``--noderesource-plugins`` selects the noderesource controller's plug-ins the same way
(all of them by default, also in code).
"""

from __future__ import annotations

import argparse
import datetime
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from controlplane.manager.certs import MUTATING_CONFIGURATION, VALIDATING_CONFIGURATION, CertPolicy
from controlplane.manager.controllers.colocationprofile.settings import ColocationProfileSettings
from controlplane.manager.controllers.noderesource import plugins as noderesource_plugins
from controlplane.manager.controllers.recommendation.settings import RecommendationSettings
from controlplane.manager.controllers.running import (
    CONTROLLERS,
    DEFAULT_CONTROLLERS,
    OFF_BY_DEFAULT,
    UNIMPLEMENTED,
)
from controlplane.manager.webhooks.context import WebhookOptions
from controlplane.manager.webhooks.quotaevaluate.evaluator import QuotaUpdatePolicy
from koordinator.api.features import CONTROL_PLANE_FEATURES, FeatureGates
from koordinator.api.goparse import GoParseError, parse_duration
from koordinator.cli import bool_flag, parse_address

__all__ = [
    "MANAGER_FLAGS",
    "ManagerFlag",
    "ManagerOptions",
    "OptionsError",
    "add_manager_flags",
    "enabled_controllers",
    "enabled_noderesource_plugins",
    "options_from_args",
]

DEFAULT_CERT_DIR = "/tmp/koordinator-webhook-certs"
DEFAULT_NAMESPACE = "koordinator-system"
DEFAULT_SECRET = "koordinator-webhook-certs"
DEFAULT_SERVICE = "koordinator-webhook-service"
DEFAULT_WEBHOOK_PORT = 9876
CERT_WRITERS = ("secret", "fs")
LEADER_ELECTION_ID = "koordinator-manager"
RESOURCE_LOCK_LEASES = "leases"


class OptionsError(ValueError):
    """A flag or environment value that cannot be used."""


@dataclass(frozen=True)
class ManagerOptions:
    gates: FeatureGates = field(default_factory=lambda: FeatureGates(CONTROL_PLANE_FEATURES))
    kubeconfig: str | None = None
    kube_api_qps: float = 50.0
    kube_api_burst: int = 100
    #: ``(host, port)`` to listen on; ``None`` turns the server off (flag value ``"0"``).
    metrics_addr: tuple[str, int] | None = ("", 8080)
    health_probe_addr: tuple[str, int] | None = ("", 8000)
    webhook_bind_host: str = ""
    webhook_port: int = DEFAULT_WEBHOOK_PORT
    webhook_host: str = ""
    webhook_cert_dir: Path = Path(DEFAULT_CERT_DIR)
    webhook_namespace: str = DEFAULT_NAMESPACE
    webhook_secret_name: str = DEFAULT_SECRET
    webhook_service_name: str = DEFAULT_SERVICE
    webhook_cert_writer: str = "secret"
    #: The webhook configurations whose ``caBundle`` the manager keeps current.
    mutating_configuration: str = MUTATING_CONFIGURATION
    validating_configuration: str = VALIDATING_CONFIGURATION
    cert_policy: CertPolicy = field(default_factory=CertPolicy)
    cert_resync_s: float = 60.0
    cache_sync_timeout_s: float = 120.0
    webhook: WebhookOptions = field(default_factory=WebhookOptions)
    #: how quota admission writes ``child-request`` (``--quota-update-*``)
    quota_update: QuotaUpdatePolicy = field(default_factory=QuotaUpdatePolicy)
    #: controllers to run while leading (the command line defaults to all of them)
    controllers: tuple[str, ...] = ()
    #: the noderesource controller's plug-ins (``--noderesource-plugins``; default all)
    noderesource_plugins: tuple[str, ...] = noderesource_plugins.PLUGINS
    leader_election: bool = True
    leader_election_namespace: str = DEFAULT_NAMESPACE
    leader_election_id: str = LEADER_ELECTION_ID
    #: this replica's name in the Lease (default: hostname_uuid, as client-go builds it)
    leader_election_identity: str = ""
    lease_duration_s: float = 15.0
    renew_deadline_s: float = 10.0
    retry_period_s: float = 2.0
    #: concurrent reconciles per controller
    controller_workers: int = 4
    #: ``--colocation-profile-*`` and ``--recommendation-*``
    colocation_profile: ColocationProfileSettings = field(default_factory=ColocationProfileSettings)
    recommendation: RecommendationSettings = field(default_factory=RecommendationSettings)


def _env(environ: Mapping[str, str], name: str, default: str) -> str:
    value = environ.get(name, "")
    return value if value else default


@dataclass(frozen=True)
class ManagerFlag:
    """One koord-manager flag: its name, value parser, default and help.

    ``env`` names upstream's environment variable that supplies the default when set and
    non-empty; ``switch`` makes a ``store_true`` flag. Values stay text where
    :func:`options_from_args` validates them, so its messages name the flag.
    """

    flag: str
    help: str
    default: object = None
    kind: Callable[[str], object] = str
    env: str = ""
    switch: bool = False

    @property
    def dest(self) -> str:
        return self.flag.removeprefix("--").replace("-", "_")


#: The process flags in ``--help`` order, upstream's names and defaults.
MANAGER_FLAGS: tuple[ManagerFlag, ...] = (
    ManagerFlag("--kubeconfig", "kubeconfig file (default: in-cluster, then ~/.kube/config)"),
    ManagerFlag("--kube-api-qps", "client-side QPS limit to the apiserver", 50.0, float),
    ManagerFlag("--kube-api-burst", "client-side burst to the apiserver", 100, int),
    ManagerFlag("--metrics-addr", 'metrics listen address ("0" disables)', ":8080"),
    ManagerFlag("--health-probe-addr", 'health probe listen address ("0" disables)', ":8000"),
    ManagerFlag(
        "--webhook-port",
        "webhook server port (env WEBHOOK_PORT)",
        str(DEFAULT_WEBHOOK_PORT),
        env="WEBHOOK_PORT",
    ),
    ManagerFlag("--webhook-bind-address", "address the webhook server binds (default: all)", ""),
    ManagerFlag(
        "--webhook-host",
        "call the webhooks at https://HOST:PORT instead of the Service (env WEBHOOK_HOST)",
        "",
        env="WEBHOOK_HOST",
    ),
    ManagerFlag(
        "--webhook-cert-dir",
        "directory the serving certificate is written to (env WEBHOOK_CERT_DIR)",
        DEFAULT_CERT_DIR,
        env="WEBHOOK_CERT_DIR",
    ),
    ManagerFlag(
        "--webhook-namespace",
        "namespace of the certificate Secret and webhook Service (env POD_NAMESPACE)",
        DEFAULT_NAMESPACE,
        env="POD_NAMESPACE",
    ),
    ManagerFlag(
        "--webhook-secret-name",
        "Secret holding the webhook certificates (env SECRET_NAME)",
        DEFAULT_SECRET,
        env="SECRET_NAME",
    ),
    ManagerFlag(
        "--webhook-service-name",
        "Service the apiserver calls the webhooks through (env SERVICE_NAME)",
        DEFAULT_SERVICE,
        env="SERVICE_NAME",
    ),
    ManagerFlag(
        "--webhook-cert-writer",
        "where certificates are kept: secret (shared by replicas) or fs (env WEBHOOK_CERT_WRITER)",
        "secret",
        env="WEBHOOK_CERT_WRITER",
    ),
    ManagerFlag("--webhook-cert-validity", "lifetime of a serving certificate (Go duration)", "8760h"),
    ManagerFlag(
        "--webhook-cert-renew-before",
        "renew the serving certificate when it would expire within this duration (Go duration)",
        "4320h",
    ),
    ManagerFlag("--config-namespace", "namespace of slo-controller-config", DEFAULT_NAMESPACE),
    ManagerFlag("--slo-config-name", "name of the SLO ConfigMap", "slo-controller-config"),
    ManagerFlag(
        "--node-strategy-name-need-check",
        "slo-controller-config node strategies need unique, non-empty names",
        switch=True,
    ),
    ManagerFlag(
        "--binding-admission-user-name",
        "comma-separated substrings of user names allowed to bind pods (empty: no check)",
        "",
    ),
    ManagerFlag("--binding-admission-namespaces", "comma-separated namespaces checked ('*': all)", ""),
    ManagerFlag("--binding-admission-exclude-namespaces", "namespaces never checked", "kube-system"),
    ManagerFlag("--binding-admission-dry-run", "count would-be binding denials, allow all", switch=True),
    ManagerFlag(
        "--quota-update-max-retries",
        "most retries of a quota admission batch's child-request write (at least 3)",
        3,
        int,
    ),
    ManagerFlag(
        "--quota-update-retry-jitter",
        "a conflicting child-request write first waits [jitter/2, jitter) (Go duration, 0: never)",
        "0s",
    ),
    ManagerFlag("--quota-update-max-total-jitter", "jitter one quota admission batch may spend in all", "1s"),
    ManagerFlag(
        "--quota-update-conflict-fresh-get",
        "after a conflicting child-request write, read the quota from the apiserver, not the cache",
        False,
        bool_flag,
    ),
    ManagerFlag(
        "--controllers",
        "controllers to run: '*' for all on by default, 'name' to enable one, '-name' to leave one out "
        f"(on by default: {', '.join(DEFAULT_CONTROLLERS)}; off: {', '.join(sorted(OFF_BY_DEFAULT))})",
        ",".join(DEFAULT_CONTROLLERS),
    ),
    ManagerFlag(
        "--colocation-profile-reconcile-by-default",
        "the colocationprofile controller reconciles every ClusterColocationProfile, not only "
        "those labelled config.koordinator.sh/controller-managed=true",
        False,
        bool_flag,
    ),
    ManagerFlag(
        "--colocation-profile-reconcile-interval",
        "how often each ClusterColocationProfile is reconciled",
        "30s",
    ),
    ManagerFlag(
        "--colocation-profile-force-update-pod-duration",
        "a pod updated for a profile is not updated for it again within this long",
        "5m",
    ),
    ManagerFlag(
        "--colocation-profile-update-pod-qps",
        "pod updates per second of the colocationprofile controller",
        10.0,
        float,
    ),
    ManagerFlag("--colocation-profile-update-pod-qps-burst", "burst of those pod updates", 100, int),
    ManagerFlag(
        "--recommendation-safety-margin-percent",
        "the recommendation controller recommends the usage percentile plus this many percent",
        15.0,
        float,
    ),
    ManagerFlag("--recommendation-half-life", "a usage sample's weight halves every this long", "24h"),
    ManagerFlag(
        "--recommendation-min-samples",
        "NodeMetric samples a container needs before it is recommended",
        3,
        int,
    ),
    ManagerFlag(
        "--recommendation-checkpoint-interval",
        "a Recommendation's checkpoint ConfigMap is written at most once in this long "
        "(0: at every new sample)",
        "1m",
    ),
    ManagerFlag(
        "--noderesource-plugins",
        "noderesource plug-ins to run: '*' for all, 'Name' to enable one, '-Name' to leave one out "
        f"(all: {', '.join(noderesource_plugins.PLUGINS)})",
        ",".join(noderesource_plugins.PLUGINS),
    ),
    ManagerFlag(
        "--enable-leader-election",
        "run the controllers only on the replica holding the Lease (default true)",
        True,
        bool_flag,
    ),
    ManagerFlag(
        "--leader-election-namespace", "namespace of the koordinator-manager Lease", DEFAULT_NAMESPACE
    ),
    ManagerFlag("--leader-elect-resource-lock", "lock object (only 'leases')", RESOURCE_LOCK_LEASES),
    ManagerFlag("--leader-elect-lease-duration", "how long a lease lasts unrenewed (Go duration)", "15s"),
    ManagerFlag("--leader-elect-renew-deadline", "the leader gives up if it cannot renew within this", "10s"),
    ManagerFlag("--leader-elect-retry-period", "how often contenders try to acquire or renew", "2s"),
    ManagerFlag("--controller-workers", "concurrent reconciles of each controller", 4, int),
)


def add_manager_flags(parser: argparse.ArgumentParser, environ: Mapping[str, str] | None = None) -> None:
    """The process flags of :data:`MANAGER_FLAGS` (defaults come from the environment where upstream
    reads it)."""
    env = os.environ if environ is None else environ
    for spec in MANAGER_FLAGS:
        default = _env(env, spec.env, str(spec.default)) if spec.env else spec.default
        if spec.switch:
            parser.add_argument(spec.flag, dest=spec.dest, action="store_true", help=spec.help)
        elif spec.kind is bool_flag:
            parser.add_argument(
                spec.flag,
                dest=spec.dest,
                type=bool_flag,
                nargs="?",
                const=True,
                default=default,
                metavar="BOOL",
                help=spec.help,
            )
        else:
            parser.add_argument(spec.flag, dest=spec.dest, type=spec.kind, default=default, help=spec.help)


def _select(
    flag: str,
    spec: str,
    known: tuple[str, ...],
    unimplemented: Mapping[str, str],
    what: str,
    off_by_default: frozenset[str] = frozenset(),
) -> tuple[str, ...]:
    """Upstream's selection rule: the first mention of a name (``name`` or ``-name``) decides,
    else ``*`` enables it. Naming an unknown or unbuilt one (not to leave it out) is refused."""
    items = _split(spec)
    for item in items:
        name = item.removeprefix("-")
        if item == "*":
            continue
        if name in unimplemented and not item.startswith("-"):
            raise OptionsError(f"{flag}: {name} is not implemented in this release ({unimplemented[name]})")
        if name not in known and name not in unimplemented:
            raise OptionsError(f"{flag}: unknown {what} {name!r} (known: {', '.join(known)})")
    enabled = []
    for name in known:
        chosen = False
        for item in items:
            if item == name:
                chosen = True
                break
            if item == f"-{name}":
                chosen = False
                break
            if item == "*":
                chosen = name not in off_by_default
        if chosen:
            enabled.append(name)
    return tuple(enabled)


def enabled_controllers(spec: str) -> tuple[str, ...]:
    """Upstream's ``--controllers`` rule (see :func:`_select`); ``*`` leaves out :data:`OFF_BY_DEFAULT`."""
    return _select("--controllers", spec, tuple(CONTROLLERS), UNIMPLEMENTED, "controller", OFF_BY_DEFAULT)


def enabled_noderesource_plugins(spec: str) -> tuple[str, ...]:
    """Upstream's ``--noderesource-plugins`` rule (see :func:`_select`), in upstream's plug-in order."""
    return _select(
        "--noderesource-plugins",
        spec,
        noderesource_plugins.PLUGINS,
        noderesource_plugins.UNIMPLEMENTED,
        "plug-in",
    )


def _seconds(flag: str, text: str) -> float:
    return _duration(flag, text).total_seconds()


def _split(text: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in text.split(",") if item.strip())


def _duration(flag: str, text: str) -> datetime.timedelta:
    try:
        nanos = parse_duration(text)
    except GoParseError as exc:
        raise OptionsError(f"{flag}: {exc}") from None
    if nanos <= 0:
        raise OptionsError(f"{flag}: must be positive, got {text}")
    return datetime.timedelta(microseconds=nanos // 1000)


def _non_negative_seconds(flag: str, text: str) -> float:
    try:
        nanos = parse_duration(text)
    except GoParseError as exc:
        raise OptionsError(f"{flag}: {exc}") from None
    if nanos < 0:
        raise OptionsError(f"{flag}: must not be negative, got {text}")
    return nanos / 1e9


def _controller_settings(
    args: argparse.Namespace,
) -> tuple[ColocationProfileSettings, RecommendationSettings]:
    try:
        colocation = ColocationProfileSettings(
            reconcile_by_default=args.colocation_profile_reconcile_by_default,
            reconcile_interval_s=_seconds(
                "--colocation-profile-reconcile-interval", args.colocation_profile_reconcile_interval
            ),
            force_update_pod_s=_seconds(
                "--colocation-profile-force-update-pod-duration",
                args.colocation_profile_force_update_pod_duration,
            ),
            update_pod_qps=args.colocation_profile_update_pod_qps,
            update_pod_burst=args.colocation_profile_update_pod_qps_burst,
        )
        recommendation = RecommendationSettings(
            safety_margin=args.recommendation_safety_margin_percent / 100.0,
            half_life_s=_seconds("--recommendation-half-life", args.recommendation_half_life),
            min_samples=args.recommendation_min_samples,
            checkpoint_interval_s=_non_negative_seconds(
                "--recommendation-checkpoint-interval", args.recommendation_checkpoint_interval
            ),
        )
    except ValueError as exc:
        raise OptionsError(str(exc)) from None
    return colocation, recommendation


def _quota_update(args: argparse.Namespace) -> QuotaUpdatePolicy:
    if args.quota_update_max_retries < 0:
        raise OptionsError("--quota-update-max-retries must not be negative")
    return QuotaUpdatePolicy(
        max_retries=args.quota_update_max_retries,
        retry_jitter=_non_negative_seconds("--quota-update-retry-jitter", args.quota_update_retry_jitter),
        max_total_jitter=_non_negative_seconds(
            "--quota-update-max-total-jitter", args.quota_update_max_total_jitter
        ),
        conflict_fresh_get=args.quota_update_conflict_fresh_get,
    )


def options_from_args(args: argparse.Namespace) -> ManagerOptions:
    """Validate parsed flags; raises :class:`OptionsError` naming the flag."""
    try:
        port = int(args.webhook_port)
    except ValueError:
        raise OptionsError(
            f"--webhook-port / WEBHOOK_PORT: {args.webhook_port!r} is not a port number"
        ) from None
    if not 0 <= port <= 65535:
        raise OptionsError(f"--webhook-port: {port} is out of range")
    if args.webhook_cert_writer not in CERT_WRITERS:
        raise OptionsError(
            f"--webhook-cert-writer / WEBHOOK_CERT_WRITER: {args.webhook_cert_writer!r} "
            "is not one of secret, fs"
        )
    try:
        metrics_addr = None if args.metrics_addr == "0" else parse_address(args.metrics_addr)
        health_addr = None if args.health_probe_addr == "0" else parse_address(args.health_probe_addr)
    except ValueError as exc:
        raise OptionsError(str(exc)) from None
    validity = _duration("--webhook-cert-validity", args.webhook_cert_validity)
    renew = _duration("--webhook-cert-renew-before", args.webhook_cert_renew_before)
    if renew >= validity:
        raise OptionsError("--webhook-cert-renew-before must be shorter than --webhook-cert-validity")
    if args.leader_elect_resource_lock != RESOURCE_LOCK_LEASES:
        raise OptionsError(
            f"--leader-elect-resource-lock: {args.leader_elect_resource_lock!r}: only leases are supported"
        )
    lease = _seconds("--leader-elect-lease-duration", args.leader_elect_lease_duration)
    renew_deadline = _seconds("--leader-elect-renew-deadline", args.leader_elect_renew_deadline)
    retry = _seconds("--leader-elect-retry-period", args.leader_elect_retry_period)
    if lease <= renew_deadline:
        raise OptionsError("--leader-elect-lease-duration must be longer than --leader-elect-renew-deadline")
    if renew_deadline <= 1.2 * retry:
        raise OptionsError(
            "--leader-elect-renew-deadline must be longer than 1.2 x --leader-elect-retry-period"
        )
    if args.controller_workers < 1:
        raise OptionsError("--controller-workers must be at least 1")
    colocation, recommendation = _controller_settings(args)
    return ManagerOptions(
        gates=args.feature_gates,
        kubeconfig=args.kubeconfig,
        kube_api_qps=args.kube_api_qps,
        kube_api_burst=args.kube_api_burst,
        metrics_addr=metrics_addr,
        health_probe_addr=health_addr,
        webhook_bind_host=args.webhook_bind_address,
        webhook_port=port,
        webhook_host=args.webhook_host,
        webhook_cert_dir=Path(args.webhook_cert_dir),
        webhook_namespace=args.webhook_namespace,
        webhook_secret_name=args.webhook_secret_name,
        webhook_service_name=args.webhook_service_name,
        webhook_cert_writer=args.webhook_cert_writer,
        cert_policy=CertPolicy(serving_validity=validity, renew_before=renew),
        webhook=WebhookOptions(
            config_namespace=args.config_namespace,
            slo_config_name=args.slo_config_name,
            node_strategy_name_need_check=args.node_strategy_name_need_check,
            binding_admission_user_names=_split(args.binding_admission_user_name),
            binding_admission_namespaces=_split(args.binding_admission_namespaces),
            binding_admission_excluded_namespaces=_split(args.binding_admission_exclude_namespaces),
            binding_admission_dry_run=args.binding_admission_dry_run,
        ),
        quota_update=_quota_update(args),
        controllers=enabled_controllers(args.controllers),
        noderesource_plugins=enabled_noderesource_plugins(args.noderesource_plugins),
        leader_election=args.enable_leader_election,
        leader_election_namespace=args.leader_election_namespace,
        lease_duration_s=lease,
        renew_deadline_s=renew_deadline,
        retry_period_s=retry,
        controller_workers=args.controller_workers,
        colocation_profile=colocation,
        recommendation=recommendation,
    )
