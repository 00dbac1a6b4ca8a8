"""The scenario format of ``koordlet plan``: every key checked, every value converted.

A scenario is YAML (or JSON) describing one moment of a node: the time, the feature
gates, the Node, its NodeSLO spec, its pods and their recent usage. :meth:`Scenario.parse`
reads it and refuses it with a :class:`ScenarioError` listing every problem, one line
each, named by its path (``usage.pods.prod/web.cpu``, ``pods[2].spec.containers[0]``):
a key the format does not have (with the closest known key when there is one), a value of
the wrong type, a quantity that does not parse, a percentage out of range, a pod named
twice, usage of a pod or host application the scenario does not describe. The NodeSLO is
checked against the NodeSLO CRD's schema, as the apiserver would, with unknown keys
refused instead of pruned. Node and Pod objects are checked down to their containers'
resources; deeper Kubernetes fields (affinity, volumes, probes ...) are kept as given.

The format is documented, key by key, in ``docs/plan-scenario.md``.
"""

from __future__ import annotations

import datetime
import difflib
import math
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import yaml

from koordinator.api.features import KOORDLET_FEATURES, FeatureGateError, FeatureGates
from koordinator.api.goparse import parse_duration_seconds
from koordinator.api.model import ModelError
from koordinator.api.quantity import Quantity, QuantityError
from koordinator.api.schema import validate, validator_for
from koordinator.api.sloconfig.nodeslo import merge_node_slo_spec
from koordinator.api.types.core import OBJECT_META_FIELDS
from koordinator.api.types.slo import API_VERSION as SLO_API_VERSION
from koordinator.api.types.slo import NodeSLOSpec
from koordinator.cli import yaml_problem
from koordinator.kube.timeutil import parse_time


class ScenarioError(ValueError):
    """A scenario that does not describe a situation: one line per problem."""

    def __init__(self, *problems: str) -> None:
        super().__init__("; ".join(problems))
        self.problems = list(problems)


# --- the keys of each level -----------------------------------------------------------------

SCENARIO_KEYS = (
    "now",
    "collectInterval",
    "featureGates",
    "kubeletCPUPolicy",
    "node",
    "nodeSLO",
    "pods",
    "usage",
)
USAGE_KEYS = ("node", "pods", "hostApplications")
NODE_USAGE_KEYS = ("cpu", "memory")
POD_USAGE_KEYS = ("cpu", "memory")
HOST_APPLICATION_USAGE_KEYS = ("cpu",)
KUBELET_CPU_POLICIES = ("none", "static")

