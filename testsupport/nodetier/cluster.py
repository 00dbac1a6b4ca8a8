"""The host side of a node: start it in fresh namespaces, wait for it, run host processes on
its network, stop it, and clean up after nodes that crashed.

A node is a whole single-node Kubernetes (see :mod:`testsupport.nodetier.node`). Its
apiserver answers at ``https://127.0.0.1:<port>`` both on the host (through a relay) and in
the node. Several nodes may run at once: each has its own scratch directory
``$TMPDIR/koord-node-<id>``, cgroup root ``/koord-node-<id>`` and namespaces. A node's
scratch directory holds ``lock``, flock-ed for as long as the node lives; :func:`sweep`
removes the cgroups and scratch directories of nodes whose lock is free (crashed ones).
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType

from testsupport.envtest.controlplane import _tail, provision_binaries
from testsupport.nodetier import isolation
from testsupport.nodetier.spec import CGROUP_PREFIX, NodeSpec

ENV_BIN = "KOORD_NODETIER_BIN"
NODE_TIER_SCRIPT = Path(__file__).resolve().parents[2] / "hack" / "node-tier.sh"
REPO_ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 240.0
STOP_TIMEOUT_S = 60.0
_PR_SET_PDEATHSIG = 1
#: the node's PID 1 in fresh pid, mount and network namespaces, killed if unshare dies
UNSHARE = (
    "unshare",
    "--pid",
    "--fork",
    "--kill-child",
    "--mount-proc",
    "--mount",
    "--net",
    "--propagation",
    "slave",
)


class NodeTierError(RuntimeError):
    """The node tier's binaries are missing, or a node did not start."""


def provision_node_binaries() -> Path:
    """``$KOORD_NODETIER_BIN`` when set, else what ``hack/node-tier.sh`` builds or has cached.

    An empty ``$KOORD_NODETIER_BIN`` means an earlier provisioning step (``make test``)
    already failed; it is not retried.
    """
    given = os.environ.get(ENV_BIN)
    if given is None:
        done = subprocess.run(["bash", str(NODE_TIER_SCRIPT)], capture_output=True, text=True, check=False)
        lines = done.stdout.strip().splitlines()
        if done.returncode != 0 or not lines:
            raise NodeTierError(f"hack/node-tier.sh failed ({done.returncode}):\n{done.stderr[-4000:]}")
        given = lines[-1]
    if not given:
        raise NodeTierError(f"{ENV_BIN} is empty: hack/node-tier.sh failed earlier (see its output)")
    path = Path(given)
    missing = [b for b in ("kubelet", "containerd", "runc") if not os.access(path / "bin" / b, os.X_OK)]
    if missing:
        raise NodeTierError(f"{path}: missing executable(s) {', '.join(missing)}")
    return path


def scratch_root() -> Path:
    return Path(tempfile.gettempdir())


def _die_with_parent() -> None:
    ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _lock(path: Path) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return fd


def _locked(path: Path) -> bool:
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def sweep() -> list[str]:
    """Remove the cgroup roots and scratch directories of nodes that are gone; what is
    still held by a process is left. Returns the ids of the nodes cleaned up."""
    ids = {
        directory.name.removeprefix(CGROUP_PREFIX)
        for hierarchy in isolation.hierarchies()
        for directory in hierarchy.glob(f"{CGROUP_PREFIX}*")
        if directory.is_dir()
    }
    ids |= {p.name.removeprefix(CGROUP_PREFIX) for p in scratch_root().glob(f"{CGROUP_PREFIX}*")}
    cleaned = []
    for node_id in sorted(ids):
        workdir = scratch_root() / f"{CGROUP_PREFIX}{node_id}"
        root = f"/{CGROUP_PREFIX}{node_id}"
        being_made = workdir.exists() and not (workdir / "lock").exists()
        if being_made or _locked(workdir / "lock") or isolation.busy(root):
            continue
        isolation.remove_cgroup_root(root, timeout=0)
        shutil.rmtree(workdir, ignore_errors=True)
        cleaned.append(node_id)
    return cleaned


