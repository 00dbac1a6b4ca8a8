"""``koord-manager explain-node NAME``: why does this node have this much batch-cpu?

Prints every step of the node's batch and mid calculation with its numbers -- capacity,
safety margin, reserved, system usage, high-priority pods' usage and requests, policies,
thresholds, the result, the degrade state -- then how the result compares with what the
node's status holds and whether the controller writes it at once. Before them, the CPU
normalization and resource amplification annotations: what the node carries, what the
controller computes from the node's NodeResourceTopology (``cpu-basic-info``) and the
config, and whether it changes them. It runs the controller's own code
(:func:`~controlplane.manager.controllers.noderesource.calculator.calculate`,
:func:`~controlplane.manager.controllers.noderesource.normalization.calculate_normalization`,
:func:`~controlplane.manager.controllers.noderesource.amplification.calculate_amplification`)
on the same inputs:

* live (default): the Node, its NodeMetric and NodeResourceTopology, its pods
  (``spec.nodeName``) and the slo-controller-config ConfigMap
  (``--config-namespace``/``--slo-config-name``) read from the cluster of ``--kubeconfig``,
  at the current time;
* ``--from-files``: ``--node FILE`` (required), ``--node-metric FILE`` (absent: the node
  has no NodeMetric, so it is degraded), ``--nrt FILE`` (its NodeResourceTopology; absent:
  the normalization ratio is not computed, the node's is shown), ``--pods FILE`` (YAML
  stream or a ``List``; pods on other nodes are ignored), ``--config FILE`` (the
  ConfigMap; absent: defaults, under which colocation is off), ``--now`` (RFC 3339;
  default: the current time).

``--output json`` prints ``{"batch": {"kubernetes.io/batch-cpu": ..., "kubernetes.io/batch-memory":
...} | null, "mid": {...} | null, "steps": [...]}``: quantities as the node status shows them,
each step with ``name``, ``cpu`` (milli-cores), ``memory`` (bytes) where it has amounts, and
``detail``. ``null`` means the resources are removed from the node (colocation disabled or
NodeMetric stale).

A ConfigMap key that does not parse takes, as in the running controller, its last good
value from the persisted copy (``<name>-last-good``, written by the leader for this
ConfigMap) when live; from files, and when no good value is known, the defaults are used
here (where the controller leaves the node as it is); each case is reported. Live mode reads
the apiserver directly instead of the controller's caches.

Exit status: 0 explained, 1 the node or the cluster could not be read, 2 usage error.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import yaml

from controlplane.manager.controllers.noderesource.amplification import calculate_amplification
from controlplane.manager.controllers.noderesource.calculator import Calculation, calculate
from controlplane.manager.controllers.noderesource.controller import NodeStrategies
from controlplane.manager.controllers.noderesource.normalization import (
    calculate_normalization,
    held_ratio,
    ratio_value,
)
from controlplane.manager.controllers.noderesource.numalevel import nrt_view
from controlplane.manager.controllers.noderesource.steps import Trace, format_cpu, format_memory
from controlplane.manager.controllers.noderesource.sync import is_resource_diff
from controlplane.manager.controllers.noderesource.views import (
    EXTENDED_RESOURCES,
    NodeMetricView,
    NodeView,
    PodView,
    node_metric_view,
    node_view,
    pod_view,
)
from controlplane.manager.controllers.sloconfig import (
    LAST_GOOD_SUFFIX,
    LastGood,
    last_good_record,
    parse_slo_config,
    restore_last_good,
)
from koordinator.api.sloconfig.config import SLOControllerConfig
from koordinator.kube.timeutil import parse_time

__all__ = [
    "ExplainError",
    "ExplainInputs",
    "explain",
    "inputs_from_cluster",
    "inputs_from_files",
    "render_text",
]

Obj = dict[str, Any]


class ExplainError(ValueError):
    """Inputs that cannot be used (exit status 2)."""


class ClusterReadError(RuntimeError):
    """The cluster could not be read (exit status 1)."""


@dataclass
class ExplainInputs:
    node: Obj
    node_metric: Obj | None
    pods: list[Obj]
    configmap_data: Mapping[str, str] | None
    now: float
    notes: list[str]
    #: the persisted last good values of this ConfigMap (live mode), if any
    last_good: LastGood | None = None
    #: the node's NodeResourceTopology; None: not given (files) or not found (live)
    nrt: Obj | None = None


def _documents(path: str) -> list[Any]:
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ExplainError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        docs = [doc for doc in yaml.safe_load_all(text) if doc is not None]
    except yaml.YAMLError as exc:
        raise ExplainError(f"{path}: not valid YAML/JSON: {exc}") from None
    out: list[Any] = []
    for doc in docs:
        if isinstance(doc, dict) and str(doc.get("kind", "")).endswith("List") and "items" in doc:
            out.extend(doc.get("items") or [])
        else:
            out.append(doc)
    return out


def _one(path: str, kind: str) -> Obj:
    docs = [d for d in _documents(path) if isinstance(d, dict)]
    found = [d for d in docs if d.get("kind") == kind]
    if len(found) != 1:
        raise ExplainError(f"{path}: expected one {kind}, found {len(found)}")
    return found[0]


def parse_now(text: str | None) -> float:
    if text is None:
        return time.time()
    try:
        return parse_time(text)
    except ValueError:
        raise ExplainError(f"--now: {text!r} is not an RFC 3339 time (2026-01-01T00:00:00Z)") from None


def inputs_from_files(
    name: str,
    node_file: str | None,
    node_metric_file: str | None,
    pods_file: str | None,
    config_file: str | None,
    now: str | None,
    nrt_file: str | None = None,
) -> ExplainInputs:
    if node_file is None:
        raise ExplainError("--from-files needs --node FILE")
    node = _one(node_file, "Node")
    node_name = (node.get("metadata") or {}).get("name")
    if node_name != name:
        raise ExplainError(f"{node_file}: the Node is {node_name!r}, not {name!r}")
    notes: list[str] = []
    metric = _one(node_metric_file, "NodeMetric") if node_metric_file is not None else None
    if metric is not None and (metric.get("metadata") or {}).get("name") != name:
        raise ExplainError(f"{node_metric_file}: the NodeMetric is not named {name!r}")
    if metric is None:
        notes.append("no --node-metric given: the node is treated as having no NodeMetric")
    nrt = _one(nrt_file, "NodeResourceTopology") if nrt_file is not None else None
    if nrt is not None and (nrt.get("metadata") or {}).get("name") != name:
        raise ExplainError(f"{nrt_file}: the NodeResourceTopology is not named {name!r}")
    if nrt is None:
        notes.append("no --nrt given: the CPU normalization ratio is not computed, the node's is shown")
    pods: list[Obj] = []
    if pods_file is not None:
        for doc in _documents(pods_file):
            if not isinstance(doc, dict) or doc.get("kind", "Pod") != "Pod":
                continue
            if (doc.get("spec") or {}).get("nodeName") == name:
                pods.append(doc)
    data: Mapping[str, str] | None = None
    if config_file is not None:
        configmap = _one(config_file, "ConfigMap")
        raw = configmap.get("data") or {}
        if not isinstance(raw, dict):
            raise ExplainError(f"{config_file}: data must be a map of strings")
        data = {str(k): str(v) for k, v in raw.items()}
    else:
        notes.append("no --config given: the slo-controller-config defaults apply (colocation disabled)")
    return ExplainInputs(node, metric, pods, data, parse_now(now), notes, nrt=nrt)


async def inputs_from_cluster(
    name: str, kubeconfig: str | None, config_namespace: str, config_name: str
) -> ExplainInputs:
    from koordinator.kube import resources as res
    from koordinator.kube.client import ApiClient
    from koordinator.kube.config import ConfigError, load_config
    from koordinator.kube.errors import ApiConnectionError, ApiError, NotFoundError

    try:
        config = load_config(kubeconfig)
    except ConfigError as exc:
        raise ClusterReadError(f"cannot load cluster credentials: {exc}") from None
    notes: list[str] = []
    async with ApiClient(config) as client:
        try:
            try:
                node = await client.get(res.NODES, name)
            except NotFoundError:
                raise ClusterReadError(f"node {name} not found") from None
            try:
                metric: Obj | None = await client.get(res.NODE_METRICS, name)
            except NotFoundError:
                metric = None
                notes.append(f"NodeMetric {name} not found")
            try:
                nrt: Obj | None = await client.get(res.NODE_RESOURCE_TOPOLOGIES, name)
            except NotFoundError:
                nrt = None
                notes.append(f"NodeResourceTopology {name} not found")
            listed = await client.list_all(res.PODS, field_selector=f"spec.nodeName={name}")
            pods = [p for p in listed.get("items") or () if isinstance(p, dict)]
            last_good: LastGood | None = None
            try:
                configmap = await client.get(res.CONFIG_MAPS, config_name, config_namespace)
                data: Mapping[str, str] | None = configmap.get("data") or {}
                copy_name = f"{config_name}{LAST_GOOD_SUFFIX}"
                try:
                    record = last_good_record(await client.get(res.CONFIG_MAPS, copy_name, config_namespace))
                    if record.owner_uid == (configmap.get("metadata") or {}).get("uid"):
                        last_good = record
                        notes.append(f"last good values: ConfigMap {config_namespace}/{copy_name}")
                except NotFoundError:
                    pass
            except NotFoundError:
                data = None
                notes.append(f"ConfigMap {config_namespace}/{config_name} not found: the defaults apply")
        except (ApiError, ApiConnectionError) as exc:
            raise ClusterReadError(f"cannot read the cluster: {exc}") from exc
    return ExplainInputs(node, metric, pods, data, time.time(), notes, last_good, nrt)


def explain(inputs: ExplainInputs) -> tuple[Calculation, NodeView]:
    """Run the controller's calculation with a trace, plus the comparison with the node status."""
    trace = Trace()
    for note in inputs.notes:
        trace.note("input", note)
    previous, good = (
        restore_last_good(inputs.last_good) if inputs.last_good is not None else (None, dict[str, str]())
    )
    parsed = parse_slo_config(inputs.configmap_data, previous.config if previous is not None else None)
    for key, errors in sorted(parsed.errors.items()):
        if key in good:
            used = "its persisted last good value is used, as in the running controller"
        elif inputs.last_good is not None:
            used = (
                "no good value of it is persisted, so the defaults are used here (the running "
                "controller leaves what depends on it as it is)"
            )
        else:
            used = (
                "the defaults are used here (the running controller uses its last good value, or "
                "leaves what depends on it as it is when it knows none)"
            )
        trace.note("config", f"{key} does not parse, {used}: " + "; ".join(str(e) for e in errors))
    node = node_view(inputs.node)
    # batch-cpu is scaled by the ratio the node holds once the controller has synced it
    ratio = _annotations(trace, parsed.config, node, inputs.nrt)
    metric: NodeMetricView | None = node_metric_view(inputs.node_metric) if inputs.node_metric else None
    pods: list[PodView] = [pod_view(p) for p in inputs.pods]
    calc = calculate(
        parsed.config,
        node,
        metric,
        pods,
        inputs.now,
        trace=trace,
        cpu_normalization_ratio=ratio if ratio is not None else 1.0,
    )
    _compare(trace, node, calc)
    calc.steps = trace.steps
    return calc, node


