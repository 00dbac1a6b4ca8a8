"""The koord-manager process: caches, webhook server with self-managed TLS, probes, metrics.

Start-up order, chosen so no request meets a half-started server:

1. health and metrics servers (liveness answers while the rest starts);
2. the informers the enabled webhooks read, up to their initial sync; then ``settle`` (the
   process's garbage-collector tuning, :func:`controlplane.manager.server.settle_after_start`,
   passed by the ``koord-manager`` command) over the start-up heap;
3. the serving certificate (created or renewed in the Secret) loaded into the TLS context;
4. the webhook server on ``--webhook-port``;
5. background runnables: the certificate controller (publishes the ``caBundle``, then
   re-checks every minute and whenever the Secret or a webhook configuration changes)
   and any runnable added with :meth:`Manager.add_runnable`;

   With the ``WebhookFramework`` gate off (upstream skips its whole webhook setup) steps 2-4
   and the certificate controller are left out: no webhook cache, server or certificate.
6. leader election on the ``koordinator-manager`` Lease: the controllers
   (:mod:`controlplane.manager.controllers`) and runnables added with
   :meth:`Manager.add_leader_runnable` run only while this replica leads. Webhooks serve
   on every replica. The controllers write through a view of the API client fenced by the
   lease: before each write it checks that the last successful renewal started less than
   the renew deadline ago (:meth:`LeaderElector.check_lease`), so a leader that was paused
   past its lease writes nothing on resuming. Losing the lease (renewal failed, another
   holder seen, or a write refused by the fence) cancels the leader runnables at once --
   another replica may already be writing -- and the replica contends again, running them
   afresh when it wins. Unlike controller-runtime, which exits on a lost lease, the
   process keeps running: it serves the webhooks, and exiting would take them down on
   every replica an apiserver outage reaches.

``/readyz`` turns green once the caches are synced and the webhook server presents a
certificate that verifies against the current CA. :meth:`Manager.stop` stops accepting
requests, lets in-flight ones finish (bounded), lets reconciles in progress finish (bounded),
releases the lease so another replica takes over at once, and stops the informers.
A runnable that fails stops the process: :meth:`Manager.wait` raises its error, so a
supervisor restarts the manager instead of leaving it half-working.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import replace
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry

from controlplane.manager.cache import InformerCluster
from controlplane.manager.certs import (
    CertController,
    CertError,
    CertStore,
    ClientConfigTarget,
    DirectoryCertStore,
    SecretCertStore,
    ServingTLS,
    service_dns_name,
)
from controlplane.manager.controllers.metrics import SLOControllerMetrics
from controlplane.manager.controllers.running import ControllerSet, ControllerSettings
from controlplane.manager.gates import report_gates
from controlplane.manager.options import ManagerOptions
from controlplane.manager.profilerules import existing_pod_rules
from controlplane.manager.quota_accessor import ApiQuotaAccessor
from controlplane.manager.server import webhook_app
from controlplane.manager.webhooks.context import WebhookContext
from controlplane.manager.webhooks.dispatch import AdmissionDispatcher
from controlplane.manager.webhooks.elasticquota.topology import QuotaInfo, QuotaTopology
from controlplane.manager.webhooks.metrics import WebhookMetrics
from controlplane.manager.webhooks.quotaevaluate.evaluator import QuotaEvaluator
from controlplane.reactor import ReactorMetrics, cancel_and_wait
from controlplane.reactor.serving import SiteSpec, health_app, metrics_app, start_site
from koordinator.cli import cannot_listen
from koordinator.kube import resources as res
from koordinator.kube.client import ApiClient
from koordinator.kube.clock import SYSTEM_CLOCK, Clock
from koordinator.kube.errors import NotFoundError, NotLeaderError
from koordinator.kube.informer import InformerFactory
from koordinator.kube.leaderelection import LeaderElectionConfig, LeaderElector
from koordinator.metrics.exposition import render_python_client as render_metrics

__all__ = ["Manager", "ManagerError"]

log = logging.getLogger(__name__)

Runnable = Callable[[], Coroutine[Any, Any, None]]


#: the gate under which the whole webhook setup runs
WEBHOOK_FRAMEWORK = "WebhookFramework"


class ManagerError(RuntimeError):
    """The manager could not start, or a runnable failed."""


async def _listen(
    app: web.Application, host: str, port: int, ssl_context: ssl.SSLContext | None = None, *, flag: str
) -> SiteSpec:
    """:func:`start_site`, with a socket that cannot be bound told in one line naming the flag to change."""
    try:
        return await start_site(app, host, port, ssl_context)
    except OSError as exc:
        raise ManagerError(f"{cannot_listen(host, port, exc)} (set {flag})") from None


class Manager:
    def __init__(
        self,
        options: ManagerOptions,
        client: ApiClient,
        *,
        registry: CollectorRegistry | None = None,
        clock: Clock = SYSTEM_CLOCK,
        settle: Callable[[], None] | None = None,
    ) -> None:
        self.options = options
        self.client = client
        self.clock = clock
        self.settle = settle
        self.metrics = WebhookMetrics(registry)
        self.slo_metrics = SLOControllerMetrics(self.metrics.registry)
        self.reactor_metrics = ReactorMetrics(self.metrics.registry)
        self.topology = QuotaTopology(on_change=self._quota_changed)
        self.factory = InformerFactory(client, freeze_after_sync=False)
        self.serves_webhooks = options.gates.enabled(WEBHOOK_FRAMEWORK)
        self.cluster = InformerCluster(
            client,
            self.factory,
            options.gates,
            self.topology,
            config_namespace=options.webhook.config_namespace,
            watch=self.serves_webhooks,
        )
        self.ctx = WebhookContext(
            cluster=self.cluster,
            gates=options.gates,
            metrics=self.metrics,
            quotas=self.topology,
            options=options.webhook,
            quota_evaluator=self._quota_evaluator(),
        )
        self.dispatcher = AdmissionDispatcher(self.ctx)
        self.tls = ServingTLS()
        store: CertStore
        if options.webhook_cert_writer == "fs":
            store = DirectoryCertStore(options.webhook_cert_dir)
        else:
            store = SecretCertStore(client, options.webhook_namespace, options.webhook_secret_name)
        self.certs = CertController(
            store=store,
            dns_name=options.webhook_host
            or service_dns_name(options.webhook_service_name, options.webhook_namespace),
            cert_dir=options.webhook_cert_dir,
            tls=self.tls,
            served_paths=self.dispatcher.paths,
            target=ClientConfigTarget(
                options.webhook_namespace,
                options.webhook_service_name,
                options.webhook_host,
                options.webhook_port,
            ),
            client=client,
            policy=options.cert_policy,
            resync_period=options.cert_resync_s,
            mutating_name=options.mutating_configuration,
            validating_name=options.validating_configuration,
        )
        self._runnables: list[tuple[str, Runnable]] = []
        if self.serves_webhooks:
            self._watch_certificate_inputs()
            self._runnables.append(("webhook-certificates", self.certs.run))
        self._leader_runnables: list[tuple[str, Runnable]] = []
        self.identity = options.leader_election_identity or f"{socket.gethostname()}_{uuid.uuid4()}"
        self.controllers: ControllerSet | None = None
        #: what the leader-only work writes through: fenced by the lease when there is one. The
        #: elector's own Lease writes and the certificate controller (every replica) use ``client``.
        self.leader_client = client.with_write_guard(self._fence) if options.leader_election else client
        if options.controllers:
            self.controllers = ControllerSet(
                self.leader_client,
                ControllerSettings(
                    controllers=options.controllers,
                    config_namespace=options.webhook.config_namespace,
                    config_name=options.webhook.slo_config_name,
                    node_strategy_name_need_check=options.webhook.node_strategy_name_need_check,
                    workers=options.controller_workers,
                    cache_sync_timeout_s=options.cache_sync_timeout_s,
                    host=socket.gethostname(),
                    gates=options.gates,
                    noderesource_plugins=options.noderesource_plugins,
                    colocation_profile=options.colocation_profile,
                    profile_rules=existing_pod_rules(),
                    recommendation=options.recommendation,
                ),
                metrics=self.slo_metrics,
                reactor_metrics=self.reactor_metrics,
                clock=clock,
            )
            # stopped at once unless stop() asks for a graceful drain
            self.controllers.graceful = False
            self._leader_runnables.append(("slo-controller", self.controllers.run))
        self.elector: LeaderElector | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._sites: list[SiteSpec] = []
        self.webhook_site: SiteSpec | None = None
        self._stopping = asyncio.Event()

    # --- wiring -------------------------------------------------------------------------

    def _quota_evaluator(self) -> QuotaEvaluator | None:
        """The quota admission of ``/validate-pod``, when it is served with ``EnableQuotaAdmission``."""
        gates = self.options.gates
        if not (
            self.serves_webhooks
            and gates.enabled("PodValidatingWebhook")
            and gates.enabled("EnableQuotaAdmission")
        ):
            return None
        policy = self.options.quota_update
        accessor = ApiQuotaAccessor(
            self.client, self.factory, conflict_fresh_get=policy.conflict_fresh_get, clock=self.clock
        )
        return QuotaEvaluator(accessor, policy=policy, clock=self.clock)

    def _quota_changed(self, old: QuotaInfo | None, new: QuotaInfo | None) -> None:
        if old is not None:
            gone = set(old.shared_weight) - set(new.shared_weight if new is not None else ())
            if gone:
                self.metrics.forget_shared_weight(old.name, sorted(gone))
        if new is not None:
            self.metrics.set_shared_weight(new.name, {k: v.value() for k, v in new.shared_weight.items()})

    def _watch_certificate_inputs(self) -> None:
        """The Secret or a webhook configuration added, changed or deleted triggers a sync at once.

        Another replica, a helm upgrade or a person may replace the certificate, garble it or
        break a ``caBundle``; the periodic sync (``cert_resync_s``) is only the fallback. Each
        consumer stores the object's resourceVersion: the informer tells an update from an
        add by the record it stored before, so a consumer that stores nothing (``None``)
        never sees its update handler run.
        """
        options = self.options

        def changed(*_: object) -> None:
            self.certs.trigger()

        def resource_version(obj: dict[str, Any]) -> str:
            return str((obj.get("metadata") or {}).get("resourceVersion") or "")

        watched: list[tuple[res.Resource, str | None, str]] = [
            (res.MUTATING_WEBHOOK_CONFIGURATIONS, None, self.certs.mutating_name),
            (res.VALIDATING_WEBHOOK_CONFIGURATIONS, None, self.certs.validating_name),
        ]
        if options.webhook_cert_writer == "secret":
            watched.append((res.SECRETS, options.webhook_namespace, options.webhook_secret_name))
        for resource, namespace, name in watched:
            self.factory.informer(
                resource, namespace=namespace, field_selector=f"metadata.name={name}"
            ).add_consumer(
                resource_version,
                name=f"webhook-cert-{resource.plural}",
                on_add=changed,
                on_update=changed,
                on_delete=changed,
            )

    def add_runnable(self, name: str, runnable: Runnable) -> None:
        """Run ``runnable`` on every replica once the webhook server is up."""
        if self._tasks:
            raise ManagerError("runnables must be added before the manager starts")
        self._runnables.append((name, runnable))

    def add_leader_runnable(self, name: str, runnable: Runnable) -> None:
        """Run ``runnable`` only while this replica holds the lease.

        It is cancelled when the lease is lost and called again when it is won again; it should
        write through :attr:`leader_client`, whose writes are refused once the lease is lost.
        """
        if self._tasks:
            raise ManagerError("runnables must be added before the manager starts")
        self._leader_runnables.append((name, runnable))

    # --- leadership -----------------------------------------------------------------------

    def _fence(self) -> None:
        """The write guard of :attr:`leader_client`: raises :class:`NotLeaderError` unless this replica
        holds the lease now (and then steps down at once: the elector cancels the leader runnables)."""
        if self.elector is None:
            raise NotLeaderError(f"{self.identity} has not started contending for the lease")
        try:
            self.elector.check_lease()
        except NotLeaderError:
            self.slo_metrics.is_leader.set(0)
            raise

    async def _lead(self) -> None:
        """Everything that runs on the leader only, until cancelled or one of them ends."""
        self.slo_metrics.is_leader.set(1)
        tasks = [asyncio.create_task(runnable(), name=name) for name, runnable in self._leader_runnables]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                error = task.exception()
                if isinstance(error, NotLeaderError):
                    raise error  # the lease is gone: the elector steps down and contends again
                raise ManagerError(
                    f"leader runnable {task.get_name()} stopped: {error or 'returned'}"
                ) from error
        finally:
            await cancel_and_wait(tasks)
            self.slo_metrics.is_leader.set(0)

    async def _elect(self) -> None:
        """Contend, lead, and after losing the lease contend again, for as long as the process runs.

        A lost lease is not a reason to exit: the webhooks served by this process must keep
        answering, and the leader runnables are already stopped when ``run`` returns.
        """
        assert self.elector is not None
        options = self.options
        while True:
            await self.elector.run()
            log.warning(
                "lost the %s/%s lease: controllers stopped, webhooks still serving; contending again",
                options.leader_election_namespace,
                options.leader_election_id,
            )

    def _new_leader(self, identity: str) -> None:
        if identity == self.identity:
            log.info("this replica (%s) is the leader", identity)
        else:
            log.info("the leader is %s", identity)

    def _stopped_leading(self) -> None:
        self.slo_metrics.is_leader.set(0)
        log.info("this replica (%s) stopped leading", self.identity)

    # --- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        options = self.options
        report_gates(options.gates, log)
        for address, app, flag in (
            (options.health_probe_addr, health_app(self.readiness), "--health-probe-addr"),
            (options.metrics_addr, metrics_app(self.metrics.registry, render_metrics), "--metrics-addr"),
        ):
            if address is not None:
                self._sites.append(await _listen(app, *address, flag=flag))
        self.factory.start()
        try:
            async with asyncio.timeout(options.cache_sync_timeout_s):
                await self.factory.wait_for_sync()
        except TimeoutError:
            raise ManagerError(
                f"informer caches did not sync within {options.cache_sync_timeout_s:.0f}s"
            ) from None
        if self.settle is not None:
            self.settle()
        if self.serves_webhooks:
            await self._serve_webhooks()
        else:
            log.info(
                "feature gate %s is off: no webhook server and no webhook certificates", WEBHOOK_FRAMEWORK
            )
        runnables = list(self._runnables)
        if self._leader_runnables:
            if options.leader_election:
                self.elector = LeaderElector(
                    self.client,
                    LeaderElectionConfig(
                        namespace=options.leader_election_namespace,
                        name=options.leader_election_id,
                        identity=self.identity,
                        lease_duration=options.lease_duration_s,
                        renew_deadline=options.renew_deadline_s,
                        retry_period=options.retry_period_s,
                    ),
                    on_started_leading=self._lead,
                    on_stopped_leading=self._stopped_leading,
                    on_new_leader=self._new_leader,
                    clock=self.clock,
                )
                runnables.append(("leader-election", self._elect))
                log.info(
                    "contending for the lease %s/%s as %s",
                    options.leader_election_namespace,
                    options.leader_election_id,
                    self.identity,
                )
            else:
                runnables.append(("controllers", self._lead))
        for name, runnable in runnables:
            self._tasks.append(asyncio.create_task(runnable(), name=name))

    async def _serve_webhooks(self) -> None:
        options = self.options
        try:
            await self.certs.prepare()
        except CertError as exc:
            hint = ""
            if isinstance(exc.__cause__, NotFoundError) and "namespaces" in str(exc.__cause__):
                hint = " (create it, or name the manager's namespace with --webhook-namespace/POD_NAMESPACE)"
            raise ManagerError(f"webhook certificates: {exc}{hint}") from None
        debug = self.topology.summary if options.gates.enabled("ElasticValidatingWebhook") else None
        self.webhook_site = await _listen(
            webhook_app(self.dispatcher, self.readiness, debug),
            options.webhook_bind_host,
            options.webhook_port,
            self.tls.context,
            flag="--webhook-port/WEBHOOK_PORT",
        )
        self._sites.append(self.webhook_site)
        if self.certs.target.port != self.webhook_site.port:
            self.certs.target = replace(self.certs.target, port=self.webhook_site.port)
        log.info("serving webhooks: %s", ", ".join(self.dispatcher.paths) or "none")

    def request_stop(self) -> None:
        self._stopping.set()

    async def run(self) -> None:
        """:meth:`start`, then :meth:`wait`. A stop requested while starting (caches still syncing,
        an apiserver out of reach) abandons the start at once instead of waiting for its timeouts."""
        starting = asyncio.create_task(self.start(), name="manager-start")
        stopping = asyncio.create_task(self._stopping.wait())
        try:
            await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
        if not starting.done():
            log.info("stop requested while starting")
            await cancel_and_wait([starting])
            return
        starting.result()
        await self.wait()

    async def wait(self) -> None:
        """Until :meth:`request_stop`; raises :class:`ManagerError` when a runnable ends or fails."""
        stop = asyncio.create_task(self._stopping.wait())
        try:
            done, _ = await asyncio.wait({stop, *self._tasks}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
        for task in done:
            if task is stop:
                continue
            error = task.exception() if not task.cancelled() else None
            raise ManagerError(f"runnable {task.get_name()} stopped: {error or 'returned'}") from error

    async def stop(self) -> None:
        if self.controllers is not None:
            self.controllers.graceful = True
        for site in reversed(self._sites):
            with contextlib.suppress(Exception):
                await site.stop()
        self._sites.clear()
        if self.ctx.quota_evaluator is not None:
            await self.ctx.quota_evaluator.aclose()
        await cancel_and_wait(self._tasks)
        self._tasks.clear()
        await self.factory.stop()

    async def readiness(self) -> str:
        """``""`` when ready, else why not."""
        if not all(informer.has_synced for informer in self.factory.informers):
            return "informer caches are not synced"
        if not self.serves_webhooks:
            return ""
        if self.webhook_site is None:
            return "webhook server is not started"
        # the site serves with self.tls.context: what that context presents is what clients get
        return self.certs.serving_valid()