#: Kubernetes objects, as far as they are checked (core/v1)
OBJECT_KEYS = ("apiVersion", "kind", "metadata", "spec", "status")
NODE_SPEC_KEYS = (
    "podCIDR",
    "podCIDRs",
    "providerID",
    "unschedulable",
    "taints",
    "configSource",
    "externalID",
)
NODE_STATUS_KEYS = (
    "capacity",
    "allocatable",
    "phase",
    "conditions",
    "addresses",
    "daemonEndpoints",
    "nodeInfo",
    "images",
    "volumesInUse",
    "volumesAttached",
    "config",
    "runtimeHandlers",
    "features",
)
POD_SPEC_KEYS = (
    "volumes",
    "initContainers",
    "containers",
    "ephemeralContainers",
    "restartPolicy",
    "terminationGracePeriodSeconds",
    "activeDeadlineSeconds",
    "dnsPolicy",
    "nodeSelector",
    "serviceAccountName",
    "serviceAccount",
    "automountServiceAccountToken",
    "nodeName",
    "hostNetwork",
    "hostPID",
    "hostIPC",
    "shareProcessNamespace",
    "securityContext",
    "imagePullSecrets",
    "hostname",
    "subdomain",
    "affinity",
    "schedulerName",
    "tolerations",
    "hostAliases",
    "priorityClassName",
    "priority",
    "dnsConfig",
    "readinessGates",
    "runtimeClassName",
    "enableServiceLinks",
    "preemptionPolicy",
    "overhead",
    "topologySpreadConstraints",
    "setHostnameAsFQDN",
    "os",
    "hostUsers",
    "schedulingGates",
    "resourceClaims",
    "resources",
)
CONTAINER_KEYS = (
    "name",
    "image",
    "command",
    "args",
    "workingDir",
    "ports",
    "envFrom",
    "env",
    "resources",
    "resizePolicy",
    "restartPolicy",
    "volumeMounts",
    "volumeDevices",
    "livenessProbe",
    "readinessProbe",
    "startupProbe",
    "lifecycle",
    "terminationMessagePath",
    "terminationMessagePolicy",
    "imagePullPolicy",
    "securityContext",
    "stdin",
    "stdinOnce",
    "tty",
)
RESOURCES_KEYS = ("requests", "limits", "claims")
POD_STATUS_KEYS = (
    "phase",
    "conditions",
    "message",
    "reason",
    "nominatedNodeName",
    "hostIP",
    "hostIPs",
    "podIP",
    "podIPs",
    "startTime",
    "initContainerStatuses",
    "containerStatuses",
    "ephemeralContainerStatuses",
    "qosClass",
    "resize",
    "resourceClaimStatuses",
    "observedGeneration",
)
CONTAINER_STATUS_KEYS = (
    "name",
    "state",
    "lastState",
    "ready",
    "restartCount",
    "image",
    "imageID",
    "containerID",
    "started",
    "allocatedResources",
    "resources",
    "volumeMounts",
    "user",
    "allocatedResourcesStatus",
    "stopSignal",
)
POD_PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")
POD_QOS_CLASSES = ("Guaranteed", "Burstable", "BestEffort")
DEFAULT_NAMESPACE = "default"


# --- the strict YAML reader -------------------------------------------------------------------


