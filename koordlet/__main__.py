"""The ``koordlet`` command: the node agent, ``koordlet probe`` to inspect a node and
``koordlet plan`` to see what the QoS strategies would do.

* ``koordlet`` runs the agent for the node named by ``NODE_NAME`` (required, as upstream),
  talking to the apiserver (in-cluster credentials or ``--kubeconfig``) and the kubelet;
* ``koordlet --standalone`` runs it with neither: this machine's cgroups and metrics,
  served on 127.0.0.1:9316 unless ``--addr`` says otherwise;
* ``koordlet probe`` prints what this node supports (cgroup versions, driver, PSI,
  resctrl, perf, QoS knobs, runtime sockets, GPUs, RDMA);
* ``koordlet plan`` plans the QoS strategies once against a scenario file and the host
  tree, and prints the writes and evictions (a dry run; the format is in
  ``docs/plan-scenario.md``; a scenario with problems is one line per problem, exit 2).

Usage errors are one line and exit status 2; an agent that cannot start (its port taken,
a bad kubeconfig) logs one line and exits with status 1.

Flags keep upstream's names and defaults; durations are Go durations (``10s``, ``1m``),
booleans accept ``--flag``, ``--flag=true`` and ``--flag=false``.

Before the agent starts, its soft open files limit (RLIMIT_NOFILE) is raised to the hard
limit, as the Go runtime does for every Go program and so for upstream's koordlet.
"""

from __future__ import annotations

import argparse
import logging
import os
import resource
import socket
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import orjson

from koordinator import __version__
from koordinator.api.features import KOORDLET_FEATURES
from koordinator.api.runtimehook import FailurePolicy, HookType
from koordinator.cli import (
    address_flag,
    bool_flag,
    component_parser,
    configure_logging,
    duration_flag,
    fail,
    one_line,
    size_flag,
    tolerate_closed_stdout,
)
from koordlet.agent import AgentConfig, run_agent
from koordlet.metricsadvisor.collectors.pressureprobe import MIN_INTERVAL_S as MIN_PROBE_INTERVAL_S
from koordlet.metricsadvisor.framework import CollectorConfig
from koordlet.prediction import PredictionConfig, checkpoint_dir_under
from koordlet.prediction.config import DEFAULT_CHECKPOINT_FILEPATH
from koordlet.qosmanager.registry import strategies
from koordlet.qosmanager.scenario import Scenario, ScenarioError, plan_scenario
from koordlet.qosmanager.scenario import as_table as as_plan_table
from koordlet.runtimehooks.nri.plugin import NriOptions
from koordlet.runtimehooks.proxyserver import HookServerOptions
from koordlet.system import native
from koordlet.system.paths import HostPaths
from koordlet.system.probe import as_json, as_table, probe

PROG = "koordlet"

log = logging.getLogger(__name__)

#: flag -> HostPaths field, upstream flag names (pkg/koordlet/util/system/config.go)
HOST_ROOT_FLAGS = {
    "--cgroup-root-dir": "cgroup_root",
    "--proc-root-dir": "proc_root",
    "--sys-root-dir": "sys_root",
    "--sys-fs-root-dir": "sys_fs_root",
    "--var-run-root-dir": "var_run_root",
    "--run-root-dir": "run_root",
    "--var-lib-kubelet-dir": "var_lib_kubelet",
    "--runtime-hooks-config-path": "runtime_hooks_config_dir",
}


def host_root_argv(paths: HostPaths) -> list[str]:
    """The flags that point a koordlet at ``paths`` (what a test or benchmark passes to a child)."""
    return [arg for flag, field in HOST_ROOT_FLAGS.items() for arg in (flag, str(getattr(paths, field)))]


def version_text() -> str:
    report = native.backend_report()
    details = ", ".join(f"{name}={kind}" for name, kind in report.items())
    return f"{PROG} {__version__} (backend: {native.backend_name()}; {details})"


