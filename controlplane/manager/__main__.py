"""The ``koord-manager`` command: the manager process, and ``koord-manager admit``.

``koord-manager [flags]`` runs the process (:mod:`controlplane.manager.manager`): admission
webhooks over self-managed TLS, health probes and metrics. ``koord-manager admit ...``
runs the admission chain offline (:mod:`controlplane.manager.admit`). Usage errors print
one line and exit 2; a manager that cannot start or whose runnable fails exits 1.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from collections.abc import Sequence

from controlplane.manager.admit import AdmitError
from controlplane.manager.admit import run as run_admit
from controlplane.manager.options import OptionsError, add_manager_flags, options_from_args
from koordinator import __version__
from koordinator.api.features import CONTROL_PLANE_FEATURES, FeatureGateError, FeatureGates
from koordinator.cli import component_parser, configure_logging, fail

PROG = "koord-manager"
EXIT_FAILED = 1

log = logging.getLogger(PROG)


def build_parser() -> argparse.ArgumentParser:
    parser = component_parser(
        PROG,
        "Admission webhooks of Koordinator: pods enter the colocation protocol here.",
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
        "--path", default=None, help="webhook path (default: the mutating webhook of the object's kind)"
    )
    admit.add_argument(
        "--random", type=int, default=None, metavar="N", help="profile probability draw (0-99)"
    )
    admit.add_argument("--output", choices=("text", "json", "yaml"), default="text", help="output format")
    # Accept the common flags after the subcommand too, without resetting values given before it.
    admit.add_argument(
        "--feature-gates",
        dest="feature_gates",
        type=_gates,
        default=argparse.SUPPRESS,
        metavar="GATES",
        help="feature gates deciding which webhooks and steps run (as for the manager)",
    )
    return parser


def _gates(text: str) -> FeatureGates:
    try:
        return FeatureGates.parse(CONTROL_PLANE_FEATURES, text)
    except FeatureGateError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _serve(args: argparse.Namespace) -> int:
    from controlplane.manager.manager import Manager, ManagerError
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
            manager = Manager(options, client)
            loop = asyncio.get_running_loop()
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(signum, manager.request_stop)
            try:
                await manager.start()
                await manager.wait()
            except ManagerError as exc:
                log.error("%s", exc)
                return EXIT_FAILED
            finally:
                await manager.stop()
        log.info("koord-manager stopped")
        return 0

    return asyncio.run(main())


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(list(argv) if argv is not None else None)
    configure_logging(args.verbosity)
    if args.command == "admit":
        try:
            return run_admit(
                args.review, args.objects, args.path, args.feature_gates, args.random, args.output, sys.stdout
            )
        except AdmitError as exc:
            fail(f"{PROG} admit", str(exc))
    return _serve(args)


if __name__ == "__main__":
    sys.exit(main())