def _shown(value: str | None) -> str:
    return "absent" if value is None else value


def _annotations(trace: Trace, config: SLOControllerConfig, node: NodeView, nrt: Obj | None) -> float | None:
    """The CPU normalization and resource amplification annotations, as the controller
    decides them for this node (its metadata sync); the normalization ratio the node holds
    after it."""
    normalization_strategy, amplification_strategy = NodeStrategies(config).for_node(node)
    ratio_text = node.normalization_annotation
    have = f"cpu-normalization-ratio: the node has {_shown(ratio_text)}"
    if nrt is None:
        trace.note("normalization", f"{have}; not computed without the NodeResourceTopology")
    else:
        view = nrt_view(nrt)
        result = calculate_normalization(
            normalization_strategy, node.labels, view.basic_info, view.basic_info_problem
        )
        info = view.basic_info
        source = (
            f" from CPU {info.cpu_model!r} (hyper-threading {'on' if info.hyper_thread_enabled else 'off'}, "
            f"turbo {'on' if info.turbo_enabled else 'off'})"
            if info is not None
            else ""
        )
        held = held_ratio(ratio_text, result)
        if result.error:
            trace.note("normalization", f"{have}; it cannot be computed ({result.error}): left as it is")
        elif result.disabled:
            change = "written" if held != ratio_text else "unchanged"
            trace.note("normalization", f"{have}; normalization is disabled: {result.ratio} {change}")
        else:
            change = "written" if held != ratio_text else "unchanged"
            trace.note("normalization", f"{have}; computed {result.ratio}{source}: {change}")
        ratio_text = held
    ratio = ratio_value(ratio_text)
    amplified = calculate_amplification(amplification_strategy, ratio)
    have = f"resource-amplification-ratio: the node has {_shown(node.amplification_annotation)}"
    if amplified.error:
        trace.note("amplification", f"{have}; it cannot be computed ({amplified.error}): left as it is")
    elif amplified.annotation == node.amplification_annotation:
        trace.note("amplification", f"{have}; computed {_shown(amplified.annotation)}: unchanged")
    else:
        change = "removed" if amplified.annotation is None else f"computed {amplified.annotation}: written"
        trace.note("amplification", f"{have}; {change}")
    return ratio


