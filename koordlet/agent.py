"""The koordlet agent: wiring and lifecycle, in upstream's order.

1. metrics registry and the HTTP server (``/metrics``, ``/healthz``) on ``--addr``;
   ``/metrics`` is one rendering shared by concurrent scrapers and bounded in
   concurrency (:mod:`koordlet.scrape`), so a scrape flood cannot grow the agent's memory;
2. host access (cgroup version and kubepods layout detected once), metric cache;
3. the states informer, and a wait until it has synced (pods from the kubelet; Node,
   NodeSLO and NodeMetric from the apiserver);
4. the collectors, and a wait until each enabled one has produced data;
5. the reporters (NodeMetric status, NodeResourceTopology), and with the NodeMetric
   report the peak predictor (:mod:`koordlet.prediction`: models restored from their
   checkpoints, then trained) whose ProdReclaimable result the report carries;
6. the QoS strategies (cluster mode), writing through the resource update executor and
   evicting through the Eviction API, and the runtime hooks' reconciler (cluster mode);

then runs until SIGTERM/SIGINT and stops in reverse order. ``--standalone`` swaps the
apiserver and the kubelet for this machine's own cgroup tree and description.

What keeps the agent from starting (the ``--addr`` port taken, a kubeconfig that is
missing, not YAML or without a current context) is an :class:`AgentStartError`: one line
in the log, exit status 1, no traceback.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry

from koordinator.api.features import FeatureGates
from koordinator.api.runtimehook import FailurePolicy
from koordinator.api.types.slo import NodeSLOSpec
from koordinator.cli import cannot_listen, one_line, stop_on_signals
from koordinator.heap import freeze_startup_heap
from koordinator.kube.client import ApiClient
from koordinator.kube.config import ClusterConfig, ConfigError, FileToken, load_config
from koordinator.kube.events import EventRecorder
from koordinator.kube.informer import InformerFactory
from koordlet.executor import ResourceUpdateExecutor
from koordlet.gates import report_gates
from koordlet.metriccache import KVStore, MetricCache, kinds
from koordlet.metrics import KoordletMetrics, render_async
from koordlet.metricsadvisor.collectors.gpu import GPUDeviceCollector
from koordlet.metricsadvisor.framework import (
    CollectContext,
    CollectorConfig,
    CollectorRunner,
    build_collectors,
)
from koordlet.metricsadvisor.registry import COLLECTORS
from koordlet.prediction import (
    PeakPredictServer,
    PredictionConfig,
    checkpoint_dir_under,
    prod_reclaimable_factory,
)
from koordlet.prediction.config import DEFAULT_CHECKPOINT_FILEPATH
from koordlet.qosmanager.evictor import Evictor
from koordlet.qosmanager.framework import CgroupView, HostFacts, MetricsView, NodeView, QoSManager, Snapshot
from koordlet.qosmanager.registry import strategies
from koordlet.runtimehooks.framework import HookManager
from koordlet.runtimehooks.nri.plugin import NriOptions, NriPlugin
from koordlet.runtimehooks.protocol import NodeFacts
from koordlet.runtimehooks.proxyserver import HookServerOptions, RuntimeHookServer
from koordlet.runtimehooks.reconciler import Reconciler
from koordlet.runtimehooks.registry import hooks
from koordlet.runtimehooks.transport import HookRunner
from koordlet.scrape import MetricsEndpoint, ScrapeLimits
from koordlet.statesinformer.callbacks import CallbackType
from koordlet.statesinformer.device import DeviceReporter, DeviceSources
from koordlet.statesinformer.informer import StatesInformer
from koordlet.statesinformer.kubelet import KubeletClient, KubeletEndpoint, KubeletError
from koordlet.statesinformer.nodemetric import NodeMetricReporter
from koordlet.statesinformer.nrt import KubeletCPUState, NodeTopologyReporter, read_cpu_manager_state
from koordlet.statesinformer.standalone import CgroupPodsSource, describe_node, host_applications
from koordlet.system.cgroup.cgroupfs import CgroupFS
from koordlet.system.devices import nvml, rdma, xpu
from koordlet.system.paths import HostPaths
from koordlet.system.resctrl import Resctrl

log = logging.getLogger(__name__)

#: the collectors whose fresh usage wakes the QoS strategies (once all have delivered)
_USAGE_COLLECTORS = ("NodeResourceCollector", "PodResourceCollector")
SERVICE_ACCOUNT_TOKEN = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")
EXIT_START_FAILED = 1


class AgentStartError(RuntimeError):
    """The agent cannot start; the message is one line saying why and what to change."""


def cluster_config(kubeconfig: str | None) -> ClusterConfig:
    """The apiserver's address and credentials: the kubeconfig when named, else in-cluster
    credentials in a pod, else the default kubeconfig; an :class:`AgentStartError` when
    they cannot be loaded."""
    try:
        return load_config(kubeconfig)
    except ConfigError as exc:
        context = ""
        if kubeconfig is None and not os.environ.get("KUBERNETES_SERVICE_HOST"):
            context = " (no --kubeconfig given and not running in a pod)"
        raise AgentStartError(f"cannot load cluster credentials{context}: {one_line(exc)}") from None


@dataclass
class AgentConfig:
    node_name: str
    paths: HostPaths
    gates: FeatureGates
    host: str = ""
    port: int = 9316
    standalone: bool = False
    kubeconfig: str | None = None
    kube_api_qps: float = 20.0
    kube_api_burst: int = 30
    kubelet_preferred_address_type: str = "InternalIP"
    kubelet_sync_interval: float = 10.0
    kubelet_sync_timeout: float = 3.0
    kubelet_insecure_tls: bool = False
    kubelet_read_only_port: int = 10255
    #: the kubepods cgroup directory (``--cgroup-kube-dir``); empty: detected
    cgroup_kube_dir: str = ""
    node_topology_sync_interval: float = 3.0
    #: ``--disable-query-kubelet-config``: the NRT neither asks the kubelet's /configz nor
    #: reports its CPU manager (upstream's way to let the scheduler take its CPUs over)
    disable_query_kubelet_config: bool = False
    #: where koord-device-daemon's device-info files are (``--xpu-device-infos-dir``)
    xpu_device_infos_dir: str = "/var/run/koordlet/xpu-device-infos"
    #: ``--xpu-enforce-collect-from-device-infos``: GPUs only from those files, never NVML's list
    xpu_enforce_collect_from_device_infos: bool = False
    enable_node_metric_report: bool = True
    collectors: CollectorConfig = field(default_factory=CollectorConfig)
    metric_retention_seconds: float = 1800.0
    metric_max_bytes: int = 100 << 20
    #: where sealed blocks of samples go (``--tsdb-path``); None: memory
    metric_data_dir: Path | None = None
    collectors_start_timeout: float = 300.0
    qos_interval: float = 1.0
    memory_evict_cooldown: float = 4.0
    cpu_evict_cooldown: float = 20.0
    resource_force_update_seconds: float = 60.0
    runtime_hooks_reconcile_interval: float = 10.0
    runtime_hooks_failure_policy: FailurePolicy = FailurePolicy.IGNORE
    #: the NRI transport's options; None: ``--enable-nri-runtime-hook=false``
    nri: NriOptions | None = None
    #: the runtime hook server koord-runtime-proxy calls; None: ``--runtime-hooks-addr=''``
    hook_server: HookServerOptions | None = None
    scrape_limits: ScrapeLimits = field(default_factory=ScrapeLimits)
    #: the ``--prediction-*`` settings; None: upstream's defaults, checkpoints under the
    #: var-run root
    prediction: PredictionConfig | None = None


def service_account_token() -> FileToken | None:
    """The pod's service-account token (re-read when rotated), when mounted."""
    return FileToken(SERVICE_ACCOUNT_TOKEN) if SERVICE_ACCOUNT_TOKEN.exists() else None


