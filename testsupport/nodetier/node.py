"""PID 1 of one node: etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
containerd, the kubelet and kube-proxy, inside the node's own pid, mount and network namespaces.

Started by :class:`testsupport.nodetier.cluster.Node` as
``unshare --pid --fork --mount-proc --mount --net --propagation slave python -m
testsupport.nodetier.node SPEC.json``. Because it is PID 1 of its pid namespace, every
process of the node (daemons, shims, containers) dies when it exits, crash or not; its
mounts die with the mount namespace and its links with the network namespace. What it
leaves on the host is the scratch directory and empty cgroups, which it removes itself on
a clean stop and :func:`testsupport.nodetier.cluster.sweep` removes after a crash.
SIGUSR1 restarts containerd; SIGUSR2 restarts the kubelet on the runtime endpoint the file
``kubelet-runtime-endpoint`` names (koord-runtime-proxy's socket; empty: containerd's).

It writes ``ready.json`` once the node is Ready (its taints cleared by the node lifecycle
controller, the ``default`` service account made) and ``failed.txt`` if it cannot get
there; SIGTERM or SIGINT stops it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from testsupport.envtest.certs import client_certificate
from testsupport.envtest.controlplane import ControlPlane, _Process, _tail
from testsupport.nodetier import components, isolation
from testsupport.nodetier.relay import Relay
from testsupport.nodetier.spec import NODE_IP, NodeSpec

READY_TIMEOUT_S = 180.0
#: what the apiserver audits: the requests of Koordinator's components as the chart installs
#: them (their ServiceAccounts), so that a test can hold each RBAC grant against its use
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {"level": "Metadata", "userGroups": ["system:serviceaccounts:koordinator-system"]},
        {"level": "None"},
    ],
}
IMAGES = ("pause.tar", "busybox.tar")


class NodeStartError(RuntimeError):
    """A daemon of the node did not come up."""


class NodeMain:
    def __init__(self, spec: NodeSpec) -> None:
        self.spec = spec
        self.started = time.monotonic()
        self.timings: dict[str, float] = {}
        self.procs: list[_Process] = []
        self.plane: ControlPlane | None = None
        self.relay: Relay | None = None
        self.stopping = False
        #: set by SIGUSR1: restart containerd (``Node.restart_containerd``)
        self.restart_runtime = False
        #: set by SIGUSR2: restart the kubelet (``Node.use_runtime_endpoint``)
        self.restart_kubelet_requested = False
        self.kubelet_kubeconfig: Path | None = None
        self._ssl: ssl.SSLContext | None = None

    # --- helpers -------------------------------------------------------------------------

    def mark(self, name: str) -> None:
        self.timings[name] = round(time.monotonic() - self.started, 2)
        print(f"[{self.timings[name]:7.2f}s] {name}", flush=True)

    def start(self, name: str, argv: list[str]) -> _Process:
        process = _Process(name, argv, self.spec.dir / "logs" / f"{name}.log")
        process.start()
        self.procs.append(process)
        return process

    def wait(self, what: str, ready: Callable[[], object], timeout: float = READY_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            if self.stopping:
                raise NodeStartError(f"stopped while waiting for {what}")
            for process in self.procs:
                process.check_alive()
            if time.monotonic() > deadline:
                raise NodeStartError(f"timed out after {timeout:.0f}s waiting for {what}")
            self.reap()
            time.sleep(0.1)

    def reap(self) -> None:
        owned = {p.proc.pid for p in self.procs if p.proc is not None}
        reap_orphans(owned | (self.plane.pids() if self.plane is not None else set()))

    def api_get(self, path: str) -> dict[str, Any] | None:
        assert self.plane is not None
        if self._ssl is None:
            creds = self.plane.creds
            self._ssl = ssl.create_default_context(cafile=str(creds.ca_cert))
            self._ssl.load_cert_chain(str(creds.admin_cert), str(creds.admin_key))
        try:
            with urllib.request.urlopen(self.plane.url + path, context=self._ssl, timeout=5) as response:
                body: dict[str, Any] = json.loads(response.read())
                return body
        except (urllib.error.URLError, OSError, ValueError):
            return None

    def ctr(self, *args: str) -> str:
        argv = [*self.spec.ctr, *args]
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            # every ctr call warns about cgroup v1 on stderr: only the status tells failure
            raise NodeStartError(f"ctr {' '.join(args)}: {done.stderr.strip()[-500:]}")
        return done.stdout

    # --- start ---------------------------------------------------------------------------

    def control_plane(self) -> None:
        spec = self.spec
        policy = spec.dir / "audit-policy.yaml"
        policy.write_text(json.dumps(AUDIT_POLICY))
        self.plane = ControlPlane(
            Path(spec.envtest_bin),
            workdir=spec.dir / "cp",
            port=spec.api_port,
            apiserver_args=[
                "--authorization-mode=Node",  # appended to RBAC: RBAC,Node
                f"--advertise-address={NODE_IP}",
                # logs and exec reach the kubelet at its node IP (its name does not resolve)
                "--kubelet-preferred-address-types=InternalIP",
                "--bind-address=0.0.0.0",
                "--enable-aggregator-routing=true",
                f"--audit-policy-file={policy}",
                f"--audit-log-path={spec.audit_log}",
                "--audit-log-maxsize=200",
                "--audit-log-maxbackup=1",
            ],
            disabled_admission_plugins=(),
            extra_serving_ips=(NODE_IP,),
        )
        # logs and exec: the apiserver shows the kubelet the admin certificate
        creds = self.plane.creds
        self.plane.apiserver_args += [
            f"--kubelet-client-certificate={creds.admin_cert}",
            f"--kubelet-client-key={creds.admin_key}",
        ]
        self.plane.start()
        self.mark("apiserver ready")

    def container_runtime(self) -> None:
        os.environ["PATH"] = components.path_with_node_bin(self.spec)
        self.containerd()
        for image in IMAGES:
            self.ctr("images", "import", "--all-platforms", str(self.spec.images / image))
        self.mark("images imported")

    def containerd(self) -> None:
        self.start("containerd", components.containerd_argv(self.spec))

        def answers() -> bool:
            if not self.spec.containerd_socket.exists():
                return False
            try:
                return "Server:" in self.ctr("version")
            except NodeStartError:
                return False

        self.wait("containerd", answers, 60)
        self.mark("containerd ready")

    def restart_kubelet(self) -> None:
        """Restart the kubelet on the runtime endpoint named in ``kubelet-runtime-endpoint``
        (empty or missing: containerd's socket; ``none``: leave it stopped); counts the
        restarts in ``kubelet-restarts``."""
        assert self.plane is not None
        assert self.kubelet_kubeconfig is not None
        self.restart_kubelet_requested = False
        named = self.spec.dir / "kubelet-runtime-endpoint"
        text = named.read_text().strip() if named.exists() else ""
        self._stop_daemon("kubelet")
        if text != "none":
            endpoint = Path(text) if text else None
            self.start(
                "kubelet",
                components.kubelet_argv(self.spec, self.plane.creds, self.kubelet_kubeconfig, endpoint),
            )
        self._count("kubelet-restarts")

    def restart_containerd(self) -> None:
        """Stop containerd (SIGTERM; its shims and containers go on) and start it again, as an
        upgrade would; counts the restarts in ``containerd-restarts``."""
        self.restart_runtime = False
        self._stop_daemon("containerd")
        self.containerd()
        self._count("containerd-restarts")

    def _stop_daemon(self, name: str) -> None:
        for process in [p for p in self.procs if p.name == name]:
            process.stop()
            self.procs.remove(process)

    def _count(self, counter_name: str) -> None:
        """One more restart in the file ``counter_name`` (``Node`` waits on it)."""
        counter = self.spec.dir / counter_name
        done = int(counter.read_text()) if counter.exists() else 0
        counter.write_text(str(done + 1))

    def kubelet(self) -> None:
        assert self.plane is not None
        creds, spec = self.plane.creds, self.spec
        cert, key = client_certificate(
            creds, f"system:node:{spec.name}", "system:nodes", spec.pki / "kubelet"
        )
        config = components.kubeconfig(
            spec.dir / "kubelet" / "kubeconfig", self.plane.url, creds.ca_cert, cert, key
        )
        isolation.make_cgroup_root(spec.cgroup_root)
        self.kubelet_kubeconfig = config
        self.start("kubelet", components.kubelet_argv(spec, creds, config))
        self.wait("the Node object", lambda: self.api_get(f"/api/v1/nodes/{spec.name}"))
        self.mark("node registered")

    def node_ready(self) -> bool:
        node = self.api_get(f"/api/v1/nodes/{self.spec.name}")
        if node is None:
            return False
        conditions = {c.get("type"): c.get("status") for c in node.get("status", {}).get("conditions", [])}
        taints = [t for t in node.get("spec", {}).get("taints") or [] if t.get("key", "").startswith("node.")]
        return conditions.get("Ready") == "True" and not taints

    def run_node(self) -> None:
        assert self.plane is not None
        self.start("kube-controller-manager", components.controller_manager_argv(self.spec, self.plane.creds))
        self.start("kube-scheduler", components.scheduler_argv(self.spec))
        self.container_runtime()
        self.kubelet()
        if self.spec.kube_proxy:
            self.start("kube-proxy", components.kube_proxy_argv(self.spec))
        self.wait("the Node Ready and untainted", self.node_ready)
        self.wait(
            "the default service account",
            lambda: self.api_get("/api/v1/namespaces/default/serviceaccounts/default"),
        )
        self.mark("node ready")

    def serve(self) -> None:
        spec = self.spec
        (spec.dir / "logs").mkdir(parents=True, exist_ok=True)
        isolation.shadow_host_paths(spec.dir)
        isolation.node_network()
        self.relay = Relay(socket.socket(fileno=spec.relay_fd), spec.api_port)
        self.relay.start()
        self.mark("namespaces ready")
        self.control_plane()
        self.run_node()
        node = self.api_get(f"/api/v1/nodes/{spec.name}") or {}
        spec.ready_file.write_text(
            json.dumps(
                {"timings": self.timings, "nodeInfo": node.get("status", {}).get("nodeInfo", {})}, indent=2
            )
        )
        while not self.stopping:
            if self.restart_runtime:
                self.restart_containerd()
            if self.restart_kubelet_requested:
                self.restart_kubelet()
            for process in self.procs:
                process.check_alive()
            self.reap()
            time.sleep(0.5)

    # --- stop ----------------------------------------------------------------------------

    def teardown(self) -> list[str]:
        """Stop the daemons, kill what they leave (shims, containers), remove the cgroups."""
        for process in reversed(self.procs):
            process.stop()
        keep = {os.getpid()}
        if self.plane is not None:
            keep |= self.plane.pids()
        kill_all_but(keep)
        if self.plane is not None:
            self.plane.stop()
        reap_orphans(set())
        if self.relay is not None:
            self.relay.close()
        left = isolation.remove_cgroup_root(self.spec.cgroup_root)
        self.mark("stopped")
        return left

    def run(self) -> int:
        def on_signal(_signum: int, _frame: object) -> None:
            self.stopping = True

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        signal.signal(signal.SIGUSR1, lambda _signum, _frame: setattr(self, "restart_runtime", True))
        signal.signal(
            signal.SIGUSR2, lambda _signum, _frame: setattr(self, "restart_kubelet_requested", True)
        )
        failure = ""
        try:
            self.serve()
        except Exception as exc:  # any failure: say why, then take everything down
            if not self.stopping:
                failure = f"{type(exc).__name__}: {exc}"
                for process in self.procs:
                    failure += f"\n--- {process.name} log tail ---\n{_tail(process.log, 15)}"
                self.spec.failed_file.write_text(failure)
        finally:
            left = self.teardown()
            if left:
                print(f"cgroups left behind: {left}", file=sys.stderr, flush=True)
        return 1 if failure else 0


def _children_of_init() -> list[tuple[int, str]]:
    """(pid, state) of every process of this pid namespace but PID 1."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or entry.name == "1":
            continue
        with contextlib.suppress(OSError):
            stat = (entry / "stat").read_text()
            found.append((int(entry.name), stat[stat.rindex(")") + 2 :].split()[0]))
    return found


def reap_orphans(owned: set[int]) -> None:
    """As PID 1, collect the zombies re-parented to us that no Popen owns."""
    for pid, state in _children_of_init():
        if state == "Z" and pid not in owned:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)


def kill_all_but(keep: set[int], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = [(pid, state) for pid, state in _children_of_init() if pid not in keep]
        if not alive:
            return
        for pid, state in alive:
            if state != "Z":
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        reap_orphans(keep)
        time.sleep(0.05)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m testsupport.nodetier.node SPEC.json", file=sys.stderr)
        return 2
    if os.getpid() != 1:
        print("testsupport.nodetier.node must be PID 1 of a new pid namespace", file=sys.stderr)
        return 2
    return NodeMain(NodeSpec.load(Path(argv[0]))).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
