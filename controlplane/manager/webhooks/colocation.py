"""ClusterColocationProfile matching and application, shared by the pod and reservation webhooks.

A profile matches when its ``namespaceSelector`` (pods only) and ``selector`` match; an
absent or empty selector matches everything. Matches are applied in lexicographic order of
their names, so a later profile overwrites an earlier one. Each profile first passes the
probability rule: with ``percent`` from ``probability`` (an integer or ``"N%"``, default
100), it is skipped when ``percent == 0`` or when ``percent != 100`` and ``rand.Intn(100) >
percent`` -- upstream's exact rule, so the same draw gives the same answer.

Then, in this order: ``labels``, ``annotations``, ``labelKeysMapping`` and
``annotationKeysMapping`` (``new = old``, an empty string when ``old`` is missing),
``labelSuffixes`` (appended only to existing labels), ``schedulerName``, ``qosClass`` (the
``koordinator.sh/qosClass`` label), ``priorityClassName`` (the PriorityClass sets
``priorityClassName``, ``priority`` and ``preemptionPolicy``), ``koordinatorPriority`` (the
``koordinator.sh/priority`` label), and last the strategic-merge ``patch``.

Deliberate differences from upstream, each covered by a test:

* a selector that cannot be evaluated makes upstream *match* (the error is ignored), which
  applies a broken profile to every pod; here such a profile does not match and the
  admission response carries a warning naming it;
* the key mappings are applied in sorted order of the source key (Go iterates maps in
  random order, so chained mappings were not deterministic).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from controlplane.manager.webhooks.objects import CLUSTER_COLOCATION_PROFILE, ObjectError, check, ensure_map
from controlplane.manager.webhooks.strategicmerge import StrategicMergeError, strategic_merge
from koordinator.api.extension.colocation import skips_update_resources
from koordinator.api.extension.priority import LABEL_POD_PRIORITY
from koordinator.api.extension.qos import LABEL_POD_QOS
from koordinator.api.selectors import SelectorError, label_selector_matches, validate_label_selector

__all__ = [
    "ProfileError",
    "ProfileTarget",
    "apply_profile",
    "matching_profiles",
    "probability_percent",
    "should_skip",
]

Obj = dict[str, Any]


class ProfileError(RuntimeError):
    """A profile could not be applied (an internal error: the request is answered with 500)."""


@dataclass(frozen=True)
class ProfileTarget:
    """Where a kind keeps what a profile sets."""

    kind: str
    #: Path of the pod spec inside the object (``("spec",)``; a reservation's template spec).
    pod_spec: tuple[str, ...]
    merge_rules: Mapping[tuple[str, ...], str]
    shape: Any


def _exact_labels(selector: Any) -> dict[str, str] | None:
    """A valid selector made of ``matchLabels`` only, as the labels it requires; else ``None``.

    Such a selector matches exactly when every one of its labels is present with its value,
    which one dict lookup per label decides; any other selector (expressions, or one that
    does not evaluate) is left to :func:`label_selector_matches` on every request.
    """
    if not isinstance(selector, Mapping) or set(selector) - {"matchLabels", "matchExpressions"}:
        return None
    if selector.get("matchExpressions"):
        return None
    try:
        validate_label_selector(selector)
    except SelectorError:
        return None
    return dict(selector.get("matchLabels") or {})


@dataclass(frozen=True, slots=True)
class _Checked:
    """What a profile object decides once: its shape problem, name and plain label selectors."""

    profile: Mapping[str, Any]
    problem: str
    name: str
    namespace_labels: dict[str, str] | None
    labels: dict[str, str] | None
    skips_update: bool


#: Profile objects checked, by identity: informer objects are replaced, never changed in place.
_CHECKED: dict[int, _Checked] = {}
_CHECKED_LIMIT = 1024


def _checked(profile: Mapping[str, Any]) -> _Checked:
    cached = _CHECKED.get(id(profile))
    if cached is not None and cached.profile is profile:
        return cached
    name = _name(profile)
    try:
        check(profile, CLUSTER_COLOCATION_PROFILE, f"ClusterColocationProfile {name}")
        problem = ""
    except ObjectError as exc:
        problem = str(exc)
    spec = (profile.get("spec") or {}) if not problem else {}
    checked = _Checked(
        profile,
        problem,
        name,
        _exact_labels(spec.get("namespaceSelector")),
        _exact_labels(spec.get("selector")),
        not problem and skips_update_resources(profile),
    )
    if len(_CHECKED) >= _CHECKED_LIMIT:
        _CHECKED.clear()
    _CHECKED[id(profile)] = checked
    return checked


def _has_labels(required: dict[str, str], labels: Mapping[str, str]) -> bool:
    # a plain loop: all() over a generator costs a generator object on every request
    for key, value in required.items():  # noqa: SIM110
        if labels.get(key) != value:
            return False
    return True


def _name(profile: Mapping[str, Any]) -> str:
    return str((profile.get("metadata") or {}).get("name") or "")


def _selector_matches(
    selector: Any, labels: Mapping[str, str], profile: str, which: str, warnings: list[str]
) -> bool:
    if selector is None:
        return True
    try:
        return label_selector_matches(selector, labels)
    except SelectorError as exc:
        warnings.append(f"ClusterColocationProfile {profile} ignored: invalid {which}: {exc}")
        return False


async def matching_profiles(
    profiles: Sequence[Obj],
    labels: Mapping[str, str],
    namespace_labels: Callable[[], Awaitable[Mapping[str, str]]] | None,
    warnings: list[str],
) -> list[Obj]:
    """The profiles that match, sorted by name.

    ``namespace_labels`` fetches the labels of the object's namespace (called at most once,
    and only when a profile has a non-empty namespace selector); ``None`` means the kind has
    no namespace selection (reservations), so namespace selectors are ignored.
    """
    matched: list[tuple[str, Obj]] = []
    cached: Mapping[str, str] | None = None
    for profile in profiles:
        checked = _checked(profile)
        name = checked.name
        if checked.problem:
            warnings.append(f"ClusterColocationProfile {name} ignored: {checked.problem}")
            continue
        spec = profile.get("spec") or {}
        namespace_selector = spec.get("namespaceSelector")
        if namespace_labels is not None and namespace_selector:
            if cached is None:
                cached = await namespace_labels()
            if checked.namespace_labels is not None:
                if not _has_labels(checked.namespace_labels, cached or {}):
                    continue
            elif not _selector_matches(namespace_selector, cached, name, "namespaceSelector", warnings):
                continue
        if checked.labels is not None:
            if not _has_labels(checked.labels, labels or {}):
                continue
        elif not _selector_matches(spec.get("selector"), labels, name, "selector", warnings):
            continue
        matched.append((name, profile))
    matched.sort(key=lambda entry: entry[0])
    return [profile for _, profile in matched]


_INT_OR_STRING = "invalid value for IntOrString: "


def _atoi(text: str) -> int:
    """``strconv.Atoi`` on a 64-bit platform; raises ``ValueError`` with its reason."""
    digits = text[1:] if text[:1] in ("+", "-") else text
    if not digits or not all("0" <= c <= "9" for c in digits):
        raise ValueError("invalid syntax")
    value = int(text)
    if not -(2**63) <= value < 2**63:
        raise ValueError("value out of range")
    return value


def probability_percent(profile: Mapping[str, Any]) -> int:
    """``intstr.GetScaledValueFromIntOrPercent(probability, 100, false)``, with its errors; 100 when unset."""
    value = (profile.get("spec") or {}).get("probability")
    if value is None:
        return 100
    if isinstance(value, bool):
        raise ProfileError(f"ClusterColocationProfile {_name(profile)}: invalid probability {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        if not value.endswith("%"):
            raise ProfileError(f"{_INT_OR_STRING}invalid type: string is not a percentage")
        digits = value[:-1]
        try:
            return _atoi(digits)
        except ValueError as exc:
            raise ProfileError(
                f"{_INT_OR_STRING}invalid value {_go_quote(value)}: "
                f"strconv.Atoi: parsing {_go_quote(digits)}: {exc}"
            ) from None
    raise ProfileError(f"ClusterColocationProfile {_name(profile)}: invalid probability {value!r}")


def _go_quote(text: str) -> str:
    """Go's ``%q`` of a string (for printable text: double quotes, backslash escapes)."""
    return json.dumps(text, ensure_ascii=False)