class _StrictLoader(yaml.SafeLoader):
    """Safe YAML that refuses a key given twice in one mapping (PyYAML keeps the last)."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _value in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            duplicate = key in seen
            seen.add(key)
        except TypeError:  # an unhashable key: the mapping constructor says so
            continue
        if duplicate:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def load_yaml(text: str) -> Any:
    """The document, or a :class:`ScenarioError` saying where it stops being YAML."""
    try:
        return yaml.load(text, Loader=_StrictLoader)  # a SafeLoader that refuses duplicate keys
    except yaml.YAMLError as err:
        raise ScenarioError(f"not YAML: {yaml_problem(err)}") from None


# --- the checker ---------------------------------------------------------------------------------


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, Mapping):
        return "a mapping"
    return type(value).__name__


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


class _Checker:
    """Collects problems, one line each, in the order met."""

    def __init__(self) -> None:
        self.problems: list[str] = []

    def add(self, path: str, message: str) -> None:
        self.problems.append(f"{path}: {message}" if path else message)

    def mapping(self, value: Any, path: str, known: Iterable[str] | None = None) -> Mapping[str, Any] | None:
        """``value`` when it is a mapping (absent or null counts as empty), its unknown keys
        (when ``known`` is given) reported; None after reporting a value of another type."""
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            self.add(path, f"expected a mapping, got {_kind(value)}")
            return None
        if known is not None:
            known = tuple(known)
            for key in value:
                if key not in known:
                    self.unknown(_join(path, str(key)), str(key), known)
        return value

    def unknown(self, path: str, key: str, known: Iterable[str]) -> None:
        known = list(known)
        by_lower = {k.lower(): k for k in known}
        close = difflib.get_close_matches(key.lower(), list(by_lower), n=1, cutoff=0.6)
        hint = f" (did you mean {by_lower[close[0]]}?)" if close else f" (known: {', '.join(known)})"
        self.add(path, f"unknown key{hint}")

    def string_map(self, value: Any, path: str) -> None:
        """Labels and annotations: strings to strings (quote YAML's numbers and booleans)."""
        checked = self.mapping(value, path)
        for key, item in (checked or {}).items():
            if not isinstance(item, str):
                self.add(_join(path, str(key)), f"expected a string, got {_kind(item)} (quote it)")

    def quantity(self, value: Any, path: str) -> Quantity | None:
        """A non-negative Kubernetes quantity: a number, or a string such as ``1500m`` or ``8Gi``."""
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            self.add(
                path, f"expected a quantity (a number, or a string like 1500m or 8Gi), got {_kind(value)}"
            )
            return None
        if isinstance(value, float) and not math.isfinite(value):
            self.add(path, f"expected a finite quantity, got {value}")
            return None
        try:
            parsed = Quantity.parse(str(value))
        except QuantityError:
            self.add(path, f"{value!r} is not a quantity (a number, or a string like 1500m or 8Gi)")
            return None
        if parsed.sign() < 0:
            self.add(path, f"{value!r} is negative")
            return None
        return parsed

    def resource_list(self, value: Any, path: str) -> None:
        for name, item in (self.mapping(value, path) or {}).items():
            self.quantity(item, _join(path, str(name)))

    def choice(self, value: Any, path: str, allowed: Iterable[str]) -> None:
        allowed = tuple(allowed)
        if value is not None and value not in allowed:
            self.add(path, f"{value!r} is not one of {', '.join(allowed)}")

    def integer(self, value: Any, path: str) -> None:
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            self.add(path, f"expected an integer, got {_kind(value)}")

    def list_of_mappings(self, value: Any, path: str) -> list[Mapping[str, Any]]:
        if value is None:
            return []
        if not isinstance(value, list):
            self.add(path, f"expected a list, got {_kind(value)}")
            return []
        out = []
        for i, item in enumerate(value):
            if isinstance(item, Mapping):
                out.append(item)
            else:
                self.add(f"{path}[{i}]", f"expected a mapping, got {_kind(item)}")
        return out


# --- Kubernetes objects --------------------------------------------------------------------


def _object(c: _Checker, value: Any, path: str, kind: str) -> Mapping[str, Any] | None:
    obj = c.mapping(value, path, OBJECT_KEYS)
    if obj is None:
        return None
    c.choice(obj.get("apiVersion"), _join(path, "apiVersion"), ("v1",))
    c.choice(obj.get("kind"), _join(path, "kind"), (kind,))
    meta = c.mapping(obj.get("metadata"), _join(path, "metadata"), OBJECT_META_FIELDS)
    if meta is not None:
        for key in ("name", "namespace", "uid"):
            if key in meta and not isinstance(meta[key], str):
                c.add(_join(path, f"metadata.{key}"), f"expected a string, got {_kind(meta[key])}")
        c.string_map(meta.get("labels"), _join(path, "metadata.labels"))
        c.string_map(meta.get("annotations"), _join(path, "metadata.annotations"))
    return obj


def _check_node(c: _Checker, value: Any) -> Mapping[str, Any]:
    node = _object(c, value, "node", "Node")
    if node is None:
        return {}
    c.mapping(node.get("spec"), "node.spec", NODE_SPEC_KEYS)
    status = c.mapping(node.get("status"), "node.status", NODE_STATUS_KEYS)
    if status is not None:
        c.resource_list(status.get("capacity"), "node.status.capacity")
        c.resource_list(status.get("allocatable"), "node.status.allocatable")
    return node


def _check_containers(c: _Checker, value: Any, path: str) -> None:
    for i, container in enumerate(c.list_of_mappings(value, path)):
        where = f"{path}[{i}]"
        c.mapping(container, where, CONTAINER_KEYS)
        if not isinstance(container.get("name"), str) or not container.get("name"):
            c.add(f"{where}.name", "required (a string)")
        resources = c.mapping(container.get("resources"), f"{where}.resources", RESOURCES_KEYS)
        if resources is not None:
            c.resource_list(resources.get("requests"), f"{where}.resources.requests")
            c.resource_list(resources.get("limits"), f"{where}.resources.limits")


def _check_pod(c: _Checker, value: Any, path: str) -> dict[str, Any] | None:
    """The pod, with ``metadata.namespace`` defaulted, or None when it cannot be used."""
    pod = _object(c, value, path, "Pod")
    if pod is None:
        return None
    raw_meta = pod.get("metadata")
    meta: Mapping[str, Any] = raw_meta if isinstance(raw_meta, Mapping) else {}
    usable = True
    for key in ("name", "uid"):
        if not meta.get(key):
            c.add(
                f"{path}.metadata.{key}",
                "required" + (" (the pod's cgroup is named after it)" if key == "uid" else ""),
            )
            usable = False
    spec = c.mapping(pod.get("spec"), f"{path}.spec", POD_SPEC_KEYS)
    if spec is not None:
        c.integer(spec.get("priority"), f"{path}.spec.priority")
        _check_containers(c, spec.get("containers"), f"{path}.spec.containers")
        _check_containers(c, spec.get("initContainers"), f"{path}.spec.initContainers")
        c.resource_list(spec.get("overhead"), f"{path}.spec.overhead")
    status = c.mapping(pod.get("status"), f"{path}.status", POD_STATUS_KEYS)
    if status is not None:
        c.choice(status.get("phase"), f"{path}.status.phase", POD_PHASES)
        c.choice(status.get("qosClass"), f"{path}.status.qosClass", POD_QOS_CLASSES)
        for field_name in ("containerStatuses", "initContainerStatuses"):
            statuses = c.list_of_mappings(status.get(field_name), f"{path}.status.{field_name}")
            for i, item in enumerate(statuses):
                c.mapping(item, f"{path}.status.{field_name}[{i}]", CONTAINER_STATUS_KEYS)
    if not usable:
        return None
    out = dict(pod)
    out["metadata"] = {**meta, "namespace": meta.get("namespace") or DEFAULT_NAMESPACE}
    return out


def _check_pods(c: _Checker, value: Any) -> list[dict[str, Any]]:
    if value is not None and not isinstance(value, list):
        c.add("pods", f"expected a list of Pod objects, got {_kind(value)}")
        return []
    pods: list[dict[str, Any]] = []
    keys: dict[str, int] = {}
    uids: dict[str, int] = {}
    for i, item in enumerate(value or ()):
        pod = _check_pod(c, item, f"pods[{i}]")
        if pod is None:
            continue
        meta = pod["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        if key in keys:
            c.add(f"pods[{i}]", f"{key} is already pods[{keys[key]}]")
            continue
        if meta["uid"] in uids:
            c.add(
                f"pods[{i}].metadata.uid", f"{meta['uid']!r} is already the uid of pods[{uids[meta['uid']]}]"
            )
            continue
        keys[key], uids[meta["uid"]] = i, i
        pods.append(pod)
    return pods


# --- the NodeSLO -----------------------------------------------------------------------------


@cache
def _node_slo_spec_schema() -> Mapping[str, Any]:
    validator = validator_for(SLO_API_VERSION, "NodeSLO")
    assert validator is not None
    schema: Mapping[str, Any] = validator.schema(validator.storage_version)["properties"]["spec"]
    return schema


def _unknown_keys(c: _Checker, value: Any, schema: Mapping[str, Any], path: str) -> None:
    """Keys the schema does not have (the apiserver would drop them without a word)."""
    if isinstance(value, Mapping):
        properties = schema.get("properties")
        additional = schema.get("additionalProperties")
        keeps_unknown = bool(schema.get("x-kubernetes-preserve-unknown-fields"))
        for key, item in value.items():
            where = _join(path, str(key))
            if properties is not None and key in properties:
                _unknown_keys(c, item, properties[key], where)
            elif isinstance(additional, Mapping):
                _unknown_keys(c, item, additional, where)
            elif properties is not None and not keeps_unknown:
                hint = (
                    " (nodeSLO is the NodeSLO's spec: move its keys up)"
                    if path == "nodeSLO" and key == "spec"
                    else ""
                )
                if hint:
                    c.add(where, f"unknown key{hint}")
                else:
                    c.unknown(where, str(key), properties)
    elif isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for i, item in enumerate(value):
            _unknown_keys(c, item, schema["items"], f"{path}[{i}]")


_TYPE = re.compile(r"must be of type (\w+)")
_ARTICLE = {"integer": "an", "object": "an", "array": "an"}
_TYPE_NAMES = frozenset({"object", "array", "string", "integer", "number", "boolean", "integer,string"})
_STEP = re.compile(r"\.([^.\[]+)|\[(\d+)\]")


def _value_at(data: Any, path: str) -> tuple[Any] | None:
    """The value at a schema error's path (``.a.b[0].c``), in a 1-tuple; None when not found."""
    value = data
    for key, index in _STEP.findall(path):
        if key and isinstance(value, Mapping) and key in value:
            value = value[key]
        elif index and isinstance(value, list) and int(index) < len(value):
            value = value[int(index)]
        else:
            return None
    return (value,)


def _check_node_slo(c: _Checker, value: Any) -> NodeSLOSpec | None:
    """The NodeSLO spec merged onto the defaults, or None when it has problems."""
    data = c.mapping(value, "nodeSLO")
    if data is None:
        return None
    before = len(c.problems)
    schema = _node_slo_spec_schema()
    _unknown_keys(c, data, schema, "nodeSLO")
    for error in validate(dict(data), schema, path="nodeSLO"):
        if not error.field or error.field == "<nil>":
            continue  # "some rules were not checked": the errors above say why
        match = _TYPE.search(error.detail)
        if match:
            found = _value_at(data, error.field.removeprefix("nodeSLO"))
            got = f", got {found[0]!r}" if found else ""
            c.add(error.field, f"expected {_ARTICLE.get(match.group(1), 'a')} {match.group(1)}{got}")
        elif (
            isinstance(error.bad_value, str) and error.bad_value in _TYPE_NAMES
        ):  # a rule about the whole object: its message says it all
            c.add(error.field, error.detail)
        else:
            c.add(error.field, error.body().replace(f"{error.field} in body ", ""))
    if len(c.problems) > before:
        return None
    try:
        return merge_node_slo_spec(NodeSLOSpec.from_dict(dict(data), path="nodeSLO"))
    except ModelError as err:
        c.add("", str(err))
        return None


# --- usage, time, gates ----------------------------------------------------------------------


@dataclass(frozen=True)
class Usage:
    """Recent usage: CPU in cores, memory in bytes."""

    node_cpu: float | None = None
    node_memory: float | None = None
    #: by ``namespace/name``: {"cpu": cores, "memory": bytes}
    pods: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    #: by host application name: {"cpu": cores}
    host_applications: Mapping[str, Mapping[str, float]] = field(default_factory=dict)


def _amounts(c: _Checker, value: Any, path: str, keys: tuple[str, ...]) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, item in (c.mapping(value, path, keys) or {}).items():
        if key not in keys:
            continue
        quantity = c.quantity(item, _join(path, key))
        if quantity is None:
            continue
        if isinstance(item, int | float):  # cores or bytes, as written
            out[key] = float(item)
        else:
            out[key] = quantity.milli_value() / 1000 if key == "cpu" else float(quantity.value())
    return out


def _check_usage(c: _Checker, value: Any, pods: Iterable[str], apps: Iterable[str] | None) -> Usage:
    data = c.mapping(value, "usage", USAGE_KEYS) or {}
    node = _amounts(c, data.get("node"), "usage.node", NODE_USAGE_KEYS)
    known_pods = set(pods)
    by_pod: dict[str, dict[str, float]] = {}
    for key, item in (c.mapping(data.get("pods"), "usage.pods") or {}).items():
        where = f"usage.pods.{key}"
        amounts = _amounts(c, item, where, POD_USAGE_KEYS)
        name = str(key) if "/" in str(key) else f"{DEFAULT_NAMESPACE}/{key}"
        if name not in known_pods:
            c.add(where, f"no such pod {name} in pods (pods are named namespace/name)")
            continue
        by_pod[name] = amounts
    by_app: dict[str, dict[str, float]] = {}
    for key, item in (c.mapping(data.get("hostApplications"), "usage.hostApplications") or {}).items():
        where = f"usage.hostApplications.{key}"
        amounts = _amounts(c, item, where, HOST_APPLICATION_USAGE_KEYS)
        if apps is not None and str(key) not in apps:
            c.add(where, f"no such host application {key} in nodeSLO.hostApplications")
            continue
        by_app[str(key)] = amounts
    return Usage(node.get("cpu"), node.get("memory"), by_pod, by_app)


def _check_now(c: _Checker, value: Any) -> float:
    if value is None:
        return time.time()
    if isinstance(value, datetime.datetime):  # YAML reads an unquoted timestamp itself
        return (value if value.tzinfo else value.replace(tzinfo=datetime.UTC)).timestamp()
    if isinstance(value, datetime.date):
        return datetime.datetime(value.year, value.month, value.day, tzinfo=datetime.UTC).timestamp()
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value >= 0:
        return float(value)
    if isinstance(value, str):
        try:
            return parse_time(value.strip())
        except ValueError:
            pass
    c.add(
        "now",
        f"{value!r} is neither seconds since the epoch nor an RFC 3339 time such as 2024-01-01T00:00:00Z",
    )
    return time.time()


def _check_interval(c: _Checker, value: Any) -> float:
    if value is None:
        return 1.0
    seconds: float | None = None
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str):
        try:
            seconds = parse_duration_seconds(value.strip())
        except ValueError:
            seconds = None
    if seconds is None or not math.isfinite(seconds) or seconds <= 0:
        c.add("collectInterval", f"{value!r} is not a positive number of seconds or a duration such as 1s")
        return 1.0
    return seconds


def _check_gates(c: _Checker, value: Any) -> FeatureGates:
    try:
        if value is None:
            return FeatureGates(KOORDLET_FEATURES)
        if isinstance(value, str):
            return FeatureGates.parse(KOORDLET_FEATURES, value)
        if isinstance(value, Mapping):
            bad = [k for k, v in value.items() if not isinstance(v, bool)]
            for key in bad:
                c.add(f"featureGates.{key}", f"expected true or false, got {_kind(value[key])}")
            if not bad:
                return FeatureGates(KOORDLET_FEATURES, {str(k): v for k, v in value.items()})
            return FeatureGates(KOORDLET_FEATURES)
        c.add(
            "featureGates",
            f"expected a string like BEMemoryEvict=true,CPUBurst=false or a mapping, got {_kind(value)}",
        )
    except FeatureGateError as err:
        c.add("featureGates", str(err))
    return FeatureGates(KOORDLET_FEATURES)


# --- the scenario ----------------------------------------------------------------------------


@dataclass
class Scenario:
    node: Mapping[str, Any]
    node_slo: NodeSLOSpec
    pods: list[Mapping[str, Any]]
    gates: FeatureGates
    now: float
    collect_interval: float = 1.0
    kubelet_cpu_policy: str = "none"
    usage: Usage = field(default_factory=Usage)

    @classmethod
    def parse(cls, text: str) -> Scenario:
        """The scenario in ``text``, or a :class:`ScenarioError` with every problem found."""
        data = load_yaml(text)
        c = _Checker()
        if data is not None and not isinstance(data, Mapping):
            raise ScenarioError(f"a scenario is a mapping of {', '.join(SCENARIO_KEYS)}; got {_kind(data)}")
        data = c.mapping(data, "", SCENARIO_KEYS) or {}
        now = _check_now(c, data.get("now"))
        interval = _check_interval(c, data.get("collectInterval"))
        gates = _check_gates(c, data.get("featureGates"))
        policy = data.get("kubeletCPUPolicy")
        c.choice(policy, "kubeletCPUPolicy", KUBELET_CPU_POLICIES)
        node = _check_node(c, data.get("node"))
        node_slo = _check_node_slo(c, data.get("nodeSLO"))
        pods = _check_pods(c, data.get("pods"))
        keys = [f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in pods]
        apps = [a.name for a in node_slo.host_applications] if node_slo is not None else None
        usage = _check_usage(c, data.get("usage"), keys, apps)
        if c.problems:
            raise ScenarioError(*c.problems)
        assert node_slo is not None
        return cls(
            node=node,
            node_slo=node_slo,
            pods=list(pods),
            gates=gates,
            now=now,
            collect_interval=interval,
            kubelet_cpu_policy=str(policy or "none"),
            usage=usage,
        )
