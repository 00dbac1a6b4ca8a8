"""Command-line plumbing shared by every component: klog-style flags and one-line errors.

Each binary builds its parser with :func:`component_parser`, which adds ``-v``/``--v``
(klog verbosity), ``--feature-gates`` checked against the component's gate table and
``--version``. Flag values are read by the one set of converters here (Go durations and
booleans, quantities, ``[host]:port`` addresses, feature gates), used as ``type=`` by the
koordlet and koord-manager alike. Every usage error prints exactly one line on stderr and exits 2, so an
init container or a systemd unit shows the real cause instead of a usage dump. Daemons
stop cleanly on the first SIGTERM or SIGINT (:func:`stop_on_signals`) and at once on a
second.
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, NoReturn, TextIO, TypeVar

import yaml

from koordinator.api.features import FeatureGateError, FeatureGates, FeatureSpec
from koordinator.api.goparse import parse_bool, parse_duration_seconds
from koordinator.api.quantity import Quantity, QuantityError

EXIT_USAGE = 2


class ComponentArgumentParser(argparse.ArgumentParser):
    """argparse with Go-flag manners: no abbreviations, one-line errors, exit status 2."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    def error(self, message: str) -> NoReturn:
        fail(self.prog, message)


def one_line(text: object) -> str:
    """``text`` with every run of whitespace, line breaks included, as one space."""
    return " ".join(str(text).split())


def fail(prog: str, message: str) -> NoReturn:
    """Print ``prog: message`` as a single line on stderr and exit with status 2."""
    sys.stderr.write(f"{prog}: error: {one_line(message)}\n")
    raise SystemExit(EXIT_USAGE)


# ---- flag values: ``type=`` converters for argparse ----------------------------------------


def feature_gates_flag(known: Mapping[str, FeatureSpec]) -> Callable[[str], FeatureGates]:
    """``--feature-gates``: comma-separated ``Name=true|false`` pairs checked against ``known``."""

    def convert(text: str) -> FeatureGates:
        try:
            return FeatureGates.parse(known, text)
        except FeatureGateError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    return convert


def duration_flag(text: str) -> float:
    """A Go duration (``10s``, ``1m30s``), in seconds."""
    try:
        return parse_duration_seconds(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"invalid duration {text!r}: {err}") from None


