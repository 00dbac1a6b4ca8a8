"""The ``koord-runtime-proxy`` command: upstream's flags and socket paths.

Point the kubelet at the proxy (``--container-runtime-endpoint=unix:///var/run/
koord-runtimeproxy/runtimeproxy.sock``); the proxy forwards to containerd and asks the hook
servers of ``--hook-server-config-dir`` (the koordlet announces itself there) around the
calls that create and resize pods. Only containerd (CRI) backends are supported: dockershim
is gone from Kubernetes, so ``--backend-runtime-mode=Docker`` is refused.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from koordinator import __version__
from koordinator.api import runtimehook as rh
from koordinator.api.features import KOORDLET_FEATURES
from koordinator.cli import component_parser, fail, parse_component_args, run_loop, stop_on_signals

PROG = "koord-runtime-proxy"
DEFAULT_ENDPOINT = "/var/run/koord-runtimeproxy/runtimeproxy.sock"
DEFAULT_CONTAINERD = "/var/run/containerd/containerd.sock"
DEFAULT_HOOK_SERVER_CONFIG_DIR = "/etc/runtime/hookserver.d"

log = logging.getLogger(__name__)


def _path(endpoint: str) -> Path:
    return Path(endpoint.removeprefix("unix://"))


def main(argv: Sequence[str] | None = None) -> int:
    parser = component_parser(
        PROG,
        "Koordinator's CRI proxy: the kubelet talks to it, it talks to containerd, and the koordlet's "
        "runtime hooks run around the calls that create and resize pods.",
        KOORDLET_FEATURES,
        f"{PROG} {__version__}",
    )
    parser.add_argument(
        "--koord-runtimeproxy-endpoint", default=DEFAULT_ENDPOINT, help="the socket the proxy serves"
    )
    parser.add_argument(
        "--remote-runtime-service-endpoint", default=DEFAULT_CONTAINERD, help="the runtime's CRI socket"
    )
    parser.add_argument(
        "--remote-image-service-endpoint",
        default=DEFAULT_CONTAINERD,
        help="the runtime's image service socket",
    )
    parser.add_argument(
        "--backend-runtime-mode", default="Containerd", help="backend container engine (Containerd)"
    )
    parser.add_argument(
        "--runtime-hook-server-key",
        default=rh.SKIP_HOOK_SERVER_KEY,
        help="pods annotated with this key (and the value below) bypass the hook servers",
    )
    parser.add_argument("--runtime-hook-server-val", default=rh.SKIP_HOOK_SERVER_VALUE)
    parser.add_argument(
        "--hook-server-config-dir",
        default=DEFAULT_HOOK_SERVER_CONFIG_DIR,
        help="where hook servers announce themselves (one JSON file each)",
    )
    args = parse_component_args(parser, argv)
    if args.backend_runtime_mode != "Containerd":
        fail(PROG, f"--backend-runtime-mode={args.backend_runtime_mode} is not supported (only Containerd)")
    try:
        from koordlet.runtimeproxy.hookservers import HookServers
        from koordlet.runtimeproxy.server import RuntimeProxy
    except ImportError as exc:
        fail(PROG, f"grpcio is required (pip install 'koordinator-py[runtimeproxy]'): {exc}")
    proxy = RuntimeProxy(
        _path(args.koord_runtimeproxy_endpoint),
        args.remote_runtime_service_endpoint,
        args.remote_image_service_endpoint,
        HookServers(Path(args.hook_server_config_dir)),
        skip=(args.runtime_hook_server_key, args.runtime_hook_server_val),
    )

    async def serve() -> int:
        stop = asyncio.Event()
        stop_on_signals(stop.set)
        try:
            await proxy.start()
        except (OSError, RuntimeError) as exc:
            log.error("cannot serve on %s: %s", args.koord_runtimeproxy_endpoint, exc)
            return 1
        try:
            await stop.wait()
        finally:
            await proxy.stop()
        return 0

    return run_loop(serve())


if __name__ == "__main__":
    sys.exit(main())
