"""DeschedulerConfiguration (``descheduler/v1alpha2``, upstream's ``--config`` format) into
descheduling profiles.

Top level: ``deschedulingInterval`` (0 or absent: one round, then the process waits),
``dryRun``, ``nodeSelector`` (the nodes every round considers), ``maxNoOfPodsToEvictPerNode``,
``maxNoOfPodsToEvictPerNamespace``, ``maxNoOfPodsToEvictTotal``, ``profiles``, and
component-base's ``leaderElection`` (Lease ``koordinator-system/koord-descheduler``),
``clientConnection`` (qps 50, burst 100), ``healthzBindAddress``/``metricsBindAddress``
(``0.0.0.0:10251``), ``enableProfiling``/``enableContentionProfiling``.

A profile names its plug-ins per extension point (``deschedule``, ``balance``, ``evict``,
``filter``; ``enabled``/``disabled`` lists of ``{name}``) over the defaults
(MigrationController as evict and filter): ``disabled: [{name: "*"}]`` drops the defaults of
that point, an enabled plug-in already among them replaces it in place, others are added.
``pluginConfig`` gives each plug-in its args (absent: its defaults). With no profile, one
named ``koord-descheduler`` runs the defaults. Exactly one evict plug-in must be enabled.
Anything upstream would refuse, or a plug-in not built here, is a :class:`ConfigError`
naming the field.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from controlplane.descheduler.args import ArgsError
from controlplane.descheduler.lownodeload import args as lownodeload_args
from controlplane.descheduler.migration import args as migration_args
from koordinator.api.goparse import GoParseError, parse_duration_seconds
from koordinator.api.selectors import SelectorError, validate_label_selector
from koordinator.componentconfig import (
    ClientConnection,
    ConfigError,
    check_unknown,
    client_connection,
    leader_election,
)

__all__ = ["API_VERSION", "KIND", "ConfigError", "DeschedulerConfig", "Profile", "load", "parse"]

API_VERSION = "descheduler/v1alpha2"
KIND = "DeschedulerConfiguration"
DEFAULT_PROFILE = "koord-descheduler"
DEFAULT_PORT = 10251
POINTS = ("deschedule", "balance", "evict", "filter")


@dataclass(frozen=True)
class PluginSpec:
    points: frozenset[str]
    parse: Callable[[Any, str], Any] | None = None


#: the plug-ins built here, the extension points each implements and its args parser
REGISTRY: dict[str, PluginSpec] = {
    lownodeload_args.NAME: PluginSpec(frozenset({"balance"}), lownodeload_args.parse_args),
    migration_args.NAME: PluginSpec(frozenset({"evict", "filter"}), migration_args.parse_args),
}
DEFAULT_PLUGINS: dict[str, list[str]] = {"evict": [migration_args.NAME], "filter": [migration_args.NAME]}


@dataclass
class Profile:
    name: str = DEFAULT_PROFILE
    #: extension point -> plug-in names in order
    plugins: dict[str, list[str]] = field(default_factory=dict)
    #: every enabled plug-in's parsed args
    args: dict[str, Any] = field(default_factory=dict)

    def enabled(self, point: str) -> list[str]:
        return self.plugins.get(point, [])


@dataclass
class DeschedulerConfig:
    profiles: list[Profile]
    descheduling_interval_s: float = 0.0
    dry_run: bool = False
    node_selector: Mapping[str, Any] | None = None
    max_pods_to_evict_per_node: int | None = None
    max_pods_to_evict_per_namespace: int | None = None
    max_pods_to_evict_total: int | None = None
    client: ClientConnection = field(default_factory=ClientConnection)
    #: the ``leaderElection`` fields the file sets, by ProcessOptions field name
    leader_election: dict[str, Any] = field(default_factory=dict)
    healthz_bind_address: str = f"0.0.0.0:{DEFAULT_PORT}"
    metrics_bind_address: str = f"0.0.0.0:{DEFAULT_PORT}"

    def plugin_names(self) -> set[str]:
        return {name for p in self.profiles for point in POINTS for name in p.enabled(point)}


TOP_LEVEL_FIELDS = frozenset(
    {
        "apiVersion",
        "kind",
        "leaderElection",
        "clientConnection",
        "healthzBindAddress",
        "metricsBindAddress",
        "enableProfiling",
        "enableContentionProfiling",
        "deschedulingInterval",
        "dryRun",
        "nodeSelector",
        "maxNoOfPodsToEvictPerNode",
        "maxNoOfPodsToEvictPerNamespace",
        "maxNoOfPodsToEvictTotal",
        "profiles",
    }
)
PROFILE_FIELDS = frozenset({"name", "plugins", "pluginConfig"})


def _plugin_set(raw: Any, point: str, path: str) -> list[str]:
    defaults = list(DEFAULT_PLUGINS.get(point, []))
    if raw is None:
        return defaults
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{path}: must be a mapping with enabled/disabled")
    check_unknown(raw, frozenset({"enabled", "disabled"}), path)

    def names(key: str) -> list[str]:
        items = raw.get(key) or []
        if not isinstance(items, list):
            raise ConfigError(f"{path}.{key}: must be a list of {{name}}")
        out = []
        for i, item in enumerate(items):
            if not isinstance(item, Mapping) or not isinstance(item.get("name"), str) or not item["name"]:
                raise ConfigError(f"{path}.{key}[{i}].name: Required value")
            out.append(item["name"])
        return out

    disabled = names("disabled")
    plugins = [] if "*" in disabled else [n for n in defaults if n not in disabled]
    for i, name in enumerate(names("enabled")):
        spec = REGISTRY.get(name)
        if spec is None:
            raise ConfigError(
                f"{path}.enabled[{i}].name: plug-in {name!r} is not registered in koord-descheduler"
            )
        if point not in spec.points:
            raise ConfigError(
                f"{path}.enabled[{i}].name: plug-in {name!r} does not implement the {point} extension point"
            )
        if name not in plugins:
            plugins.append(name)
    return plugins


def _profile(raw: Any, path: str) -> Profile:
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{path}: must be a mapping")
    check_unknown(raw, PROFILE_FIELDS, path)
    plugins_raw = raw.get("plugins") or {}
    if not isinstance(plugins_raw, Mapping):
        raise ConfigError(f"{path}.plugins: must be a mapping")
    check_unknown(plugins_raw, frozenset(POINTS), f"{path}.plugins")
    profile = Profile(name=str(raw.get("name") or ""))
    for point in POINTS:
        profile.plugins[point] = _plugin_set(plugins_raw.get(point), point, f"{path}.plugins.{point}")
    evict = profile.plugins["evict"]
    if not evict:
        raise ConfigError(f"{path}.plugins.evict: no evict plugin is enabled")
    if len(evict) > 1:
        raise ConfigError(f"{path}.plugins.evict: only one evict plugin can be enabled")
    configs = raw.get("pluginConfig") or []
    if not isinstance(configs, list):
        raise ConfigError(f"{path}.pluginConfig: must be a list of {{name, args}}")
    given: dict[str, Any] = {}
    for i, entry in enumerate(configs):
        where = f"{path}.pluginConfig[{i}]"
        if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str):
            raise ConfigError(f"{where}.name: Required value")
        name = entry["name"]
        if name in given:
            raise ConfigError(f"{where}: Duplicate value: {name!r}")
        if name not in REGISTRY:
            raise ConfigError(f"{where}.name: plug-in {name!r} is not registered in koord-descheduler")
        args = entry.get("args")
        if isinstance(args, Mapping):
            args = {k: v for k, v in args.items() if k not in ("apiVersion", "kind")}
        given[name] = args
    enabled = {n for point in POINTS for n in profile.plugins[point]}
    for name in sorted(enabled | set(given)):
        parser = REGISTRY[name].parse
        if parser is None:
            continue
        try:
            profile.args[name] = parser(given.get(name), f"{path}.pluginConfig[{name}].args")
        except ArgsError as err:
            raise ConfigError(str(err)) from None
    return profile


def _limit(data: Mapping[str, Any], key: str) -> int | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"{key}: Invalid value: {value!r}: must be a non-negative integer")
    return value


def _address(data: Mapping[str, Any], key: str) -> str:
    value = data.get(key)
    if value is None:
        return f"0.0.0.0:{DEFAULT_PORT}"
    if not isinstance(value, str):
        raise ConfigError(f"{key}: must be host:port")
    host, sep, port = value.rpartition(":")
    if not sep:
        return f"{value}:{DEFAULT_PORT}"
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"{key}: Invalid value: {value!r}: must be a valid socket address")
    return f"{host or '0.0.0.0'}:{port}"


def parse(data: Mapping[str, Any] | None) -> DeschedulerConfig:
    """A DeschedulerConfiguration mapping (None: every default)."""
    data = data or {}
    if not isinstance(data, Mapping):
        raise ConfigError("DeschedulerConfiguration: must be a mapping")
    check_unknown(data, TOP_LEVEL_FIELDS, KIND)
    api_version = data.get("apiVersion", API_VERSION)
    if api_version != API_VERSION:
        raise ConfigError(
            f"apiVersion: Unsupported value: {api_version!r}: supported values: {API_VERSION!r}"
        )
    if data.get("kind", KIND) != KIND:
        raise ConfigError(f"kind: Unsupported value: {data.get('kind')!r}: supported values: {KIND!r}")
    raw_profiles = data.get("profiles") or [{}]
    if not isinstance(raw_profiles, list):
        raise ConfigError("profiles: must be a list")
    profiles = [_profile(p, f"profiles[{i}]") for i, p in enumerate(raw_profiles)]
    if len(profiles) == 1 and not profiles[0].name:
        profiles[0].name = DEFAULT_PROFILE
    seen: set[str] = set()
    for i, profile in enumerate(profiles):
        if not profile.name:
            raise ConfigError(f"profiles[{i}].name: Required value")
        if profile.name in seen:
            raise ConfigError(f"profiles[{i}].name: Duplicate value: {profile.name!r}")
        seen.add(profile.name)
    interval = data.get("deschedulingInterval")
    seconds = 0.0
    if interval is not None:
        try:
            seconds = parse_duration_seconds(str(interval))
        except GoParseError as err:
            raise ConfigError(f"deschedulingInterval: Invalid value: {interval!r}: {err}") from None
        if seconds < 0:
            raise ConfigError(f"deschedulingInterval: Invalid value: {interval!r}: must not be negative")
    dry_run = data.get("dryRun", False)
    if not isinstance(dry_run, bool):
        raise ConfigError(f"dryRun: Invalid value: {dry_run!r}: must be true or false")
    node_selector = data.get("nodeSelector")
    try:
        validate_label_selector(node_selector)
    except SelectorError as err:
        raise ConfigError(f"nodeSelector: Invalid value: {err}") from None
    return DeschedulerConfig(
        profiles=profiles,
        descheduling_interval_s=seconds,
        dry_run=dry_run,
        node_selector=node_selector,
        max_pods_to_evict_per_node=_limit(data, "maxNoOfPodsToEvictPerNode"),
        max_pods_to_evict_per_namespace=_limit(data, "maxNoOfPodsToEvictPerNamespace"),
        max_pods_to_evict_total=_limit(data, "maxNoOfPodsToEvictTotal"),
        client=client_connection(data.get("clientConnection")),
        leader_election=leader_election(data.get("leaderElection")),
        healthz_bind_address=_address(data, "healthzBindAddress"),
        metrics_bind_address=_address(data, "metricsBindAddress"),
    )


def load(path: str | None) -> DeschedulerConfig:
    """The file at ``path`` (None: every default)."""
    if path is None:
        return parse(None)
    try:
        data = yaml.safe_load(Path(path).read_text())
    except OSError as err:
        raise ConfigError(f"cannot read {path}: {err.strerror or err}") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not YAML: {err}") from None
    return parse(data)