def _compare(trace: Trace, node: NodeView, calc: Calculation) -> None:
    desired = calc.desired()
    threshold = calc.strategy.resource_diff_threshold or 0.0
    parts = []
    changed = []
    for resource in EXTENDED_RESOURCES:
        current = node.allocatable_ext.get(resource)
        new = desired[resource]
        if current == new:
            continue
        shown = str(current) if current is not None else "absent"
        target = str(new) if new is not None else "removed"
        parts.append(f"{resource}: {shown} -> {target}")
        if is_resource_diff(current, new, threshold):
            changed.append(resource)
    if not parts:
        trace.note("status", "the node status already holds these values")
        return
    when = (
        "written at once (more than resourceDiffThreshold, or a resource appears or disappears)"
        if changed
        else f"within resourceDiffThreshold={threshold}: written at the next update after "
        f"updateTimeThresholdSeconds={calc.strategy.update_time_threshold_seconds}"
    )
    trace.note("status", "; ".join(parts) + f" -- {when}")


def render_text(calc: Calculation, out: TextIO) -> None:
    desired = calc.desired()

    def show(name: str) -> str:
        value = desired[name]
        if value is None:
            return "removed"
        # CPU in plain milli-cores ("8k" in node status reads as 8000 here)
        return str(value.value()) if name.endswith("-cpu") else str(value)

    out.write(
        f"node {calc.node}: "
        + ", ".join(f"{name.split('/', 1)[1]}={show(name)}" for name in EXTENDED_RESOURCES)
        + "\n"
    )
    width = max((len(step.name) for step in calc.steps), default=10)
    for step in calc.steps:
        if step.cpu is None and step.memory is None:
            out.write(f"  {step.name:<{width}}  {step.detail}\n")
            continue
        cpu = format_cpu(step.cpu) if step.cpu is not None else "-"
        memory = format_memory(step.memory) if step.memory is not None else "-"
        out.write(f"  {step.name:<{width}}  cpu {cpu:>9}  memory {memory:>26}  {step.detail}\n")


