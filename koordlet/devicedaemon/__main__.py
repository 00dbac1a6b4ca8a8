"""The ``koord-device-daemon`` command (flags only until the daemon is built)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from koordinator import __version__
from koordinator.api.features import KOORDLET_FEATURES
from koordinator.cli import component_parser, not_built, parse_component_args

PROG = "koord-device-daemon"


def main(argv: Sequence[str] | None = None) -> int:
    parser = component_parser(
        PROG,
        "Koordinator's device daemon (accelerator detection for the koordlet). Not built in this "
        "release: the command accepts its flags and exits 2.",
        KOORDLET_FEATURES,
        f"{PROG} {__version__}",
    )
    parser.add_argument("--oneshot", action="store_true", help="detect once and exit")
    parser.add_argument("--sleep-interval", default="900s", help="interval between detections")
    parse_component_args(parser, argv)
    not_built(PROG, "koord-device-daemon")


if __name__ == "__main__":
    sys.exit(main())
