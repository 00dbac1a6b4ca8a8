"""The ``koord-device-daemon`` command: write the node's accelerators as device-info
records for the koordlet (:mod:`koordlet.devicedaemon.daemon`); a bad configuration prints
one line and exits 2."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from koordinator import __version__
from koordinator.api.features import KOORDLET_FEATURES
from koordinator.cli import bool_flag, component_parser, fail, parse_component_args, run_loop
from koordlet.devicedaemon.daemon import DEFAULT_OUTPUT, DaemonConfig, DaemonError, load_config, run
from koordlet.system.paths import HostPaths

PROG = "koord-device-daemon"


def build_parser() -> argparse.ArgumentParser:
    parser = component_parser(
        PROG,
        "Koordinator's device daemon: finds the node's accelerators (NVIDIA GPUs through NVML) and "
        "writes them as device-info records, which the koordlet reports in the node's Device.",
        KOORDLET_FEATURES,
        f"{PROG} {__version__}",
    )
    add = parser.add_argument
    # None: not given (the environment and the config file apply)
    add("--oneshot", type=bool_flag, nargs="?", const=True, metavar="BOOL", help="detect once and exit")
    add("--no-timestamp", type=bool_flag, nargs="?", const=True, metavar="BOOL", help="accepted, as upstream")
    add("--sleep-interval", metavar="D", help="time between detections (900s)")
    add("--prints-output-file", metavar="FILE", help=f"the records' file ({DEFAULT_OUTPUT}; empty: stdout)")
    add("--config-file", metavar="FILE", help="YAML/JSON {version: v1, flags: {kdd: {...}}}")
    add(
        "--sys-root-dir", metavar="DIR", help="the host's /sys (default: the koordlet's, /host-sys/ in a pod)"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_component_args(build_parser(), argv)
    flags = {
        "oneshot": args.oneshot,
        "no_timestamp": args.no_timestamp,
        "sleep_interval": args.sleep_interval,
        "prints_output_file": args.prints_output_file,
    }

    def load() -> DaemonConfig:
        return load_config(flags, config_file=args.config_file)

    try:
        load()
    except DaemonError as err:
        fail(PROG, str(err))
    sys_root = Path(args.sys_root_dir) if args.sys_root_dir else HostPaths.from_environ().sys_root
    return run_loop(run(load, sys_root))


if __name__ == "__main__":
    sys.exit(main())