def run(
    name: str,
    *,
    from_files: bool,
    node_file: str | None,
    node_metric_file: str | None,
    nrt_file: str | None = None,
    pods_file: str | None,
    config_file: str | None,
    now: str | None,
    kubeconfig: str | None,
    config_namespace: str,
    config_name: str,
    output: str,
    out: TextIO,
    err: TextIO,
) -> int:
    """The subcommand; raises :class:`ExplainError` for usage errors, returns the exit status."""
    given = (
        ("--node", node_file),
        ("--node-metric", node_metric_file),
        ("--nrt", nrt_file),
        ("--pods", pods_file),
        ("--config", config_file),
    )
    file_flags = [flag for flag, value in given if value is not None]
    if from_files:
        inputs = inputs_from_files(name, node_file, node_metric_file, pods_file, config_file, now, nrt_file)
    else:
        if file_flags:
            verb = "needs" if len(file_flags) == 1 else "need"
            raise ExplainError(f"{', '.join(file_flags)} {verb} --from-files")
        if now is not None:
            raise ExplainError("--now needs --from-files (a live explanation is at the current time)")
        try:
            inputs = asyncio.run(inputs_from_cluster(name, kubeconfig, config_namespace, config_name))
        except ClusterReadError as exc:
            err.write(f"koord-manager explain-node: {exc}\n")
            return 1
    calc, _ = explain(inputs)
    if output == "json":
        out.write(json.dumps(calc.to_dict(), indent=2) + "\n")
    else:
        render_text(calc, out)
    return 0