class KubeletPodsSource:
    """The kubelet's /pods (and /configz), once the Node (its address and port) is known."""

    def __init__(
        self,
        config: AgentConfig,
        states: StatesInformer | None,
        metrics: KoordletMetrics,
        credentials: ClusterConfig | None = None,
    ) -> None:
        self.config = config
        self.states = states
        self.metrics = metrics
        #: the apiserver credentials, which the kubelet is shown too (upstream's rest config)
        self.credentials = credentials
        self.client: KubeletClient | None = None

    def _client(self) -> KubeletClient:
        if self.client is None:
            node = self.states.get_node() if self.states is not None else None
            if node is None:
                raise KubeletError("node not known yet (no kubelet address)")
            endpoint = KubeletEndpoint.for_node(
                node,
                preferred_address_type=self.config.kubelet_preferred_address_type,
                read_only_port=self.config.kubelet_read_only_port,
                insecure=self.config.kubelet_insecure_tls,
            )
            creds = self.credentials
            token = creds.token if creds is not None and creds.token is not None else service_account_token()
            cert = (
                (creds.client_cert_file, creds.client_key_file) if creds and creds.client_cert_file else None
            )
            self.client = KubeletClient(
                endpoint,
                token,
                client_cert=cert,
                timeout=self.config.kubelet_sync_timeout,
                metrics=self.metrics,
            )
        return self.client

    async def get_pods(self) -> list[dict[str, Any]]:
        return await self._client().get_pods()

    async def get_configz(self) -> dict[str, Any]:
        """The kubelet's running configuration (``/configz``), for the NRT reporter."""
        return await self._client().get_configz()

    async def close(self) -> None:
        if self.client is not None:
            await self.client.close()