class Node:
    """One node. ``detach`` leaves it running when this process exits (``make cluster``)."""

    def __init__(
        self,
        name: str = "koord-node",
        *,
        node_bin: Path | None = None,
        envtest_bin: Path | None = None,
        detach: bool = False,
    ) -> None:
        self.name = name
        self.node_bin = node_bin
        self.envtest_bin = envtest_bin
        self.detach = detach
        self.id = uuid.uuid4().hex[:10]
        self.workdir = scratch_root() / f"{CGROUP_PREFIX}{self.id}"
        self.spec: NodeSpec | None = None
        self._unshare: subprocess.Popen[bytes] | None = None
        self._lock_fd = -1
        self._host_procs: list[subprocess.Popen[bytes]] = []
        #: the node's PID 1 as the host sees it
        self.pid = 0

    # --- start ---------------------------------------------------------------------------

    def start(self, timeout: float = START_TIMEOUT_S) -> Node:
        sweep()
        node_bin = self.node_bin or provision_node_binaries()
        envtest_bin = self.envtest_bin or provision_binaries()
        self.workdir.mkdir(mode=0o700)
        self._lock_fd = _lock(self.workdir / "lock")
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        self.spec = NodeSpec(
            name=self.name,
            workdir=str(self.workdir),
            node_bin=str(node_bin),
            envtest_bin=str(envtest_bin),
            api_port=listener.getsockname()[1],
            cgroup_root=f"/{CGROUP_PREFIX}{self.id}",
            relay_fd=listener.fileno(),
            kube_proxy=shutil.which("nft") is not None,
        )
        argv = [*UNSHARE, sys.executable, "-m", "testsupport.nodetier.node", str(self.spec.save())]
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
        }
        with (self.workdir / "node.log").open("ab") as log:
            self._unshare = subprocess.Popen(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                pass_fds=(listener.fileno(), self._lock_fd),
                env=env,
                start_new_session=True,
                preexec_fn=None if self.detach else _die_with_parent,
            )
        listener.close()
        try:
            self._wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self, timeout: float) -> None:
        assert self.spec is not None
        assert self._unshare is not None
        deadline = time.monotonic() + timeout
        while not self.spec.ready_file.exists():
            if self.spec.failed_file.exists() or self._unshare.poll() is not None:
                time.sleep(0.2)  # let the failure note be written in full
                reason = self.spec.failed_file.read_text() if self.spec.failed_file.exists() else ""
                raise NodeTierError(
                    f"node {self.name} did not start: {reason or 'its PID 1 exited'}\n"
                    f"--- node.log ---\n{_tail(self.workdir / 'node.log')}"
                )
            if time.monotonic() > deadline:
                raise NodeTierError(
                    f"node {self.name} not ready after {timeout:.0f}s\n{_tail(self.workdir / 'node.log')}"
                )
            time.sleep(0.1)
        self.pid = self._node_pid()

    def _node_pid(self) -> int:
        """The node's PID 1 (unshare's child), 0 when there is none."""
        if self._unshare is None:
            return 0
        pid = self._unshare.pid
        with contextlib.suppress(OSError, ValueError, IndexError):
            return int(Path(f"/proc/{pid}/task/{pid}/children").read_text().split()[0])
        return 0

    # --- use -----------------------------------------------------------------------------

    @property
    def url(self) -> str:
        assert self.spec is not None
        return f"https://127.0.0.1:{self.spec.api_port}"

    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig (``system:masters``), valid on the host and in the node."""
        assert self.spec is not None
        return self.spec.admin_kubeconfig

    @property
    def netns(self) -> Path:
        return Path(f"/proc/{self.pid}/ns/net")

    @property
    def cgroup_root(self) -> str:
        assert self.spec is not None
        return self.spec.cgroup_root

    def koordlet_argv(self, *extra: str) -> list[str]:
        """A koordlet for this node: its kubeconfig, its kubepods root, the NRI socket of its
        containerd (not the host's), 1 s kubelet syncs; ``extra`` flags appended."""
        assert self.spec is not None
        return [
            sys.executable, "-m", "koordlet",
            "--kubeconfig", str(self.kubeconfig),
            "--cgroup-kube-dir", f"{self.cgroup_root.strip('/')}/kubepods",
            "--addr", "127.0.0.1:9316",
            "--kubelet-sync-interval", "1s",
            "--var-run-root-dir", str(self.spec.dir),
            "--tsdb-path", str(self.spec.dir / "metric-data"),
            *extra,
        ]  # fmt: skip

    def popen(
        self, argv: Sequence[str], log: Path, env: Mapping[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        """A host process on the node's network (as ``hostNetwork: true``), host pid and
        mount namespaces; stopped with the node if still running."""
        enter = isolation.enter_netns(self.netns)

        def prepare() -> None:
            enter()
            if not self.detach:
                _die_with_parent()

        with log.open("ab") as out:
            proc = subprocess.Popen(
                list(argv),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=dict(env) if env is not None else None,
                start_new_session=True,
                preexec_fn=prepare,
            )
        self._host_procs.append(proc)
        return proc

    def run(self, argv: Sequence[str], timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        """Run a command to completion on the node's network (``curl`` a pod IP, ``nft``)."""
        return subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            check=False,
            timeout=timeout,
            preexec_fn=isolation.enter_netns(self.netns),
        )

    def use_runtime_endpoint(self, endpoint: Path | None, timeout: float = 60.0) -> None:
        """Restart the kubelet talking to ``endpoint`` (koord-runtime-proxy's socket), or to
        containerd again with None; returns once the new kubelet runs."""
        self._kubelet(str(endpoint or ""), timeout)

    def stop_kubelet(self, timeout: float = 60.0) -> None:
        """Stop the kubelet (its pods go on running) until :meth:`use_runtime_endpoint`."""
        self._kubelet("none", timeout)

    def _kubelet(self, endpoint: str, timeout: float) -> None:
        assert self.spec is not None
        (self.spec.dir / "kubelet-runtime-endpoint").write_text(endpoint)
        self._signal_and_wait(signal.SIGUSR2, "kubelet-restarts", timeout)

    def restart_containerd(self, timeout: float = 60.0) -> None:
        """Restart the node's containerd (its containers go on running) and wait until it
        answers again."""
        self._signal_and_wait(signal.SIGUSR1, "containerd-restarts", timeout)

    def _signal_and_wait(self, signum: signal.Signals, counter_name: str, timeout: float) -> None:
        """Signal the node's PID 1 and wait until it counted the restart in ``counter_name``."""
        assert self.spec is not None
        counter = self.spec.dir / counter_name

        def restarts() -> int:
            with contextlib.suppress(OSError, ValueError):
                return int(counter.read_text())
            return 0

        before = restarts()
        if self._unshare is None or self._unshare.poll() is not None:
            failed = self.spec.failed_file
            why = failed.read_text() if failed.exists() else _tail(self.workdir / "node.log")
            raise NodeTierError(f"the node is gone:\n{why}")
        os.kill(self.pid, signum)
        deadline = time.monotonic() + timeout
        while restarts() == before:
            if time.monotonic() > deadline:
                raise NodeTierError(
                    f"no restart after {signum.name} in {timeout:.0f}s\n{_tail(self.workdir / 'node.log')}"
                )
            time.sleep(0.1)

    def import_image(self, archive: Path) -> None:
        """Import an image archive (docker or OCI) into the node's containerd."""
        assert self.spec is not None
        argv = [*self.spec.ctr, "images", "import", "--all-platforms", str(archive)]
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise NodeTierError(f"ctr images import {archive}: {done.stderr.strip()[-1000:]}")

    # --- stop ----------------------------------------------------------------------------

    def crash(self) -> None:
        """SIGKILL the node's PID 1, as a crash would: its processes die with the pid
        namespace, its empty cgroups and scratch directory stay for :func:`sweep`."""
        self._release()
        pid = self._node_pid()
        if pid:
            os.kill(pid, signal.SIGKILL)
        if self._unshare is not None:
            self._unshare.wait(STOP_TIMEOUT_S)
            self._unshare = None

    def _release(self) -> None:
        for proc in self._host_procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        self._host_procs.clear()
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1

    def stop(self) -> None:
        self._release()  # the node's PID 1 holds its own copy of the lock
        if self._unshare is not None:
            pid = self._node_pid()
            if pid:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
            try:
                self._unshare.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self._unshare.kill()  # --kill-child takes the node's PID 1 (and so all) along
                self._unshare.wait()
            self._unshare = None
        if self.spec is not None:
            isolation.remove_cgroup_root(self.spec.cgroup_root)
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> Node:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
