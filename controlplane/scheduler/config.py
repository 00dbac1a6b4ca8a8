"""KubeSchedulerConfiguration (``kubescheduler.config.k8s.io/v1``, upstream's ``--config``
format) into scheduling profiles: which plug-ins run at each extension point, with which
weights and args. Anything upstream would refuse, or a plug-in that is not built here, is a
:class:`ConfigError` naming the field; the process exits 2 on it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from controlplane.scheduler.plugins import noderesources
from controlplane.scheduler.plugins.args import ArgsError
from controlplane.scheduler.registry import (
    BIND,
    DEFAULT_PLUGINS,
    FILTER,
    ORDERED_POINTS,
    POST_FILTER,
    REGISTRY,
    SCORE,
)
from koordinator.api.features import FeatureGates
from koordinator.componentconfig import (
    ClientConnection,
    check_unknown,
    client_connection,
    leader_election,
)
from koordinator.componentconfig import (
    ConfigError as ConfigError,
)

API_VERSION = "kubescheduler.config.k8s.io/v1"
KIND = "KubeSchedulerConfiguration"
#: Koordinator's scheduler profile name when no configuration names one
DEFAULT_SCHEDULER_NAME = "koord-scheduler"
EXTENSION_POINTS = (
    "multiPoint",
    "preEnqueue",
    "queueSort",
    "preFilter",
    "filter",
    "postFilter",
    "preScore",
    "score",
    "reserve",
    "permit",
    "preBind",
    "bind",
    "postBind",
)


@dataclass
class Profile:
    scheduler_name: str = DEFAULT_SCHEDULER_NAME
    percentage_of_nodes_to_score: int | None = None
    #: filter plug-ins in order
    filters: list[str] = field(default_factory=list)
    #: score plug-ins and their weights
    scores: dict[str, int] = field(default_factory=dict)
    #: DefaultPreemption runs when no node fits
    preemption: bool = False
    #: the plug-ins of the other ordered extension points (preEnqueue, reserve, permit,
    #: preBind, bind, postBind), in order
    points: dict[str, list[str]] = field(default_factory=dict)
    #: every plug-in's parsed args (its pluginConfig entry; absent: its defaults)
    args: dict[str, Any] = field(default_factory=dict)
    fit: noderesources.FitArgs = field(default_factory=noderesources.FitArgs)
    balanced: noderesources.BalancedArgs = field(default_factory=noderesources.BalancedArgs)


@dataclass
class SchedulerConfig:
    profiles: list[Profile]
    percentage_of_nodes_to_score: int | None = None
    pod_initial_backoff_seconds: int = 1
    pod_max_backoff_seconds: int = 10
    client: ClientConnection = field(default_factory=ClientConnection)
    #: the ``leaderElection`` fields the file sets, by ProcessOptions field name
    leader_election: dict[str, Any] = field(default_factory=dict)
    #: the process's ``--feature-gates`` (None: the defaults), for plug-ins that read gates
    feature_gates: FeatureGates | None = None


#: the top-level fields of KubeSchedulerConfiguration v1 (upstream decodes strictly)
TOP_LEVEL_FIELDS = frozenset(
    {
        "apiVersion",
        "kind",
        "parallelism",
        "leaderElection",
        "clientConnection",
        "healthzBindAddress",
        "metricsBindAddress",
        "enableProfiling",
        "enableContentionProfiling",
        "percentageOfNodesToScore",
        "podInitialBackoffSeconds",
        "podMaxBackoffSeconds",
        "profiles",
        "extenders",
        "delayCacheUntilActive",
    }
)
PROFILE_FIELDS = frozenset({"schedulerName", "percentageOfNodesToScore", "plugins", "pluginConfig"})


def _names(section: Any, path: str) -> list[tuple[str, int | None]]:
    if section is None:
        return []
    if not isinstance(section, list):
        raise ConfigError(f"{path}: must be a list of {{name, weight}}")
    out = []
    for i, item in enumerate(section):
        if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
            raise ConfigError(f"{path}[{i}].name: Required value")
        name = item["name"]
        if name != "*" and name not in REGISTRY:
            raise ConfigError(f"{path}[{i}].name: plug-in {name!r} is not registered in koord-scheduler")
        weight = item.get("weight")
        if weight is not None and (isinstance(weight, bool) or not isinstance(weight, int) or weight < 0):
            raise ConfigError(
                f"{path}[{i}].weight: Invalid value: {weight!r}: must be a non-negative integer"
            )
        out.append((name, weight))
    return out


def _point(
    plugins: Mapping[str, Any], point: str, path: str
) -> tuple[list[tuple[str, int | None]], set[str]]:
    section = plugins.get(point) or {}
    if not isinstance(section, Mapping):
        raise ConfigError(f"{path}.{point}: must be a mapping with enabled and disabled")
    unknown = set(section) - {"enabled", "disabled"}
    if unknown:
        raise ConfigError(f"{path}.{point}: unknown field(s) {sorted(unknown)}")
    enabled = _names(section.get("enabled"), f"{path}.{point}.enabled")
    disabled = {name for name, _ in _names(section.get("disabled"), f"{path}.{point}.disabled")}
    return enabled, disabled


def _ordered(
    plugins: Mapping[str, Any], point: str, chosen: Mapping[str, int | None], path: str
) -> list[str]:
    """The plug-ins run at ``point``, in order: multiPoint's that serve it, less the point's
    disabled ones ("*": all), then its enabled ones (upstream's merge)."""
    enabled, disabled = _point(plugins, point, f"{path}.plugins")
    for name, _ in enabled:
        if name == "*" or point not in REGISTRY[name].points:
            raise ConfigError(f"{path}.plugins.{point}.enabled: {name!r} is not a {point} plug-in")
    kept = [] if "*" in disabled else [n for n in chosen if point in REGISTRY[n].points and n not in disabled]
    return kept + [n for n, _ in enabled if n not in kept]


def _profile(raw: Mapping[str, Any], path: str) -> Profile:
    check_unknown(raw, PROFILE_FIELDS, path)
    profile = Profile(scheduler_name=raw.get("schedulerName") or "default-scheduler")
    profile.percentage_of_nodes_to_score = _percentage(
        raw.get("percentageOfNodesToScore"), f"{path}.percentageOfNodesToScore"
    )
    plugins = raw.get("plugins") or {}
    if not isinstance(plugins, Mapping):
        raise ConfigError(f"{path}.plugins: must be a mapping of extension points")
    unknown = set(plugins) - set(EXTENSION_POINTS)
    if unknown:
        raise ConfigError(f"{path}.plugins: unknown extension point(s) {sorted(unknown)}")
    # multiPoint: the defaults, less what is disabled ("*": all of them), plus what is enabled
    enabled, disabled = _point(plugins, "multiPoint", f"{path}.plugins")
    chosen: dict[str, int | None] = (
        {} if "*" in disabled else {n: w for n, w in DEFAULT_PLUGINS if n not in disabled}
    )
    for name, weight in enabled:
        chosen[name] = weight
    points = {point: _ordered(plugins, point, chosen, path) for point in ORDERED_POINTS}
    filters = points[FILTER]
    scores = {n: (w or REGISTRY[n].default_weight) for n, w in chosen.items() if SCORE in REGISTRY[n].points}
    enabled, disabled = _point(plugins, SCORE, f"{path}.plugins")
    for name, _ in enabled:
        if name == "*" or SCORE not in REGISTRY[name].points:
            raise ConfigError(f"{path}.plugins.{SCORE}.enabled: {name!r} is not a {SCORE} plug-in")
    scores = {} if "*" in disabled else {n: w for n, w in scores.items() if n not in disabled}
    scores.update({n: (w or REGISTRY[n].default_weight) for n, w in enabled})
    profile.preemption = "DefaultPreemption" in points[POST_FILTER]
    for point in EXTENSION_POINTS:
        if point not in ORDERED_POINTS and point not in ("multiPoint", SCORE):
            _point(plugins, point, f"{path}.plugins")  # validated; PrioritySort is the only queue sort
    if not points[BIND]:
        raise ConfigError(f"{path}.plugins.bind: at least one bind plug-in is needed")
    if noderesources.FIT not in filters:
        raise ConfigError(f"{path}.plugins.filter: {noderesources.FIT} cannot be disabled in koord-scheduler")
    profile.filters, profile.scores = filters, scores
    profile.points = {point: names for point, names in points.items() if point != FILTER}
    _plugin_config(raw.get("pluginConfig"), f"{path}.pluginConfig", profile)
    return profile


def _plugin_config(raw: Any, path: str, profile: Profile) -> None:
    if raw is None:
        return
    if not isinstance(raw, list):
        raise ConfigError(f"{path}: must be a list of {{name, args}}")
    seen: set[str] = set()
    for i, item in enumerate(raw):
        name = (item or {}).get("name") if isinstance(item, Mapping) else None
        if not isinstance(name, str) or name not in REGISTRY:
            raise ConfigError(f"{path}[{i}].name: plug-in {name!r} is not registered in koord-scheduler")
        if name in seen:
            raise ConfigError(f"{path}[{i}].name: Duplicate value: {name!r}")
        seen.add(name)
        spec = REGISTRY[name]
        args = item.get("args")
        if spec.args is None:
            if args:
                raise ConfigError(f"{path}[{i}].args: {name} takes no args")
            continue
        if args is not None and not isinstance(args, Mapping):
            raise ConfigError(f"{path}[{i}].args: must be a mapping")
        try:
            parsed = spec.args(args, f"{path}[{i}].args")
        except ArgsError as err:
            raise ConfigError(str(err)) from None
        profile.args[name] = parsed
        if isinstance(parsed, noderesources.FitArgs):
            profile.fit = parsed
        elif isinstance(parsed, noderesources.BalancedArgs):
            profile.balanced = parsed


def _percentage(value: Any, path: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 100:
        raise ConfigError(f"{path}: Invalid value: {value!r}: not in valid range [0-100]")
    return value


def parse(data: Any) -> SchedulerConfig:
    """A decoded configuration document; None (no ``--config``) gives the default profile."""
    if data is None:
        return SchedulerConfig([_profile({"schedulerName": DEFAULT_SCHEDULER_NAME}, "profiles[0]")])
    if not isinstance(data, Mapping):
        raise ConfigError("the configuration must be a KubeSchedulerConfiguration mapping")
    if data.get("apiVersion") != API_VERSION or data.get("kind") != KIND:
        raise ConfigError(
            f"apiVersion/kind: expected {API_VERSION} {KIND}, got {data.get('apiVersion')} {data.get('kind')}"
        )
    check_unknown(data, TOP_LEVEL_FIELDS, "KubeSchedulerConfiguration")
    if data.get("extenders"):
        raise ConfigError("extenders: scheduler extenders are not supported by koord-scheduler")
    raw_profiles = data.get("profiles") or [{"schedulerName": DEFAULT_SCHEDULER_NAME}]
    if not isinstance(raw_profiles, list):
        raise ConfigError("profiles: must be a list")
    profiles = [
        _profile(p if isinstance(p, Mapping) else {}, f"profiles[{i}]") for i, p in enumerate(raw_profiles)
    ]
    names = [p.scheduler_name for p in profiles]
    duplicate = sorted({n for n in names if names.count(n) > 1})
    if duplicate:
        raise ConfigError(f"profiles[].schedulerName: Duplicate value: {duplicate[0]!r}")
    initial = data.get("podInitialBackoffSeconds", 1)
    maximum = data.get("podMaxBackoffSeconds", 10)
    if not isinstance(initial, int) or initial <= 0:
        raise ConfigError(f"podInitialBackoffSeconds: Invalid value: {initial!r}: must be greater than 0")
    if not isinstance(maximum, int) or maximum < initial:
        raise ConfigError(
            f"podMaxBackoffSeconds: Invalid value: {maximum!r}: must be at least podInitialBackoffSeconds"
        )
    return SchedulerConfig(
        profiles,
        _percentage(data.get("percentageOfNodesToScore"), "percentageOfNodesToScore"),
        initial,
        maximum,
        client_connection(data.get("clientConnection")),
        leader_election(data.get("leaderElection")),
    )


def load(path: str | Path | None) -> SchedulerConfig:
    """``--config``: the file's configuration (None: the default profile)."""
    if path is None:
        return parse(None)
    try:
        text = Path(path).read_text()
    except OSError as err:
        raise ConfigError(f"cannot read {path}: {err.strerror or err}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ConfigError(f"{path} is not valid YAML: {err}") from None
    return parse(data)
