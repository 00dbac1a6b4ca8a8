"""The ``koord-scheduler`` command.

``koord-scheduler simulate`` places pods offline with the scheduler's framework. The
scheduler process itself (queue, informers, binding, leader election) is not built yet:
without a subcommand the command says so and exits 2.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import orjson

from controlplane.scheduler import config as schedconfig
from controlplane.scheduler.simulate import SimulateError, as_table, simulate
from koordinator import __version__
from koordinator.api.features import CONTROL_PLANE_FEATURES
from koordinator.cli import component_parser, fail, not_built, parse_component_args, tolerate_closed_stdout

PROG = "koord-scheduler"


def main(argv: Sequence[str] | None = None) -> int:
    parser = component_parser(
        PROG,
        "Koordinator's scheduler. Not built in this release: the scheduler process (queue, "
        "informers, binding) and most plug-ins. `simulate` places pods offline with the scheduling "
        "framework (NodeUnschedulable, NodeName, TaintToleration, NodeResourcesFit, "
        "NodeResourcesBalancedAllocation).",
        CONTROL_PLANE_FEATURES,
        f"{PROG} {__version__}",
    )
    parser.add_argument(
        "--config", metavar="FILE", help="KubeSchedulerConfiguration (kubescheduler.config.k8s.io/v1)"
    )
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
        help="other cluster objects: bound pods (repeatable)",
    )
    sim.add_argument("--config", dest="sim_config", metavar="FILE", help="KubeSchedulerConfiguration")
    sim.add_argument("--seed", type=int, default=None, help="tie-break seed (default: random)")
    sim.add_argument("--output", "-o", choices=("json", "table"), default="table")
    args = parse_component_args(parser, argv)
    if args.command != "simulate":
        not_built(PROG, "the koord-scheduler process (queue, informers, binding)")
    try:
        config = schedconfig.load(args.sim_config or args.config)
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