class Agent:
    def __init__(self, config: AgentConfig, *, client: ApiClient | None = None) -> None:
        self.config = config
        self.registry = CollectorRegistry()
        self.metrics = KoordletMetrics(self.registry, config.node_name)
        #: /metrics: one rendering shared by concurrent scrapes, bounded (koordlet.scrape)
        self.metrics_endpoint = MetricsEndpoint(lambda: render_async(self.registry), config.scrape_limits)
        self.cache = MetricCache(
            config.metric_retention_seconds, config.metric_max_bytes, config.metric_data_dir
        )
        self.kv = KVStore()
        self.cgroups = CgroupFS.detect(config.paths, config.cgroup_kube_dir)
        self.client = client
        self.states: StatesInformer | None = None
        #: Events of the koordlet (cluster mode): evictions, refused and deleted NodeSLOs
        self.recorder: EventRecorder | None = None
        self.runner: CollectorRunner | None = None
        self.ready = False
        self.port = config.port
        self._tasks: list[asyncio.Task[None]] = []
        self._site: web.TCPSite | None = None
        self._web: web.AppRunner | None = None
        self._pods_source: KubeletPodsSource | None = None
        self.nrt: NodeTopologyReporter | None = None
        self.device_reporter: DeviceReporter | None = None
        self.node_metric_reporter: NodeMetricReporter | None = None
        self.predict_server: PeakPredictServer | None = None
        self.executor = ResourceUpdateExecutor(
            self.cgroups, metrics=self.metrics, force_update_seconds=config.resource_force_update_seconds
        )
        self.qos: QoSManager | None = None
        self.evictor: Evictor | None = None
        self.reconciler: Reconciler | None = None
        self.nri: NriPlugin | None = None
        self.hook_server: RuntimeHookServer | None = None

    # --- HTTP ----------------------------------------------------------------------------

    async def _healthz(self, _request: web.Request) -> web.Response:
        return web.Response(text="ok" if self.ready else "starting", status=200 if self.ready else 503)

    async def start_http(self) -> int:
        app = web.Application()
        for path in ("/metrics", "/internal-metrics", "/external-metrics"):
            app.router.add_get(path, self.metrics_endpoint.handle)
        app.router.add_get("/healthz", self._healthz)
        self._web = web.AppRunner(app, access_log=None)
        await self._web.setup()
        self._site = web.TCPSite(self._web, self.config.host or None, self.config.port)
        try:
            await self._site.start()
        except OSError as exc:
            where = cannot_listen(self.config.host, self.config.port, exc, "for /metrics and /healthz")
            raise AgentStartError(f"{where} (choose another with --addr)") from None
        server = self._site._server
        sockets = getattr(server, "sockets", None) or []
        return int(sockets[0].getsockname()[1]) if sockets else self.config.port

    # --- wiring --------------------------------------------------------------------------

    def _build_states(self) -> StatesInformer:
        if self.config.standalone:
            return StatesInformer(
                self.config.node_name,
                self.cgroups,
                CgroupPodsSource(self.cgroups),
                metrics=self.metrics,
                standalone_node=describe_node(self.cgroups, self.config.node_name),
                standalone_node_slo=NodeSLOSpec(host_applications=host_applications(self.cgroups)),
                kubelet_sync_interval=self.config.kubelet_sync_interval,
            )
        if self.client is None:
            self.client = ApiClient(
                cluster_config(self.config.kubeconfig),
                qps=self.config.kube_api_qps,
                burst=self.config.kube_api_burst,
            )
        self._pods_source = KubeletPodsSource(self.config, None, self.metrics, self.client.config)
        self.recorder = EventRecorder(self.client, "koordlet", self.config.node_name)
        states = StatesInformer(
            self.config.node_name,
            self.cgroups,
            self._pods_source,
            factory=InformerFactory(self.client, freeze_after_sync=False),
            metrics=self.metrics,
            kubelet_sync_interval=self.config.kubelet_sync_interval,
            recorder=self.recorder,
        )
        self._pods_source.states = states
        return states

    def _kubelet_cpu_state(self) -> KubeletCPUState:
        """The kubelet's CPU manager policy (``policyName``) and static assignments, from its
        checkpoint; a static-policy node is static before any pod gets exclusive CPUs."""
        return read_cpu_manager_state(self.config.paths.var_lib_kubelet / "cpu_manager_state")

    def _kubelet_cpu_policy(self) -> str:
        """The kubelet's CPU manager policy as the NodeResourceTopology reports it (from
        /configz, else the checkpoint; upstream's strategies and hooks read it there)."""
        if self.nrt is not None:
            return self.nrt.cpu_manager_policy()
        return "" if self.config.disable_query_kubelet_config else self._kubelet_cpu_state().policy

    async def run(self, stop: asyncio.Event) -> None:
        config = self.config
        self.metrics.start_time.labels(config.node_name).set(time.time())
        report_gates(config.gates, log)
        layout, how = self.cgroups.kubepods
        log.info(
            "koordlet on %s: cgroup v%d, %s driver, kubepods %s (%s)",
            config.node_name,
            self.cgroups.version,
            layout.driver,
            layout.root,
            how,
        )
        try:
            self.port = await self.start_http()
            self.states = states = self._build_states()
            await states.start()
            log.info("waiting for the states informer to sync")
            await _until(states.wait_synced(), stop)
            if stop.is_set():
                return
            if config.collectors.collect_res_used_interval >= 1.0:
                ctx = CollectContext(
                    config.paths,
                    self.cgroups,
                    self.cache,
                    self.kv,
                    states,
                    self.metrics,
                    config.gates,
                    config.collectors,
                )
                self.runner = CollectorRunner(build_collectors(ctx, COLLECTORS), hastening=ctx.hastening)
                self.runner.start()
                try:
                    async with asyncio.timeout(config.collectors_start_timeout):
                        await _until(self.runner.wait_started(), stop)
                except TimeoutError:
                    log.warning(
                        "some collectors produced no data within %.0fs", config.collectors_start_timeout
                    )
            else:
                log.warning("--collect-res-used-interval < 1s: metrics advisor and QoS manager disabled")
            self._start_reporters(states)
            if config.collectors.collect_res_used_interval >= 1.0:
                self._start_qos()
            self._start_hooks(states)
            self.ready = True
            log.info("koordlet is running")
            await stop.wait()
        finally:
            await self.shutdown()

    def _start_reporters(self, states: StatesInformer) -> None:
        config = self.config
        nrt = NodeTopologyReporter(
            states,
            lambda: self.kv.get(kinds.NODE_CPU_INFO),
            lambda: self.kv.get(kinds.NODE_NUMA_INFO),
            self._kubelet_cpu_state,
            client=self.client,
            report=not config.standalone and config.gates.enabled("NodeTopologyReport"),
            on_change=lambda: states.callbacks.signal(CallbackType.NODE_TOPOLOGY),
            interval=config.node_topology_sync_interval,
            metrics=self.metrics,
            kubelet_config=self._pods_source.get_configz if self._pods_source is not None else None,
            query_kubelet_config=not config.disable_query_kubelet_config,
            per_cpu_metrics=config.gates.enabled("PerCPUMetric"),
        )
        self.nrt = nrt
        self._tasks.append(asyncio.create_task(nrt.run(), name="nrt-reporter"))
        self._start_device_reporter(states)
        # the peak predictor trains in every mode, as upstream's starts with the agent; its
        # ProdReclaimable result goes out with the NodeMetric report (cluster mode)
        prediction = config.prediction or PredictionConfig(
            checkpoint_dir=checkpoint_dir_under(config.paths.var_run_root, DEFAULT_CHECKPOINT_FILEPATH)
        )
        self.predict_server = PeakPredictServer(
            prediction, self.cache.query, lambda: [meta.pod for meta in states.get_all_pods()]
        )
        self._tasks.append(asyncio.create_task(self.predict_server.run(), name="predict-server"))
        if self.client is not None and config.enable_node_metric_report and not config.standalone:
            mirror = self.metrics if config.gates.enabled("NodeMetricPromMetrics") else None
            # the GPUs whose usage is reported: those the GPU collector (Accelerators) has seen
            collectors = self.runner.collectors if self.runner is not None else []
            gpu = next((c for c in collectors if isinstance(c, GPUDeviceCollector)), None)
            predictor = prod_reclaimable_factory(
                self.predict_server,
                states.get_node,
                cold_start_seconds=prediction.cold_start_seconds,
                safety_margin_percent=prediction.safety_margin_percent,
                metrics=self.metrics,
            )
            self.node_metric_reporter = NodeMetricReporter(
                self.client,
                states,
                self.cache.query,
                metrics=mirror,
                gpus=gpu.gpus if gpu else None,
                predictor=predictor,
                retention_seconds=self.cache.retention_seconds,
            )
            reporting = self.node_metric_reporter.run()
            self._tasks.append(asyncio.create_task(reporting, name="nodemetric-reporter"))

    def _start_device_reporter(self, states: StatesInformer) -> None:
        """The Device object, with the Accelerators (GPUs, device-info files) and RDMADevices
        gates; GPUs are asked of NVML once, at start (in a thread: NVML blocks)."""
        config = self.config
        accelerators = config.gates.enabled("Accelerators")
        rdma_devices = config.gates.enabled("RDMADevices")
        if self.client is None or config.standalone or not (accelerators or rdma_devices):
            return
        client = self.client
        sys_root = config.paths.sys_root

        async def report() -> None:
            sources = DeviceSources(enforce_device_infos=config.xpu_enforce_collect_from_device_infos)
            if accelerators:
                inventory, reason = await asyncio.to_thread(nvml.discover, sys_root)
                if inventory is not None:  # a failure was logged by discover, once
                    log.info("GPUs: %s", reason)
                sources.gpus = lambda: inventory
                infos_dir = Path(config.xpu_device_infos_dir)
                sources.records = lambda: xpu.read_dir(infos_dir)
            if rdma_devices:
                sources.rdmas = lambda: rdma.discover(sys_root)
            self.device_reporter = DeviceReporter(
                client,
                config.node_name,
                states.get_node,
                sources,
                interval=config.node_topology_sync_interval,
            )
            await self.device_reporter.run()

        self._tasks.append(asyncio.create_task(report(), name="device-reporter"))

    def snapshot(self) -> Snapshot:
        """What the QoS strategies see now."""
        assert self.states is not None
        layout = self.cgroups.layout
        cpu_info = self.kv.get(kinds.NODE_CPU_INFO)
        host = HostFacts(self.cgroups.version, layout, cpu_info, self._kubelet_cpu_policy())
        return Snapshot(
            now=time.time(),
            node=NodeView.decode(self.states.get_node()),
            node_slo=self.states.get_node_slo(),
            pods=self.states.get_all_pods(),
            metrics=MetricsView(self.cache),
            host=host,
            cgroups=CgroupView(self.cgroups),
            gates=self.config.gates,
            collect_interval=self.config.collectors.collect_res_used_interval,
            unevictable=self.evictor.refused_lately() if self.evictor is not None else frozenset(),
        )

    def _start_qos(self) -> None:
        config = self.config
        if config.standalone:
            log.info("standalone mode: QoS strategies are not run (they would act on this machine's cgroups)")
            return
        evictor = None
        if self.client is not None:
            evictor = self.evictor = Evictor(self.client, self.metrics, self.recorder)
        self.qos = QoSManager(
            strategies(
                config.qos_interval,
                config.memory_evict_cooldown,
                config.cpu_evict_cooldown,
                mount_resctrl=Resctrl.mount,  # the agent alone mounts resctrl
            ),
            self.snapshot,
            self.executor,
            evictor,
            self.metrics,
            wake_on=[c.NAME for c in self.runner.collectors if c.NAME in _USAGE_COLLECTORS]
            if self.runner is not None
            else (),
        )
        self.qos.start()
        if self.runner is not None:
            self.runner.listeners.append(self._on_collected)

    def node_facts(self) -> NodeFacts:
        """What the runtime hooks see now."""
        assert self.states is not None
        current = self.nrt.current if self.nrt is not None else None
        return NodeFacts(
            cgroups=self.cgroups,
            node=self.states.get_node(),
            node_slo=self.states.get_node_slo(),
            gates=self.config.gates,
            topology_annotations=dict((current or {}).get("annotations") or {}),
            kubelet_cpu_policy=self._kubelet_cpu_policy(),
            proc_root=self.config.paths.proc_root,
        )

    def _start_hooks(self, states: StatesInformer) -> None:
        if self.config.standalone:
            log.info("standalone mode: runtime hooks are not run (they would act on this machine's cgroups)")
            return
        manager = HookManager(
            hooks(self.metrics), self.metrics, failure_policy=self.config.runtime_hooks_failure_policy
        )
        runner = HookRunner(manager, self.node_facts, self.executor, states.get_pod)
        if self.config.nri is not None:
            self.nri = NriPlugin(self.config.nri, runner)
            self._tasks.append(asyncio.create_task(self.nri.run(), name="nri-plugin"))
        if self.config.hook_server is not None:
            self.hook_server = RuntimeHookServer(runner, self.config.hook_server)
            self._tasks.append(
                asyncio.create_task(self._serve_hooks(self.hook_server), name="runtime-hook-server")
            )
        self.reconciler = Reconciler(
            manager,
            self.node_facts,
            states.get_all_pods,
            self.executor,
            self.metrics,
            interval=self.config.runtime_hooks_reconcile_interval,
        )
        # node metadata: the CPU normalization ratio (CPUNormalization, BatchResource)
        for kind in (
            CallbackType.ALL_PODS,
            CallbackType.NODE_SLO_SPEC,
            CallbackType.NODE_TOPOLOGY,
            CallbackType.NODE_METADATA,
        ):
            states.register_callback(kind, "runtime-hooks", self.reconciler.trigger)
        self.reconciler.start()

    async def _serve_hooks(self, server: RuntimeHookServer) -> None:
        """The runtime hook server until the agent stops (a failure to serve is logged)."""
        try:
            if not await server.start():
                return
            await asyncio.Event().wait()
        except OSError as exc:
            log.warning("runtime hook server not started: %s", exc)
        finally:
            await server.stop()

    def _on_collected(self, collector: str) -> None:
        """New node and pod usage: let the QoS strategies look at it right away (once both
        collectors have delivered; see :meth:`QoSManager.collected`)."""
        if self.qos is not None:
            self.qos.collected(collector)

    async def shutdown(self) -> None:
        self.ready = False
        if self.reconciler is not None:
            await self.reconciler.stop()
        if self.qos is not None:
            await self.qos.stop()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.runner is not None:
            await self.runner.stop()
        if self.states is not None:
            await self.states.stop()
        if self._pods_source is not None:
            await self._pods_source.close()
        if self.client is not None:
            await self.client.close()
        if self._web is not None:
            await self._web.cleanup()
        self.cache.close()


async def _until(awaitable: Any, stop: asyncio.Event) -> None:
    """Await ``awaitable`` unless ``stop`` is set first."""
    task = asyncio.ensure_future(awaitable)
    stopper = asyncio.ensure_future(stop.wait())
    done, pending = await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
    for other in pending:
        other.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    if task in done:
        task.result()


def run_agent(config: AgentConfig) -> int:
    """Run until SIGTERM or SIGINT; returns the process exit status (1, with one line
    logged, when the agent cannot start)."""

    async def main() -> None:
        stop = asyncio.Event()
        stop_on_signals(stop.set)
        agent = Agent(config)
        freeze_startup_heap()
        await agent.run(stop)

    try:
        asyncio.run(main())
    except AgentStartError as exc:
        log.error("%s", exc)
        return EXIT_START_FAILED
    return 0