def bool_flag(text: str) -> bool:
    """A Go boolean (``strconv.ParseBool``: ``1``, ``t``, ``true``, ``TRUE``, ``0``, ``f``, ...)."""
    try:
        return parse_bool(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid boolean {text!r}") from None


def size_flag(text: str) -> int:
    """A quantity (``100Mi``, ``1G``), in bytes."""
    try:
        return Quantity.parse(text).value()
    except QuantityError as err:
        raise argparse.ArgumentTypeError(f"invalid size {text!r}: {err}") from None


def parse_address(address: str, default_host: str = "") -> tuple[str, int]:
    """``":8080"``, ``"0.0.0.0:8080"``, ``"[::1]:8080"`` -> ``(host, port)``; port 0 picks a free port."""
    host, sep, port = address.rpartition(":")
    if not sep:
        raise ValueError(f"invalid address {address!r}: expected [host]:port")
    host = host.strip("[]") or default_host
    try:
        number = int(port)
    except ValueError:
        raise ValueError(f"invalid port in {address!r}") from None
    if not 0 <= number <= 65535:
        raise ValueError(f"invalid port in {address!r}")
    return host, number


def address_flag(text: str) -> tuple[str, int]:
    """A listen address, ``[host]:port`` (:func:`parse_address`)."""
    try:
        return parse_address(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _verbosity(text: str) -> int:
    try:
        level = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid verbosity {text!r}, must be an integer") from None
    if level < 0:
        raise argparse.ArgumentTypeError(f"invalid verbosity {level}, must be >= 0")
    return level


def component_parser(
    prog: str,
    description: str,
    features: Mapping[str, FeatureSpec],
    version: str,
) -> ComponentArgumentParser:
    """A parser carrying the flags every Koordinator binary accepts."""
    parser = ComponentArgumentParser(prog=prog, description=description)
    parser.add_argument(
        "-v",
        "--v",
        dest="verbosity",
        type=_verbosity,
        default=0,
        metavar="LEVEL",
        help="log verbosity, klog style (0 = info; 4 and above add debug messages)",
    )
    parser.add_argument(
        "--feature-gates",
        dest="feature_gates",
        type=feature_gates_flag(features),
        default=FeatureGates(features),
        metavar="GATES",
        help="comma-separated Name=true|false pairs; AllAlpha=true|false and AllBeta=true|false "
        f"set every gate of that stage. Known gates: {', '.join(sorted(features))}",
    )
    parser.add_argument("--version", action="version", version=version)
    return parser


class KlogFormatter(logging.Formatter):
    """klog's header: ``I1122 15:42:07.123456    4711 file.py:42] message``."""

    _LEVELS: ClassVar[dict[str, str]] = {
        "DEBUG": "I",
        "INFO": "I",
        "WARNING": "W",
        "ERROR": "E",
        "CRITICAL": "F",
    }

    def format(self, record: logging.LogRecord) -> str:
        ts = time.localtime(record.created)
        micros = int((record.created % 1) * 1_000_000)
        level = self._LEVELS.get(record.levelname, "I")
        head = (
            f"{level}{time.strftime('%m%d %H:%M:%S', ts)}.{micros:06d} {record.process:7d} "
            f"{record.filename}:{record.lineno}] "
        )
        text = head + record.getMessage()
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


def configure_logging(verbosity: int, stream: object = None) -> None:
    """Send the root logger to stderr in klog format; ``-v >= 4`` enables debug messages."""
    handler = logging.StreamHandler(stream or sys.stderr)  # type: ignore[arg-type]
    handler.setFormatter(KlogFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if verbosity >= 4 else logging.INFO)


T = TypeVar("T")


def run_loop(main: Coroutine[Any, Any, T]) -> T:
    """Run a component's main coroutine on uvloop when it is installed (the ``speed``
    extra: koord-scheduler's per-pod requests cost less), else on asyncio's loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    return uvloop.run(main)


def parse_component_args(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    args = parser.parse_args(list(argv) if argv is not None else None)
    configure_logging(args.verbosity)
    return args


def environ_flag(name: str) -> bool:
    """True when an environment switch is set to a true-ish value (``1``, ``true``, ``yes``)."""
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def yaml_problem(error: yaml.YAMLError) -> str:
    """Where and why a text stops being YAML, in one line (``line 3, column 1: expected ...``)."""
    mark = getattr(error, "problem_mark", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    problem = getattr(error, "problem", None) or error
    return where + one_line(problem)


def cannot_listen(host: str, port: int, error: OSError, purpose: str = "") -> str:
    """``cannot listen on HOST:PORT[ PURPOSE]: REASON`` for a server socket that could not be bound."""
    reason = "address already in use" if error.errno == errno.EADDRINUSE else (error.strerror or str(error))
    return f"cannot listen on {host or '*'}:{port}{' ' + purpose if purpose else ''}: {reason}"


def stop_on_signals(request_stop: Callable[[], None]) -> None:
    """SIGTERM or SIGINT asks for a clean stop; a second one ends the process at once."""
    loop = asyncio.get_running_loop()
    signals = (signal.SIGTERM, signal.SIGINT)

    def first(signum: signal.Signals) -> None:
        logging.getLogger(__name__).info("%s received: stopping (send it again to exit at once)", signum.name)
        for other in signals:
            loop.remove_signal_handler(other)
            signal.signal(other, signal.SIG_DFL)
        request_stop()

    for signum in signals:
        loop.add_signal_handler(signum, first, signum)


def tolerate_closed_stdout(command: Callable[[], int]) -> int:
    """Run a command whose output may be cut short by its reader (``explain-node | head``).

    A reader that went away is not an error of the command: the rest of the output is
    dropped silently (no ``BrokenPipeError`` traceback) and the command's status kept.
    """
    try:
        status = command()
        sys.stdout.flush()
    except BrokenPipeError:
        # the interpreter flushes stdout once more at exit: point it at /dev/null first
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 0
    return status


def read_documents(path: str, stdin: TextIO | None = None) -> list[Any]:
    """The YAML (or JSON) documents of a file (``-``: stdin), empty ones left out; ValueError
    with a one-line reason when it cannot be read or parsed."""
    if path == "-":
        text = (stdin or sys.stdin).read()
    else:
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise ValueError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        return [doc for doc in yaml.safe_load_all(text) if doc is not None]
    except yaml.YAMLError as exc:
        raise ValueError(f"{path}: not valid YAML/JSON: {exc}") from None


#: component-base's leader-election timings (kube-scheduler's and Koordinator's defaults)
LEASE_DURATION_S = 15.0
RENEW_DEADLINE_S = 10.0
RETRY_PERIOD_S = 2.0


def add_leader_election_flags(parser: argparse.ArgumentParser, lease_namespace: str, lease_name: str) -> None:
    """component-base's ``--leader-elect*`` flags. Their defaults are None so that a config
    file's ``leaderElection`` holds unless a flag is given (:func:`leader_election_flags`)."""
    add = parser.add_argument
    add("--leader-elect", type=bool_flag, metavar="BOOL", help="contend for the lease before working (true)")
    add("--leader-elect-lease-duration", type=duration_flag, metavar="D", help=f"({LEASE_DURATION_S:g}s)")
    add("--leader-elect-renew-deadline", type=duration_flag, metavar="D", help=f"({RENEW_DEADLINE_S:g}s)")
    add("--leader-elect-retry-period", type=duration_flag, metavar="D", help=f"({RETRY_PERIOD_S:g}s)")
    add("--leader-elect-resource-lock", choices=("leases",), default="leases")
    add("--leader-elect-resource-name", metavar="NAME", help=f"({lease_name})")
    add("--leader-elect-resource-namespace", metavar="NS", help=f"({lease_namespace})")


def leader_election_flags(args: argparse.Namespace) -> dict[str, Any]:
    """The leader-election flags given, by process-option name (``lease_duration_s`` ...)."""
    flags = {
        "leader_elect": args.leader_elect,
        "lease_namespace": args.leader_elect_resource_namespace,
        "lease_name": args.leader_elect_resource_name,
        "lease_duration_s": args.leader_elect_lease_duration,
        "renew_deadline_s": args.leader_elect_renew_deadline,
        "retry_period_s": args.leader_elect_retry_period,
    }
    return {k: v for k, v in flags.items() if v is not None}
