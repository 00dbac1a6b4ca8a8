"""The ``koord-scheduler`` command: the scheduler process (upstream's flags), or
``koord-scheduler simulate``, which places pods offline with the same framework."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

import orjson

from controlplane.scheduler import config as schedconfig
from controlplane.scheduler.simulate import SimulateError, as_table, simulate
from koordinator import __version__
from koordinator.api.features import CONTROL_PLANE_FEATURES
from koordinator.cli import (
    add_leader_election_flags,
    cannot_listen,
    component_parser,
    fail,
    leader_election_flags,
    parse_component_args,
    run_loop,
    stop_on_signals,
    tolerate_closed_stdout,
)

if TYPE_CHECKING:
    from controlplane.scheduler.process import ProcessOptions
    from koordinator.kube.client import ApiClient

PROG = "koord-scheduler"
#: ``koord-scheduler extender``'s HTTP port
EXTENDER_PORT = 10262
log = logging.getLogger(PROG)
EXIT_FAILED = 1


def _process_flags(parser: argparse.ArgumentParser) -> None:
    """kube-scheduler's flags (Koordinator's Lease name and namespace by default)."""
    from controlplane.scheduler.process import ProcessOptions

    defaults = ProcessOptions()
    add = parser.add_argument
    # as upstream: with --config, the file's clientConnection wins over these three (ignored)
    add("--kubeconfig", metavar="FILE", help="kubeconfig (default: in-cluster credentials in a pod)")
    add("--kube-api-qps", type=float, default=50.0, help="client QPS to the apiserver (50)")
    add("--kube-api-burst", type=int, default=100, help="client burst to the apiserver (100)")
    # and these override the file's leaderElection only when given (their defaults: None)
    add_leader_election_flags(parser, defaults.lease_namespace, defaults.lease_name)
    add(
        "--secure-port",
        type=int,
        default=defaults.secure_port,
        help="HTTPS port for health and metrics (0: none)",
    )
    add("--bind-address", default=defaults.bind_address)
    add("--tls-cert-file", metavar="FILE", help="serving certificate (default: a self-signed one)")
    add("--tls-private-key-file", metavar="FILE")


def settings(
    args: argparse.Namespace, config: schedconfig.SchedulerConfig
) -> tuple[str | None, float, int, ProcessOptions]:
    """The kubeconfig, client QPS and burst, and process options, as kube-scheduler resolves
    them: with ``--config`` the file's clientConnection (``--kubeconfig`` and the QPS flags
    are ignored) and its leaderElection, which leader-election flags override only when
    given; without it, the flags."""
    from controlplane.scheduler.process import ProcessOptions

    leader_election = {**config.leader_election, **leader_election_flags(args)}
    options = ProcessOptions(
        **leader_election,
        bind_address=args.bind_address,
        secure_port=args.secure_port,
        tls_cert_file=args.tls_cert_file,
        tls_private_key_file=args.tls_private_key_file,
    )
    if args.config:
        return config.client.kubeconfig, config.client.qps, config.client.burst, options
    return args.kubeconfig, args.kube_api_qps, args.kube_api_burst, options


def _load(args: argparse.Namespace, default: str | None = None) -> schedconfig.SchedulerConfig:
    try:
        config = schedconfig.load(args.config or default)
    except schedconfig.ConfigError as err:
        fail(PROG, str(err))
    config.feature_gates = args.feature_gates
    return config


def _with_client(
    kubeconfig: str | None,
    qps: float,
    burst: int,
    body: Callable[[ApiClient], Awaitable[int]],
    *,
    fast_unary: bool = False,
) -> int:
    """Run ``body`` with a client of the cluster's credentials until it returns, or until
    SIGTERM/SIGINT cancel it (status 0)."""
    from koordinator.kube.client import ApiClient
    from koordinator.kube.config import ConfigError, load_config

    async def main() -> int:
        try:
            cluster = load_config(kubeconfig)
        except ConfigError as err:
            log.error("cannot load cluster credentials: %s", err)
            return EXIT_FAILED
        async with ApiClient(cluster, qps=qps, burst=burst, fast_unary=fast_unary) as client:
            task = asyncio.current_task()
            assert task is not None

            def stop() -> None:
                task.cancel()

            stop_on_signals(stop)
            try:
                return await body(client)
            except asyncio.CancelledError:
                log.info("%s stopping", PROG)
                return 0

    return run_loop(main())


def _serve(args: argparse.Namespace) -> int:
    from controlplane.scheduler.process import ProcessError, SchedulerProcess

    config = _load(args)
    if bool(args.tls_cert_file) != bool(args.tls_private_key_file):
        fail(PROG, "--tls-cert-file and --tls-private-key-file go together")
    kubeconfig, qps, burst, options = settings(args, config)

    async def body(client: ApiClient) -> int:
        process = SchedulerProcess(client, config, options)
        try:
            return await process.run()
        except ProcessError as err:
            log.error("%s", err)
            return EXIT_FAILED
        finally:
            await process.stop()

    # a Binding and an Event per pod: the small HTTP/1.1 client costs a third of aiohttp
    return _with_client(kubeconfig, qps, burst, body, fast_unary=True)


def _extend(args: argparse.Namespace) -> int:
    from controlplane.scheduler.extender import serve
    from controlplane.scheduler.profiles import EXTENDER

    config = _load(args, str(EXTENDER))
    kubeconfig, qps, burst, _ = settings(args, config)

    async def body(client: ApiClient) -> int:
        try:
            await serve(client, config, args.bind_address, args.port)
        except TimeoutError:
            log.error("informer caches did not sync")
            return EXIT_FAILED
        except OSError as err:
            log.error("%s", cannot_listen(args.bind_address, args.port, err))
            return EXIT_FAILED
        return 0

    return _with_client(kubeconfig, qps, burst, body)


def build_parser() -> argparse.ArgumentParser:
    parser = component_parser(
        PROG,
        "Koordinator's scheduler: kube-scheduler's default plug-ins and LoadAwareScheduling, "
        "ElasticQuota, Coscheduling, NodeResourcesFitPlus, ScarceResourceAvoidance, SchedulingHint, "
        "NodeNUMAResource, DeviceShare, Reservation and DefaultPreBind "
        "(Koordinator's profile ships as controlplane/scheduler/profiles/koord-scheduler.yaml); "
        "`simulate` places pods offline with the same framework; `extender` serves the plug-ins to a "
        "stock kube-scheduler.",
        CONTROL_PLANE_FEATURES,
        f"{PROG} {__version__}",
    )
    parser.add_argument(
        "--config", metavar="FILE", help="KubeSchedulerConfiguration (kubescheduler.config.k8s.io/v1)"
    )
    _process_flags(parser)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    sim = commands.add_parser(
        "simulate",
        help="place pods offline and say where each went and why",
        description="Schedule the pods of --pods in order onto the nodes of --nodes with the same framework "
        "as the scheduler; print per pod the node, the nodes filtered out with their reasons, "
        "and the scores.",
    )
    sim.add_argument(
        "--nodes", required=True, metavar="FILE", help="Node objects (YAML/JSON, a List or a stream)"
    )
    sim.add_argument("--pods", required=True, metavar="FILE", help="the Pods to place, in order")
    sim.add_argument(
        "--objects",
        action="append",
        default=[],
        metavar="FILE",
        help="other cluster objects: bound pods, PodDisruptionBudgets, NodeMetrics, ElasticQuotas, "
        "PodGroups, NodeResourceTopologies, Devices, Reservations, volumes (repeatable)",
    )
    sim.add_argument("--config", dest="sim_config", metavar="FILE", help="KubeSchedulerConfiguration")
    sim.add_argument("--seed", type=int, default=None, help="tie-break seed (default: random)")
    sim.add_argument("--output", "-o", choices=("json", "table"), default="table")
    ext = commands.add_parser(
        "extender",
        help="serve Koordinator's plug-ins to a stock kube-scheduler (its extender protocol)",
        description="Answer a stock kube-scheduler's extender calls (filter, prioritize, bind, preempt) with "
        "the plug-ins of --config (default: controlplane/scheduler/profiles/koord-extender.yaml), over "
        "the cluster of --kubeconfig.",
    )
    ext.add_argument("--port", type=int, default=EXTENDER_PORT, help=f"HTTP port ({EXTENDER_PORT})")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_component_args(build_parser(), argv)
    if args.command == "extender":
        return _extend(args)
    if args.command != "simulate":
        return _serve(args)
    try:
        config = schedconfig.load(args.sim_config or args.config)
        config.feature_gates = args.feature_gates
        results = simulate(config, args.nodes, args.pods, args.objects, seed=args.seed)
    except (schedconfig.ConfigError, SimulateError) as err:
        fail(PROG, str(err))

    def emit() -> int:
        if args.output == "json":
            sys.stdout.write(orjson.dumps(results, option=orjson.OPT_INDENT_2).decode() + "\n")
        else:
            sys.stdout.write(as_table(results) + "\n")
        return 0

    return tolerate_closed_stdout(emit)


if __name__ == "__main__":
    sys.exit(main())
