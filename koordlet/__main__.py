"""The ``koordlet`` command: the node agent, and ``koordlet probe`` to inspect a node.

``koordlet probe`` prints what this node supports (cgroup versions, driver, PSI,
resctrl, perf, QoS knobs, runtime sockets, GPUs, RDMA). Running the agent itself is
reported as not built yet until its issue lands; nothing is faked.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import orjson

from koordinator import __version__
from koordinator.api.features import KOORDLET_FEATURES
from koordinator.cli import component_parser, configure_logging, not_built
from koordlet.system import native
from koordlet.system.paths import HostPaths
from koordlet.system.probe import as_json, as_table, probe

PROG = "koordlet"

#: flag -> HostPaths field, upstream flag names (pkg/koordlet/util/system/config.go)
HOST_ROOT_FLAGS = {
    "--cgroup-root-dir": "cgroup_root",
    "--proc-root-dir": "proc_root",
    "--sys-root-dir": "sys_root",
    "--sys-fs-root-dir": "sys_fs_root",
    "--var-run-root-dir": "var_run_root",
    "--run-root-dir": "run_root",
    "--var-lib-kubelet-dir": "var_lib_kubelet",
}


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


def build_parser() -> argparse.ArgumentParser:
    parser = component_parser(
        PROG,
        "Koordinator's node agent: collects metrics, enforces QoS and applies runtime hooks.",
        KOORDLET_FEATURES,
        version_text(),
    )
    _add_host_root_flags(parser)
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
    return parser


def run_probe(args: argparse.Namespace) -> int:
    rows = probe(host_paths(args))
    if args.output == "json":
        sys.stdout.buffer.write(orjson.dumps(as_json(rows), option=orjson.OPT_INDENT_2) + b"\n")
    else:
        print(as_table(rows))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(args.verbosity)
    if args.command != "probe":
        not_built(PROG, "the koordlet agent (cluster and --standalone modes)")
    return run_probe(args)


if __name__ == "__main__":
    sys.exit(main())
