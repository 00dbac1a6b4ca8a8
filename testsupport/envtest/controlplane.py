"""Start, stop, kill and restart etcd and kube-apiserver on loopback.

The processes run in their own process groups, log into the control plane's work
directory and are stopped in reverse order. A startup failure raises
:class:`ControlPlaneError` carrying the tail of the failed process's log.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

import yaml

from testsupport.envtest.certs import Credentials, generate_credentials

ENV_BIN = "KOORD_ENVTEST_BIN"
_READY_TIMEOUT_S = 90.0
_STOP_TIMEOUT_S = 15.0

#: The default admission plug-ins stay on. ServiceAccount admission is switched off because no
#: controller-manager runs to create each namespace's ``default`` service account (the same
#: choice controller-runtime's envtest makes).
DISABLED_ADMISSION_PLUGINS = ("ServiceAccount",)
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"


class ControlPlaneError(RuntimeError):
    """etcd or kube-apiserver did not start, or the binaries are missing."""


def find_binaries(directory: str | os.PathLike[str] | None = None) -> Path:
    """The directory holding ``etcd`` and ``kube-apiserver`` (argument, else ``$KOORD_ENVTEST_BIN``)."""
    raw = directory if directory is not None else os.environ.get(ENV_BIN)
    if not raw:
        raise ControlPlaneError(f"no envtest binaries: set {ENV_BIN} (bash hack/envtest.sh prints it)")
    path = Path(raw)
    missing = [b for b in ("etcd", "kube-apiserver") if not os.access(path / b, os.X_OK)]
    if missing:
        raise ControlPlaneError(f"{path}: missing executable(s) {', '.join(missing)}")
    return path


ENVTEST_SCRIPT = Path(__file__).resolve().parents[2] / "hack" / "envtest.sh"


def provision_binaries() -> Path:
    """``$KOORD_ENVTEST_BIN`` when set, else what ``hack/envtest.sh`` builds or finds in its cache.

    An empty ``$KOORD_ENVTEST_BIN`` means an earlier provisioning step (``make test``) already
    failed; it is not retried.
    """
    given = os.environ.get(ENV_BIN)
    if given is not None:
        if not given:
            raise ControlPlaneError(f"{ENV_BIN} is empty: hack/envtest.sh failed earlier (see its output)")
        return find_binaries(given)
    if not ENVTEST_SCRIPT.is_file():
        raise ControlPlaneError(f"no {ENV_BIN} and no {ENVTEST_SCRIPT} to build the binaries with")
    try:
        done = subprocess.run(
            ["bash", str(ENVTEST_SCRIPT)], capture_output=True, text=True, check=False, timeout=3600
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ControlPlaneError(f"hack/envtest.sh could not run: {exc}") from exc
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise ControlPlaneError(f"hack/envtest.sh failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return find_binaries(lines[-1])


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


_LIVE: set[_Process] = set()


@atexit.register
def _kill_leftovers() -> None:
    """Children must not outlive an interpreter that exits without stopping them."""
    for process in list(_LIVE):
        process.kill()


class _Process:
    """One child process in its own process group, logging to a file."""

    def __init__(self, name: str, argv: Sequence[str], log: Path) -> None:
        self.name = name
        self.argv = list(argv)
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                self.argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        _LIVE.add(self)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def check_alive(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise ControlPlaneError(
                f"{self.name} exited with status {self.proc.returncode}; log tail:\n{_tail(self.log)}"
            )

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        _LIVE.discard(self)
        if self.proc is None:
            return
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self.proc = None

    def stop(self) -> None:
        _LIVE.discard(self)
        if self.proc is None:
            return
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.kill()
                return
        self.proc.wait()
        self.proc = None


class ApiServerProcess:
    """One kube-apiserver; several may share one etcd."""

    def __init__(
        self,
        binary: Path,
        workdir: Path,
        creds: Credentials,
        etcd_url: str,
        extra_args: Sequence[str] = (),
        *,
        port: int = 0,
        disabled_admission_plugins: Sequence[str] = DISABLED_ADMISSION_PLUGINS,
    ) -> None:
        self.port = port or free_port()
        self.creds = creds
        self.url = f"https://127.0.0.1:{self.port}"
        argv = [
            str(binary),
            f"--etcd-servers={etcd_url}",
            "--advertise-address=127.0.0.1",
            "--bind-address=127.0.0.1",
            f"--secure-port={self.port}",
            f"--cert-dir={workdir}",
            f"--tls-cert-file={creds.serving_cert}",
            f"--tls-private-key-file={creds.serving_key}",
            f"--client-ca-file={creds.ca_cert}",
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
            f"--service-account-key-file={creds.sa_public_key}",
            f"--service-account-signing-key-file={creds.sa_private_key}",
            "--service-cluster-ip-range=10.96.0.0/16",
            "--authorization-mode=RBAC",
            f"--disable-admission-plugins={','.join(disabled_admission_plugins)}",
            "--allow-privileged=true",
            "--profiling=false",
            "--v=1",
            *extra_args,
        ]
        self._process = _Process(
            f"kube-apiserver:{self.port}", argv, workdir / f"kube-apiserver-{self.port}.log"
        )

    @property
    def log(self) -> Path:
        return self._process.log

    @property
    def pid(self) -> int:
        """The process id while running, else 0."""
        proc = self._process.proc
        return proc.pid if proc is not None and proc.poll() is None else 0

    @property
    def running(self) -> bool:
        return self._process.running

    def _ssl_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.creds.ca_cert))
        ctx.load_cert_chain(str(self.creds.admin_cert), str(self.creds.admin_key))
        return ctx

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/readyz", context=self._ssl_context(), timeout=5) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def start(self, timeout: float = _READY_TIMEOUT_S) -> None:
        self._process.start()
        deadline = time.monotonic() + timeout
        while not self.ready():
            self._process.check_alive()
            if time.monotonic() > deadline:
                self._process.kill()
                raise ControlPlaneError(
                    f"kube-apiserver not ready after {timeout:.0f}s; log tail:\n{_tail(self.log)}"
                )
            time.sleep(0.25)

    def kill(self) -> None:
        self._process.kill()

    def stop(self) -> None:
        self._process.stop()


class ControlPlane:
    """etcd plus one kube-apiserver, with an admin kubeconfig.

    Use as a context manager, or call :meth:`start` and :meth:`stop`. ``workdir`` defaults
    to a fresh temporary directory that :meth:`stop` removes.
    """

    def __init__(
        self,
        binaries: str | os.PathLike[str] | None = None,
        workdir: Path | None = None,
        apiserver_args: Sequence[str] = (),
        *,
        port: int = 0,
        disabled_admission_plugins: Sequence[str] = DISABLED_ADMISSION_PLUGINS,
        extra_serving_ips: Sequence[str] = (),
    ) -> None:
        self.bin = find_binaries(binaries)
        #: the main apiserver's port (0: a free one); further apiservers always take a free one
        self.port = port
        self.disabled_admission_plugins = tuple(disabled_admission_plugins)
        self._own_workdir = workdir is None
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="koord-envtest-"))
        self.apiserver_args = list(apiserver_args)
        self.creds = generate_credentials(self.workdir / "pki", extra_serving_ips)
        self.etcd_url = ""
        self._etcd: _Process | None = None
        self.apiserver: ApiServerProcess | None = None
        self._extra: list[ApiServerProcess] = []
        self.kubeconfig = self.workdir / "admin.kubeconfig"

    # --- lifecycle ---------------------------------------------------------------

    def _start_etcd(self) -> None:
        client, peer = free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{client}"
        argv = [
            str(self.bin / "etcd"),
            "--name=envtest",
            f"--data-dir={self.workdir / 'etcd'}",
            f"--listen-client-urls={self.etcd_url}",
            f"--advertise-client-urls={self.etcd_url}",
            f"--listen-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-cluster=envtest=http://127.0.0.1:{peer}",
            "--unsafe-no-fsync=true",
            "--quota-backend-bytes=8589934592",
            "--log-level=warn",
        ]
        self._etcd = _Process("etcd", argv, self.workdir / "etcd.log")
        self._etcd.start()
        deadline = time.monotonic() + _READY_TIMEOUT_S
        while True:
            try:
                with urllib.request.urlopen(f"{self.etcd_url}/health", timeout=2) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            self._etcd.check_alive()
            if time.monotonic() > deadline:
                raise ControlPlaneError(
                    f"etcd not healthy after {_READY_TIMEOUT_S:.0f}s:\n{_tail(self._etcd.log)}"
                )
            time.sleep(0.1)

    def start(self) -> ControlPlane:
        try:
            self._start_etcd()
            self.apiserver = self.new_apiserver(port=self.port)
            self.apiserver.start()
            self._write_kubeconfig()
        except BaseException:
            self.stop()
            raise
        return self

    def new_apiserver(self, port: int = 0) -> ApiServerProcess:
        """A further kube-apiserver on the same etcd (not started)."""
        return ApiServerProcess(
            self.bin / "kube-apiserver",
            self.workdir,
            self.creds,
            self.etcd_url,
            self.apiserver_args,
            port=port,
            disabled_admission_plugins=self.disabled_admission_plugins,
        )

    def start_extra_apiserver(self) -> ApiServerProcess:
        """Start and return another kube-apiserver sharing this etcd; :meth:`stop` stops it too."""
        server = self.new_apiserver()
        self._extra.append(server)
        server.start()
        return server

    def stop(self) -> None:
        for server in [*self._extra, *([self.apiserver] if self.apiserver else [])]:
            server.stop()
        self._extra.clear()
        if self._etcd is not None:
            self._etcd.stop()
            self._etcd = None
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def pids(self) -> set[int]:
        """The process ids of the running etcd and apiservers."""
        running = [self._etcd.proc if self._etcd is not None else None]
        running += [s._process.proc for s in [*self._extra, *([self.apiserver] if self.apiserver else [])]]
        return {proc.pid for proc in running if proc is not None and proc.poll() is None}

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # --- faults ------------------------------------------------------------------

    def kill_apiserver(self) -> None:
        """SIGKILL the main apiserver; its port stays reserved for :meth:`restart_apiserver`."""
        if self.apiserver is None:
            raise ControlPlaneError("control plane not started")
        self.apiserver.kill()

    def restart_apiserver(self) -> None:
        """Start the main apiserver again on its port (killing it first if it still runs)."""
        if self.apiserver is None:
            raise ControlPlaneError("control plane not started")
        self.apiserver.kill()
        self.apiserver.start()

    # --- access ------------------------------------------------------------------

    @property
    def url(self) -> str:
        if self.apiserver is None:
            raise ControlPlaneError("control plane not started")
        return self.apiserver.url

    def _write_kubeconfig(self) -> None:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "envtest",
                    "cluster": {"server": self.url, "certificate-authority": str(self.creds.ca_cert)},
                }
            ],
            "users": [
                {
                    "name": "admin",
                    "user": {
                        "client-certificate": str(self.creds.admin_cert),
                        "client-key": str(self.creds.admin_key),
                    },
                }
            ],
            "contexts": [{"name": "envtest", "context": {"cluster": "envtest", "user": "admin"}}],
            "current-context": "envtest",
        }
        self.kubeconfig.write_text(yaml.safe_dump(config))