def _add_host_root_flags(parser: argparse.ArgumentParser) -> None:
    defaults = HostPaths.from_environ()
    for flag, field in HOST_ROOT_FLAGS.items():
        parser.add_argument(
            flag,
            dest=field,
            default=None,
            metavar="DIR",
            help=f"host root (default {getattr(defaults, field)}; agent_mode=hostMode selects host paths)",
        )


def host_paths(args: argparse.Namespace) -> HostPaths:
    overrides = {field: getattr(args, field, None) for field in HOST_ROOT_FLAGS.values()}
    return HostPaths.from_environ().with_overrides(**overrides)


def _unix_only(text: str) -> str:
    if text != "unix":
        raise argparse.ArgumentTypeError(f"{text!r}: the runtime hook server listens on a unix socket only")
    return text


def _hook_types(text: str) -> tuple[HookType, ...]:
    try:
        return tuple(HookType(part.strip()) for part in text.split(",") if part.strip())
    except ValueError:
        known = ", ".join(h.value for h in HookType)
        raise argparse.ArgumentTypeError(f"{text!r}: hook points are {known}") from None


def _probe_interval(text: str) -> float:
    seconds = duration_flag(text)
    if 0 < seconds < MIN_PROBE_INTERVAL_S:
        raise argparse.ArgumentTypeError(
            f"{text!r}: at least {MIN_PROBE_INTERVAL_S * 1000:.0f}ms, or 0 to turn the pressure probe off"
        )
    return seconds


