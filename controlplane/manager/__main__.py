"""The ``koord-manager`` command: the manager process, ``admit`` and ``explain-node``.

``koord-manager [flags]`` runs the process (:mod:`controlplane.manager.manager`): admission
webhooks over self-managed TLS, health probes, metrics, and -- on the replica holding the
lease -- the slo-controller. ``koord-manager admit ...`` runs the admission chain offline
(:mod:`controlplane.manager.admit`); ``koord-manager explain-node NAME`` prints how a node's
batch and mid resources are computed (:mod:`controlplane.manager.explain`). Usage errors
print one line and exit 2; a manager that cannot start, whose runnable fails or that loses
its lease exits 1.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence

from controlplane.manager.admit import AdmitError
from controlplane.manager.admit import run as run_admit
from controlplane.manager.explain import ExplainError
from controlplane.manager.explain import run as run_explain
from controlplane.manager.options import OptionsError, add_manager_flags, options_from_args
from koordinator import __version__
from koordinator.api.features import CONTROL_PLANE_FEATURES
from koordinator.cli import (
    component_parser,
    fail,
    feature_gates_flag,
    parse_component_args,
    stop_on_signals,
    tolerate_closed_stdout,
)

PROG = "koord-manager"
EXIT_FAILED = 1
#: the longest a clean stop may take (in-flight requests and reconciles drain within it)
STOP_TIMEOUT_S = 10.0

log = logging.getLogger(PROG)


def build_parser() -> argparse.ArgumentParser:
    parser = component_parser(
        PROG,
        "Koordinator's manager: admission webhooks (pods enter the colocation protocol here) and the "
        "slo-controller (NodeMetric, NodeSLO, batch and mid node resources).",
        CONTROL_PLANE_FEATURES,
        f"{PROG} {__version__}",
    )
    add_manager_flags(parser)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    admit = commands.add_parser(
        "admit",
        help="run the admission chain offline on one AdmissionReview or object",
        description="Answer one AdmissionReview (or a bare object, wrapped as CREATE) with the same "
        "handlers as the server, against cluster objects read from YAML files.",
    )
    admit.add_argument(
        "--review", required=True, metavar="FILE", help="AdmissionReview or object (JSON/YAML; - = stdin)"
    )
    admit.add_argument(
        "--objects",
        action="append",
        default=[],
        metavar="FILE",
        help="cluster objects (YAML stream); repeatable",
    )
    admit.add_argument(
        "--path",
        default=None,
        help="call this webhook only (default: the apiserver's chain for the object: mutating, then "
        "validating on the result)",
    )
    admit.add_argument(
        "--random", type=int, default=None, metavar="N", help="profile probability draw (0-99)"
    )
    admit.add_argument("--output", choices=("text", "json", "yaml"), default="text", help="output format")
    # Accept the common flags after the subcommand too, without resetting values given before it.
    admit.add_argument(
        "--feature-gates",
        dest="feature_gates",
        type=feature_gates_flag(CONTROL_PLANE_FEATURES),
        default=argparse.SUPPRESS,
        metavar="GATES",
        help="feature gates deciding which webhooks and steps run (as for the manager)",
    )
    explain = commands.add_parser(
        "explain-node",
        help="print each step of a node's batch and mid resource calculation",
        description="Explain a node's kubernetes.io/batch-* and mid-* resources with the controller's own "
        "calculation, from the live cluster or (--from-files) from YAML files.",
    )
    explain.add_argument("name", metavar="NAME", help="the node")
    explain.add_argument(
        "--from-files", action="store_true", help="read the objects from files instead of the cluster"
    )
    explain.add_argument("--node", metavar="FILE", help="the Node (with --from-files; required)")
    explain.add_argument("--node-metric", metavar="FILE", help="its NodeMetric (with --from-files)")
    explain.add_argument(
        "--nrt",
        metavar="FILE",
        help="its NodeResourceTopology (with --from-files; for the CPU normalization)",
    )
    explain.add_argument("--pods", metavar="FILE", help="pods, a YAML stream or List (with --from-files)")
    explain.add_argument(
        "--config", metavar="FILE", help="the slo-controller-config ConfigMap (with --from-files)"
    )
    explain.add_argument(
        "--now", metavar="TIME", help="RFC 3339 time to evaluate at (with --from-files; default: now)"
    )
    explain.add_argument("--output", choices=("text", "json"), default="text", help="output format")
    for flag in ("--kubeconfig", "--config-namespace", "--slo-config-name"):
        # accepted after the subcommand too, without resetting a value given before it
        explain.add_argument(flag, default=argparse.SUPPRESS, help=f"as {flag} of the manager")
    return parser


def _serve(args: argparse.Namespace) -> int:
    from controlplane.manager.manager import Manager, ManagerError
    from controlplane.manager.server import settle_after_start
    from koordinator.kube.client import ApiClient
    from koordinator.kube.config import ConfigError, load_config

    try:
        options = options_from_args(args)
    except OptionsError as exc:
        fail(PROG, str(exc))

    async def main() -> int:
        try:
            config = load_config(options.kubeconfig)
        except ConfigError as exc:
            log.error("cannot load cluster credentials: %s", exc)
            return EXIT_FAILED
        async with ApiClient(config, qps=options.kube_api_qps, burst=options.kube_api_burst) as client:
            manager = Manager(options, client, settle=settle_after_start)
            stop_on_signals(manager.request_stop)
            try:
                await manager.run()
            except ManagerError as exc:
                log.error("%s", exc)
                return EXIT_FAILED
            finally:
                try:
                    async with asyncio.timeout(STOP_TIMEOUT_S):
                        await manager.stop()
                except TimeoutError:
                    log.warning("stopping took longer than %.0fs; exiting anyway", STOP_TIMEOUT_S)
        log.info("koord-manager stopped")
        return 0

    return asyncio.run(main())


def _explain(args: argparse.Namespace) -> int:
    try:
        return run_explain(
            args.name,
            from_files=args.from_files,
            node_file=args.node,
            node_metric_file=args.node_metric,
            nrt_file=args.nrt,
            pods_file=args.pods,
            config_file=args.config,
            now=args.now,
            kubeconfig=args.kubeconfig,
            config_namespace=args.config_namespace,
            config_name=args.slo_config_name,
            output=args.output,
            out=sys.stdout,
            err=sys.stderr,
        )
    except ExplainError as exc:
        fail(f"{PROG} explain-node", str(exc))


def _admit(args: argparse.Namespace) -> int:
    try:
        return run_admit(
            args.review, args.objects, args.path, args.feature_gates, args.random, args.output, sys.stdout
        )
    except AdmitError as exc:
        fail(f"{PROG} admit", str(exc))


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_component_args(build_parser(), argv)
    if args.command == "explain-node":
        return tolerate_closed_stdout(lambda: _explain(args))
    if args.command == "admit":
        return tolerate_closed_stdout(lambda: _admit(args))
    return _serve(args)


if __name__ == "__main__":
    sys.exit(main())
