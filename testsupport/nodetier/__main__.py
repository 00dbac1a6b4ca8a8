"""``make cluster`` / ``make cluster-down``: one local single-node cluster kept running.

    python -m testsupport.nodetier up            start it (if not running) and print its KUBECONFIG
    python -m testsupport.nodetier status        say whether it runs
    python -m testsupport.nodetier load ARCHIVE  import an image archive (make image) into its containerd
    python -m testsupport.nodetier down          stop it and remove what it left

The running cluster is recorded in ``$TMPDIR/koordinator-cluster.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from testsupport.nodetier.cluster import Node, NodeTierError, scratch_root, sweep

STATE = "koordinator-cluster.json"


def _state_file() -> Path:
    return scratch_root() / STATE


def _running() -> dict[str, Any] | None:
    try:
        state: dict[str, Any] = json.loads(_state_file().read_text())
    except (OSError, ValueError):
        return None
    if not Path(f"/proc/{state.get('pid', 0)}").exists() or not Path(state.get("kubeconfig", "")).exists():
        return None
    return state


def _print_usage(state: dict[str, Any]) -> None:
    print(f"node {state['node']} is Ready; its apiserver is {state['url']}")
    print("use it with:")
    print(f"  export KUBECONFIG={state['kubeconfig']}")


def up(name: str) -> int:
    state = _running()
    if state is None:
        node = Node(name, detach=True)
        try:
            node.start()
        except NodeTierError as exc:
            print(f"cluster: {exc}", file=sys.stderr)
            return 1
        assert node.spec is not None
        state = {
            "node": name,
            "pid": node.pid,
            "url": node.url,
            "kubeconfig": str(node.kubeconfig),
            "ctr": node.spec.ctr,
        }
        _state_file().write_text(json.dumps(state))
    _print_usage(state)
    return 0


def down(timeout: float = 60.0) -> int:
    state = _running()
    if state is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(state["pid"], signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while Path(f"/proc/{state['pid']}").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        if Path(f"/proc/{state['pid']}").exists():
            os.kill(state["pid"], signal.SIGKILL)  # takes every process of the node with it
            time.sleep(1)
    _state_file().unlink(missing_ok=True)
    cleaned = sweep()
    print(f"cluster stopped; cleaned up {len(cleaned)} node(s)" if state else "no cluster was running")
    return 0


def load(archive: str) -> int:
    state = _running()
    if state is None:
        print("no cluster is running (make cluster starts one)", file=sys.stderr)
        return 1
    done = subprocess.run([*state["ctr"], "images", "import", "--all-platforms", archive], check=False)
    return done.returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m testsupport.nodetier", description=__doc__.split("\n")[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    start = sub.add_parser("up", help="start the cluster and print its KUBECONFIG")
    start.add_argument("--name", default="koord-node", help="the Node's name")
    sub.add_parser("down", help="stop the cluster")
    image = sub.add_parser("load", help="import an image archive into the node's containerd")
    image.add_argument("archive", help="the archive make image printed")
    sub.add_parser("status", help="say whether the cluster runs")
    args = parser.parse_args(argv)
    if args.command == "up":
        return up(args.name)
    if args.command == "down":
        return down()
    if args.command == "load":
        return load(args.archive)
    state = _running()
    if state is None:
        print("no cluster is running")
        return 1
    _print_usage(state)
    return 0


if __name__ == "__main__":
    sys.exit(main())