def should_skip(profile: Mapping[str, Any], rand_intn: Callable[[int], int]) -> bool:
    """The probability rule; draws a number only when the percentage is neither 0 nor 100."""
    percent = probability_percent(profile)
    return percent == 0 or (percent != 100 and rand_intn(100) > percent)


def _pod_spec(obj: Obj, path: tuple[str, ...]) -> Obj | None:
    """The pod spec at ``path``; its last level is created when missing, earlier levels must exist."""
    node: Any = obj
    for depth, key in enumerate(path):
        child = node.get(key)
        if not isinstance(child, dict):
            if depth < len(path) - 1:
                return None
            child = {}
            node[key] = child
        node = child
    return node if isinstance(node, dict) else None


async def apply_profile(
    obj: Obj,
    profile: Mapping[str, Any],
    target: ProfileTarget,
    priority_class: Callable[[str], Awaitable[Obj | None]],
) -> Obj:
    """Apply one profile to ``obj`` (changed in place, except after a ``patch``) and return it."""
    spec = profile.get("spec") or {}
    meta = ensure_map(obj, "metadata")

    for key in ("labels", "annotations"):
        values = spec.get(key) or {}
        if values:
            ensure_map(meta, key).update(values)
    for key, mapping_key in (("labels", "labelKeysMapping"), ("annotations", "annotationKeysMapping")):
        mapping = spec.get(mapping_key) or {}
        if mapping:
            current = ensure_map(meta, key)
            for old in sorted(mapping):
                current[mapping[old]] = current.get(old, "")
    suffixes = spec.get("labelSuffixes") or {}
    if suffixes:
        labels = ensure_map(meta, "labels")
        for key in sorted(suffixes):
            if key in labels:
                labels[key] = labels[key] + suffixes[key]

    if spec.get("schedulerName"):
        pod_spec = _pod_spec(obj, target.pod_spec)
        if pod_spec is not None:
            pod_spec["schedulerName"] = spec["schedulerName"]
    if spec.get("qosClass"):
        ensure_map(meta, "labels")[LABEL_POD_QOS] = spec["qosClass"]
    class_name = spec.get("priorityClassName")
    pod_spec = _pod_spec(obj, target.pod_spec) if class_name else None
    if class_name and pod_spec is not None:
        found = await priority_class(class_name)
        if found is None:
            raise ProfileError(f'priorityclasses.scheduling.k8s.io "{class_name}" not found')
        value = found.get("value")
        if isinstance(value, bool) or not isinstance(value, int):
            raise ProfileError(f"PriorityClass {class_name} has no integer value")
        pod_spec["priorityClassName"] = class_name
        pod_spec["priority"] = value
        policy = found.get("preemptionPolicy")
        if policy:
            pod_spec["preemptionPolicy"] = policy
        else:
            pod_spec.pop("preemptionPolicy", None)
    if spec.get("koordinatorPriority") is not None:
        ensure_map(meta, "labels")[LABEL_POD_PRIORITY] = str(int(spec["koordinatorPriority"]))

    patch = spec.get("patch")
    if patch:
        try:
            merged = strategic_merge(obj, patch, target.merge_rules)
        except StrategicMergeError as exc:
            raise ProfileError(f"ClusterColocationProfile {_name(profile)}: patch: {exc}") from None
        try:
            check(merged, target.shape, f"{target.kind} patched by ClusterColocationProfile {_name(profile)}")
        except ObjectError as exc:
            raise ProfileError(str(exc)) from None
        return merged
    return obj


def skips_resource_update(profiles: Sequence[Obj]) -> bool:
    """Whether any matched profile carries ``config.koordinator.sh/skip-update-resources``."""
    return any(_checked(profile).skips_update for profile in profiles)