def _failure_policy(text: str) -> FailurePolicy:
    try:
        return FailurePolicy(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a failure policy (Ignore or Fail)") from None


#: (flag, dest, type, default, help) of the agent, upstream's names and defaults
AGENT_FLAGS: list[tuple[str, str, object, object, str]] = [
    (
        "--addr",
        "addr",
        address_flag,
        None,
        "address of /metrics and /healthz (default :9316; 127.0.0.1:9316 standalone)",
    ),
    ("--kubeconfig", "kubeconfig", str, None, "kubeconfig file (default: in-cluster credentials)"),
    ("--kube-api-qps", "kube_api_qps", float, 20.0, "apiserver queries per second"),
    ("--kube-api-burst", "kube_api_burst", int, 30, "apiserver burst"),
    (
        "--kubelet-preferred-address-type",
        "kubelet_preferred_address_type",
        str,
        "InternalIP",
        "node address used",
    ),
    (
        "--kubelet-sync-interval",
        "kubelet_sync_interval",
        duration_flag,
        10.0,
        "period of the kubelet /pods sync",
    ),
    ("--kubelet-sync-timeout", "kubelet_sync_timeout", duration_flag, 3.0, "timeout of a kubelet request"),
    (
        "--kubelet-insecure-tls",
        "kubelet_insecure_tls",
        bool_flag,
        False,
        "use the kubelet's read-only HTTP port",
    ),
    ("--kubelet-read-only-port", "kubelet_read_only_port", int, 10255, "the kubelet's read-only port"),
    (
        "--cgroup-kube-dir",
        "cgroup_kube_dir",
        str,
        "",
        "the kubepods cgroup directory under each controller (default: detected from the tree and kubelet)",
    ),
    (
        "--node-topology-sync-interval",
        "node_topology_sync_interval",
        duration_flag,
        3.0,
        "NRT and Device report period",
    ),
    (
        "--disable-query-kubelet-config",
        "disable_query_kubelet_config",
        bool_flag,
        False,
        "neither ask the kubelet's /configz nor report its CPU manager in the NodeResourceTopology",
    ),
    (
        "--xpu-device-infos-dir",
        "xpu_device_infos_dir",
        str,
        "/var/run/koordlet/xpu-device-infos",
        "the device-info files koord-device-daemon writes (Accelerators)",
    ),
    (
        "--xpu-enforce-collect-from-device-infos",
        "xpu_enforce_collect_from_device_infos",
        bool_flag,
        False,
        "report GPUs only from the device-info files, never from the koordlet's own NVML discovery",
    ),
    (
        "--enable-pod-taskids",
        "enable_pod_taskids",
        bool_flag,
        False,
        "accepted, as upstream; no effect: the Resctrl hook always reads each container's tasks "
        "from its cgroup, which upstream does only with this flag",
    ),
    ("--enable-node-metric-report", "enable_node_metric_report", bool_flag, True, "write NodeMetric status"),
    (
        "--collect-res-used-interval",
        "collect_res_used_interval",
        duration_flag,
        1.0,
        "resource collection period",
    ),
    (
        "--qos-pressure-probe-interval",
        "qos_pressure_probe_interval",
        _probe_interval,
        0.25,
        "how often node CPU and memory are checked for a jump past a QoS threshold between "
        "collections, which then run at once (0, or at least the collect interval: off)",
    ),
    (
        "--collect-sys-metric-outdated-interval",
        "collect_sys_metric_outdated_interval",
        duration_flag,
        10.0,
        "max age of inputs of the system usage",
    ),
    (
        "--collect-node-cpu-info-interval",
        "collect_node_cpu_info_interval",
        duration_flag,
        60.0,
        "CPU info period",
    ),
    ("--psi-collector-interval", "psi_collector_interval", duration_flag, 10.0, "PSI collection period"),
    (
        "--collect-node-storage-info-interval",
        "collect_node_storage_info_interval",
        duration_flag,
        1.0,
        "local storage layout period (BlkIOReconcile)",
    ),
    ("--cpi-collector-interval", "cpi_collector_interval", duration_flag, 60.0, "CPI collection period"),
    ("--collect-cpi-timewindow", "collect_cpi_timewindow", duration_flag, 10.0, "CPI counting window"),
    ("--coldpage-collector-interval", "coldpage_collector_interval", duration_flag, 5.0, "cold page period"),
    ("--resctrl-collector-interval", "resctrl_collector_interval", duration_flag, 10.0, "resctrl period"),
    (
        "--enable-resctrl-collector",
        "enable_resctrl_collector",
        bool_flag,
        False,
        "collect resctrl LLC occupancy and memory bandwidth (with the ResctrlCollector gate)",
    ),
    (
        "--enable-pagecache-collector",
        "enable_pagecache_collector",
        bool_flag,
        False,
        "collect usage with page cache",
    ),
    (
        "--tsdb-retention-duration",
        "tsdb_retention_duration",
        duration_flag,
        1800.0,
        "how long samples are kept (default 30m, the longest default NodeMetric window; "
        "a longer NodeMetric window is reported as not available)",
    ),
    ("--tsdb-max-bytes", "tsdb_max_bytes", size_flag, 100 << 20, "byte budget of the metric cache"),
    (
        "--tsdb-path",
        "tsdb_path",
        str,
        "/metric-data/",
        "directory for the metric cache's sealed blocks (an emptyDir in the DaemonSet); empty: memory",
    ),
    (
        "--cpu-suppress-interval-seconds",
        "cpu_suppress_interval_seconds",
        float,
        1.0,
        "QoS strategies' period",
    ),
    (
        "--memory-evict-cool-time-seconds",
        "memory_evict_cool_time_seconds",
        float,
        4.0,
        "pause after an eviction",
    ),
    (
        "--cpu-evict-cool-time-seconds",
        "cpu_evict_cool_time_seconds",
        float,
        20.0,
        "pause after a CPU eviction",
    ),
    (
        "--resource-force-update-seconds",
        "resource_force_update_seconds",
        float,
        60.0,
        "cached cgroup values are rewritten after this long",
    ),
    (
        "--prediction-checkpoint-filepath",
        "prediction_checkpoint_filepath",
        str,
        DEFAULT_CHECKPOINT_FILEPATH,
        "directory of the prediction models' checkpoints, under --var-run-root-dir",
    ),
    (
        "--prediction-cold-start-duration",
        "prediction_cold_start_duration",
        duration_flag,
        24 * 3600.0,
        "a pod younger than this counts its whole request in the prod peak",
    ),
    (
        "--prediction-safety-margin-percent",
        "prediction_safety_margin_percent",
        int,
        10,
        "margin added above the predicted peaks (percent)",
    ),
    (
        "--prediction-memory-histogram-decay-halflife",
        "prediction_memory_histogram_decay_halflife",
        duration_flag,
        24 * 3600.0,
        "half-life of the memory usage histograms",
    ),
    (
        "--prediction-cpu-histogram-decay-halflife",
        "prediction_cpu_histogram_decay_halflife",
        duration_flag,
        12 * 3600.0,
        "half-life of the CPU usage histograms",
    ),
    (
        "--prediction-training-interval",
        "prediction_training_interval",
        duration_flag,
        60.0,
        "period of the prediction models' training",
    ),
    (
        "--prediction-model-expiration-duration",
        "prediction_model_expiration_duration",
        duration_flag,
        30 * 60.0,
        "a model not trained for this long is dropped with its checkpoint",
    ),
    (
        "--prediction-model-checkpoint-interval",
        "prediction_model_checkpoint_interval",
        duration_flag,
        10 * 60.0,
        "how often each model is checkpointed",
    ),
    (
        "--prediction-model-checkpoint-max-per-step",
        "prediction_model_checkpoint_max_per_step",
        int,
        12,
        "most models checkpointed in one step (a step a minute)",
    ),
    (
        "--runtime-hooks-reconcile-interval",
        "runtime_hooks_reconcile_interval",
        duration_flag,
        10.0,
        "period of the runtime hooks' reconciler",
    ),
    (
        "--runtime-hooks-plugin-failure-policy",
        "runtime_hooks_plugin_failure_policy",
        _failure_policy,
        FailurePolicy.IGNORE,
        "Ignore: a failing hook is logged and the others run; Fail: it stops the stage "
        "(through NRI, the runtime is told and fails the pod or container)",
    ),
    (
        "--runtime-hooks-network",
        "runtime_hooks_network",
        _unix_only,
        "unix",
        "network of the runtime hook server (unix)",
    ),
    (
        "--runtime-hooks-addr",
        "runtime_hooks_addr",
        str,
        "/host-var-run-koordlet/koordlet.sock",
        "socket of the runtime hook server koord-runtime-proxy calls ('' to run none)",
    ),
    (
        "--runtime-hooks-host-endpoint",
        "runtime_hooks_host_endpoint",
        str,
        "/var/run/koordlet/koordlet.sock",
        "that socket as the host sees it (what koord-runtime-proxy is told)",
    ),
    (
        "--runtime-hooks-failure-policy",
        "runtime_hooks_failure_policy",
        _failure_policy,
        FailurePolicy.IGNORE,
        "what koord-runtime-proxy does when this koordlet's hooks fail: Ignore or Fail the CRI call",
    ),
    (
        "--runtime-hooks-disable-stages",
        "runtime_hooks_disable_stages",
        _hook_types,
        (),
        "comma-separated hook points koord-runtime-proxy should not call (PreRunPodSandbox, ...)",
    ),
    (
        "--enable-nri-runtime-hook",
        "enable_nri_runtime_hook",
        bool_flag,
        True,
        "apply the runtime hooks through NRI when the runtime offers it",
    ),
    (
        "--runtime-hooks-nri-socket-path",
        "runtime_hooks_nri_socket_path",
        str,
        "nri/nri.sock",
        "the NRI socket, relative to --var-run-root-dir",
    ),
    (
        "--runtime-hooks-nri-plugin-name",
        "runtime_hooks_nri_plugin_name",
        str,
        "koordlet_nri",
        "NRI plug-in name",
    ),
    (
        "--runtime-hooks-nri-plugin-index",
        "runtime_hooks_nri_plugin_index",
        str,
        "00",
        "NRI plug-in index (plug-ins run in ascending order)",
    ),
    (
        "--runtime-hooks-nri-connect-timeout",
        "runtime_hooks_nri_connect_timeout",
        duration_flag,
        6.0,
        "limit of the NRI connection and registration (a little over containerd's registration timeout)",
    ),
    (
        "--runtime-hooks-nri-backoff-duration",
        "runtime_hooks_nri_backoff_duration",
        duration_flag,
        1.0,
        "first wait before reconnecting to NRI",
    ),
    (
        "--runtime-hooks-nri-backoff-factor",
        "runtime_hooks_nri_backoff_factor",
        float,
        2.0,
        "growth of the wait between NRI reconnection attempts",
    ),
    (
        "--runtime-hooks-nri-backoff-cap",
        "runtime_hooks_nri_backoff_cap",
        duration_flag,
        30.0,
        "longest wait between NRI reconnection attempts (upstream: unbounded)",
    ),
    (
        "--runtime-hooks-nri-backoff-steps",
        "runtime_hooks_nri_backoff_steps",
        int,
        2**31 - 1,
        "failed NRI connection attempts in a row before giving up (the reconciler goes on)",
    ),
]


def _add_agent_flags(parser: argparse.ArgumentParser) -> None:
    for flag, dest, kind, default, text in AGENT_FLAGS:
        if kind is bool_flag:
            parser.add_argument(
                flag, dest=dest, type=bool_flag, nargs="?", const=True, default=default, help=text
            )
        else:
            parser.add_argument(flag, dest=dest, type=kind, default=default, help=text)  # type: ignore[arg-type]


def agent_config(args: argparse.Namespace, environ: Mapping[str, str]) -> AgentConfig:
    """The agent's configuration; exits 2 with one line when NODE_NAME is missing in cluster mode."""
    node_name = environ.get("NODE_NAME", "")
    if not node_name:
        if not args.standalone:
            fail(
                PROG,
                "environment variable NODE_NAME is required (set it from spec.nodeName), or use --standalone",
            )
        node_name = socket.gethostname()
    host, port = args.addr if args.addr is not None else (("127.0.0.1" if args.standalone else ""), 9316)
    paths = host_paths(args) if not args.standalone else _standalone_paths(args)
    collectors = CollectorConfig(
        collect_res_used_interval=args.collect_res_used_interval,
        collect_sys_metric_outdated_interval=args.collect_sys_metric_outdated_interval,
        collect_node_cpu_info_interval=args.collect_node_cpu_info_interval,
        psi_collector_interval=args.psi_collector_interval,
        enable_pagecache_collector=args.enable_pagecache_collector,
        collect_node_storage_info_interval=args.collect_node_storage_info_interval,
        cpi_collector_interval=args.cpi_collector_interval,
        collect_cpi_timewindow=args.collect_cpi_timewindow,
        coldpage_collector_interval=args.coldpage_collector_interval,
        resctrl_collector_interval=args.resctrl_collector_interval,
        enable_resctrl_collector=args.enable_resctrl_collector,
        pressure_probe_interval=args.qos_pressure_probe_interval,
    )
    return AgentConfig(
        node_name=node_name,
        paths=paths,
        gates=args.feature_gates,
        host=host,
        port=port,
        standalone=args.standalone,
        kubeconfig=args.kubeconfig,
        kube_api_qps=args.kube_api_qps,
        kube_api_burst=args.kube_api_burst,
        kubelet_preferred_address_type=args.kubelet_preferred_address_type,
        kubelet_sync_interval=args.kubelet_sync_interval,
        kubelet_sync_timeout=args.kubelet_sync_timeout,
        kubelet_insecure_tls=args.kubelet_insecure_tls,
        kubelet_read_only_port=args.kubelet_read_only_port,
        cgroup_kube_dir=args.cgroup_kube_dir,
        node_topology_sync_interval=args.node_topology_sync_interval,
        disable_query_kubelet_config=args.disable_query_kubelet_config,
        xpu_device_infos_dir=args.xpu_device_infos_dir,
        xpu_enforce_collect_from_device_infos=args.xpu_enforce_collect_from_device_infos,
        enable_node_metric_report=args.enable_node_metric_report,
        collectors=collectors,
        metric_retention_seconds=args.tsdb_retention_duration,
        metric_max_bytes=args.tsdb_max_bytes,
        metric_data_dir=Path(args.tsdb_path) if args.tsdb_path else None,
        prediction=_prediction_config(args, paths),
        qos_interval=args.cpu_suppress_interval_seconds,
        memory_evict_cooldown=args.memory_evict_cool_time_seconds,
        cpu_evict_cooldown=args.cpu_evict_cool_time_seconds,
        resource_force_update_seconds=args.resource_force_update_seconds,
        runtime_hooks_reconcile_interval=args.runtime_hooks_reconcile_interval,
        runtime_hooks_failure_policy=args.runtime_hooks_plugin_failure_policy,
        nri=_nri_options(args, paths) if args.enable_nri_runtime_hook else None,
        hook_server=HookServerOptions(
            Path(args.runtime_hooks_addr),
            args.runtime_hooks_host_endpoint,
            paths.runtime_hooks_config_dir,
            args.runtime_hooks_failure_policy,
            args.runtime_hooks_disable_stages,
        )
        if args.runtime_hooks_addr
        else None,
    )


def _nri_options(args: argparse.Namespace, paths: HostPaths) -> NriOptions:
    return NriOptions(
        socket_path=paths.var_run(args.runtime_hooks_nri_socket_path),
        plugin_name=args.runtime_hooks_nri_plugin_name,
        plugin_index=args.runtime_hooks_nri_plugin_index,
        connect_timeout=args.runtime_hooks_nri_connect_timeout,
        backoff_duration=args.runtime_hooks_nri_backoff_duration,
        backoff_factor=args.runtime_hooks_nri_backoff_factor,
        backoff_cap=args.runtime_hooks_nri_backoff_cap,
        backoff_steps=args.runtime_hooks_nri_backoff_steps,
    )


def _prediction_config(args: argparse.Namespace, paths: HostPaths) -> PredictionConfig:
    """The ``--prediction-*`` flags; exits 2 with one line when one is out of range."""
    try:
        return PredictionConfig(
            checkpoint_dir=checkpoint_dir_under(paths.var_run_root, args.prediction_checkpoint_filepath),
            cold_start_seconds=args.prediction_cold_start_duration,
            safety_margin_percent=args.prediction_safety_margin_percent,
            memory_half_life_seconds=args.prediction_memory_histogram_decay_halflife,
            cpu_half_life_seconds=args.prediction_cpu_histogram_decay_halflife,
            training_interval_seconds=args.prediction_training_interval,
            model_expiration_seconds=args.prediction_model_expiration_duration,
            checkpoint_interval_seconds=args.prediction_model_checkpoint_interval,
            checkpoint_max_per_step=args.prediction_model_checkpoint_max_per_step,
        )
    except ValueError as exc:
        fail(PROG, str(exc))


def _standalone_paths(args: argparse.Namespace) -> HostPaths:
    """Standalone runs on the host itself: host paths unless flags say otherwise."""
    overrides = {field: getattr(args, field, None) for field in HOST_ROOT_FLAGS.values()}
    return HostPaths.host().with_overrides(**overrides)


def build_parser() -> argparse.ArgumentParser:
    parser = component_parser(
        PROG,
        "Koordinator's node agent: collects metrics, enforces QoS and applies runtime hooks.",
        KOORDLET_FEATURES,
        version_text(),
    )
    _add_host_root_flags(parser)
    _add_agent_flags(parser)
    parser.add_argument(
        "--standalone",
        action="store_true",
        help="run without an apiserver or kubelet: collect this machine's metrics and serve /metrics",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    probe_cmd = sub.add_parser(
        "probe",
        help="inspect this node and print one row per capability (read-only)",
        description="Inspect this node's kernel, cgroups, PSI, resctrl, perf, QoS knobs, sockets "
        "and devices. Reads only.",
    )
    probe_cmd.add_argument("--output", "-o", choices=("table", "json"), default="table")
    _add_host_root_flags(probe_cmd)
    plan_cmd = sub.add_parser(
        "plan",
        help="print what the QoS strategies would write and evict for a scenario (dry run)",
        description="Plan the QoS strategies once against a scenario file (node, NodeSLO, pods, usage) "
        "and the host tree given by the root flags; print the writes and evictions. Changes nothing.",
    )
    plan_cmd.add_argument(
        "--scenario", required=True, metavar="FILE", help="scenario YAML or JSON ('-' for stdin)"
    )
    plan_cmd.add_argument(
        "--strategy", action="append", default=[], metavar="NAME", help="only this strategy (repeatable)"
    )
    plan_cmd.add_argument("--output", "-o", choices=("table", "json"), default="table")
    _add_host_root_flags(plan_cmd)
    return parser


def run_probe(args: argparse.Namespace) -> int:
    rows = probe(host_paths(args))
    if args.output == "json":
        sys.stdout.buffer.write(orjson.dumps(as_json(rows), option=orjson.OPT_INDENT_2) + b"\n")
    else:
        print(as_table(rows))
    return 0


def run_plan(args: argparse.Namespace) -> int:
    try:
        text = sys.stdin.read() if args.scenario == "-" else Path(args.scenario).read_text()
    except OSError as err:
        fail(PROG, f"cannot read scenario {args.scenario}: {err.strerror}")
    try:
        scenario = Scenario.parse(text)
        result = plan_scenario(scenario, host_paths(args), strategies(), args.strategy)
    except ScenarioError as err:
        for problem in err.problems[:-1]:
            sys.stderr.write(f"{PROG}: error: scenario {args.scenario}: {one_line(problem)}\n")
        fail(PROG, f"scenario {args.scenario}: {err.problems[-1]}")
    if args.output == "json":
        sys.stdout.buffer.write(orjson.dumps(result, option=orjson.OPT_INDENT_2) + b"\n")
    else:
        print(as_plan_table(result))
    return 0


def _shown(limit: int) -> str:
    return "unlimited" if limit == resource.RLIM_INFINITY else str(limit)


def raise_open_files_limit(
    getrlimit: Callable[[int], tuple[int, int]] = resource.getrlimit,
    setrlimit: Callable[[int, tuple[int, int]], None] = resource.setrlimit,
) -> None:
    """Raise the soft RLIMIT_NOFILE to the hard limit, and log both.

    The Go runtime does this at the start of every program, so upstream's koordlet has
    the hard limit; Python keeps the soft one (often 1024), which the CPI collector's
    window (containers x CPUs x 2 perf descriptors) exceeds on a large node. A limit
    that cannot be read or raised is logged, and the agent starts all the same. Child
    processes inherit the raised limit (Go gives its children the original one; a
    ``preexec_fn`` could, but it is unsafe with threads running).
    """
    try:
        soft, hard = getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError) as err:
        log.warning("cannot read the open files limit (RLIMIT_NOFILE): %s", err)
        return
    if soft == hard:
        log.info("open files limit (RLIMIT_NOFILE): %s, the hard limit", _shown(soft))
        return
    try:
        setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (OSError, ValueError) as err:
        log.warning(
            "cannot raise the open files limit (RLIMIT_NOFILE) from %s to the hard limit %s: %s "
            "(the CPI collector may run out of descriptors on a large node)",
            _shown(soft),
            _shown(hard),
            err,
        )
        return
    log.info(
        "open files limit (RLIMIT_NOFILE) raised from %s to the hard limit %s", _shown(soft), _shown(hard)
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(args.verbosity)
    if args.command == "probe":
        return tolerate_closed_stdout(lambda: run_probe(args))
    if args.command == "plan":
        return tolerate_closed_stdout(lambda: run_plan(args))
    config = agent_config(args, os.environ)
    raise_open_files_limit()
    return run_agent(config)


if __name__ == "__main__":
    sys.exit(main())
