"""The ``koord-descheduler`` command: the descheduler process, or ``koord-descheduler explain``,
which says offline what a round would do, with the same plug-ins.

Usage errors and configurations upstream would refuse print one line and exit 2; a process
that cannot start or loses its lease exits 1.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import time
from collections.abc import Sequence
from dataclasses import replace

from koordinator import __version__
from koordinator.api.features import CONTROL_PLANE_FEATURES
from koordinator.cli import (
    add_leader_election_flags,
    bool_flag,
    component_parser,
    duration_flag,
    fail,
    leader_election_flags,
    parse_component_args,
    run_loop,
    stop_on_signals,
    tolerate_closed_stdout,
)

PROG = "koord-descheduler"
EXIT_FAILED = 1
log = logging.getLogger(PROG)


def build_parser() -> argparse.ArgumentParser:
    from controlplane.descheduler.process import LEASE_NAME, LEASE_NAMESPACE

    parser = component_parser(
        PROG,
        "Koordinator's descheduler: LowNodeLoad moves pods off nodes whose real usage is over its "
        "thresholds, through MigrationController's PodMigrationJobs (a Reservation on another node "
        "first, then the eviction). `explain` says offline what a round would do.",
        CONTROL_PLANE_FEATURES,
        f"{PROG} {__version__}",
    )
    add = parser.add_argument
    add("--config", metavar="FILE", help="DeschedulerConfiguration (descheduler/v1alpha2)")
    add(
        "--kubeconfig",
        metavar="FILE",
        help="kubeconfig (default: the file's clientConnection, else in-cluster)",
    )
    add("--descheduling-interval", type=duration_flag, metavar="D", help="overrides deschedulingInterval")
    add("--dry-run", type=bool_flag, nargs="?", const=True, metavar="BOOL", help="overrides dryRun")
    add_leader_election_flags(parser, LEASE_NAMESPACE, LEASE_NAME)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    explain = commands.add_parser(
        "explain",
        help="say which nodes are low, high and anomalous and which pods a round would migrate",
        description="Run the configured profiles over objects read from files, creating nothing: "
        "LowNodeLoad's node classification, anomaly counts, budget and chosen pods, and "
        "MigrationController's admission of each.",
    )
    explain.add_argument(
        "--nodes", required=True, metavar="FILE", help="Node objects (YAML/JSON, List or stream)"
    )
    explain.add_argument("--node-metrics", required=True, metavar="FILE", help="NodeMetric objects")
    explain.add_argument("--pods", required=True, metavar="FILE", help="Pod objects")
    explain.add_argument(
        "--objects",
        action="append",
        default=[],
        metavar="FILE",
        help="PodMigrationJobs, workloads (ReplicaSets, StatefulSets, Jobs) and PriorityClasses; repeatable",
    )
    explain.add_argument("--config", dest="explain_config", metavar="FILE", help="DeschedulerConfiguration")
    explain.add_argument("--now", metavar="TIME", help="RFC 3339 time to evaluate at (default: now)")
    explain.add_argument(
        "--rounds", type=int, metavar="N", help="rounds to run (default: enough for a node to turn anomalous)"
    )
    explain.add_argument("--output", "-o", choices=("json", "text"), default="text")
    return parser


def _serve(args: argparse.Namespace) -> int:
    from controlplane.descheduler.config import ConfigError, load
    from controlplane.descheduler.process import DeschedulerProcess, ProcessError, ProcessOptions
    from koordinator.kube.client import ApiClient
    from koordinator.kube.config import ConfigError as CredentialsError
    from koordinator.kube.config import load_config

    try:
        config = load(args.config)
    except ConfigError as err:
        fail(PROG, str(err))
    if args.descheduling_interval is not None:
        config.descheduling_interval_s = args.descheduling_interval
    if args.dry_run is not None:
        config.dry_run = args.dry_run
    options = replace(ProcessOptions(), **{**config.leader_election, **leader_election_flags(args)})
    kubeconfig = args.kubeconfig or config.client.kubeconfig

    async def main() -> int:
        try:
            cluster = load_config(kubeconfig)
        except CredentialsError as err:
            log.error("cannot load cluster credentials: %s", err)
            return EXIT_FAILED
        async with ApiClient(cluster, qps=config.client.qps, burst=config.client.burst) as client:
            process = DeschedulerProcess(client, config, options)
            task = asyncio.current_task()
            assert task is not None

            def stop() -> None:
                task.cancel()

            stop_on_signals(stop)
            try:
                return await process.run()
            except ProcessError as err:
                log.error("%s", err)
                return EXIT_FAILED
            except asyncio.CancelledError:
                log.info("%s stopping", PROG)
                return 0
            finally:
                await process.stop()

    return run_loop(main())


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_component_args(build_parser(), argv)
    if args.command != "explain":
        return _serve(args)
    from controlplane.descheduler.explain import ExplainError, run

    def emit() -> int:
        try:
            return run(
                args.nodes,
                args.pods,
                args.node_metrics,
                args.objects,
                args.explain_config or args.config,
                args.now,
                args.rounds,
                args.output,
                sys.stdout,
                time.time(),
            )
        except ExplainError as err:
            fail(f"{PROG} explain", str(err))

    return tolerate_closed_stdout(emit)


if __name__ == "__main__":
    sys.exit(main())
