"""The ``koord-scheduler`` command (flags only until the component is built)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from koordinator import __version__
from koordinator.api.features import CONTROL_PLANE_FEATURES
from koordinator.cli import component_parser, not_built, parse_component_args

PROG = "koord-scheduler"


def main(argv: Sequence[str] | None = None) -> int:
    parser = component_parser(
        PROG,
        "Koordinator's scheduler. Not built in this release: the command accepts its common flags "
        "and exits 2; no scheduling plug-in (LoadAware, NodeNUMAResource, Reservation, ElasticQuota, "
        "Coscheduling, DeviceShare) exists yet.",
        CONTROL_PLANE_FEATURES,
        f"{PROG} {__version__}",
    )
    parse_component_args(parser, argv)
    not_built(PROG, PROG)


if __name__ == "__main__":
    sys.exit(main())
