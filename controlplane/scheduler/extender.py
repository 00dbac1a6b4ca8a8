"""``koord-scheduler extender``: Koordinator's plug-ins behind kube-scheduler's HTTP extender
protocol, for a cluster that keeps its stock kube-scheduler (no anchor in Koordinator).

A stock kube-scheduler configured with this extender (``extenders`` of its
KubeSchedulerConfiguration: ``urlPrefix`` this server, ``filterVerb: filter``,
``prioritizeVerb: prioritize``, ``bindVerb: bind``, ``nodeCacheCapable: true``) asks:

* **filter** (``ExtenderArgs`` → ``ExtenderFilterResult``): of the nodes its own filters
  passed, those the profile's PreFilter and filter plug-ins pass (LoadAwareScheduling's
  usage thresholds, ElasticQuota's "Insufficient quotas", NodeNUMAResource, DeviceShare,
  Reservation ...), the others in ``FailedNodes`` with the plug-in's reason, or in
  ``FailedAndUnresolvableNodes`` where evicting pods cannot help;
* **prioritize** (``ExtenderArgs`` → ``HostPriorityList``): the weighted mean of the
  profile's score plug-ins, 0-10 (kube-scheduler scales it by the extender's weight and 10);
* **bind** (``ExtenderBindingArgs`` → ``ExtenderBindingResult``): the pod is assumed on the
  node, the Reserve and Permit plug-ins run (quotas count it, CPUs and devices are booked),
  PreBind's one patch is sent (``resource-status``, ``device-allocated``,
  ``reservation-allocated``) and the Binding is posted;
* **preempt**: kube-scheduler's own victims are returned unchanged.

The extender reads the cluster through the same informers as koord-scheduler and runs the
profile given with ``--config`` (``controlplane/scheduler/profiles/koord-extender.yaml``:
Koordinator's plug-ins only, kube-scheduler's defaults being the stock scheduler's). Field
names are read case-insensitively and written as kube-scheduler's Go types marshal them.
A request that is not such JSON gets an ``Error`` answer (HTTP 200, as the protocol wants);
the plug-in controllers (quota status, PodGroup status, Reservation expiry) do not run here.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

import orjson
from aiohttp import web

from controlplane.reactor.serving import start_site
from controlplane.scheduler.binding import PointError
from controlplane.scheduler.config import SchedulerConfig
from controlplane.scheduler.framework import Framework
from controlplane.scheduler.plugins.interface import CycleState
from controlplane.scheduler.podinfo import pod_info
from controlplane.scheduler.scheduler import Scheduler
from koordinator.kube import resources as res
from koordinator.kube.client import ApiClient
from koordinator.kube.errors import KubeError
from koordinator.kube.informer.factory import InformerFactory

log = logging.getLogger(__name__)

#: kube-scheduler's MaxExtenderPriority
MAX_EXTENDER_PRIORITY = 10
#: the largest request body accepted (a Pod and a NodeList of a large cluster fit)
MAX_BODY_BYTES = 64 << 20

Obj = Mapping[str, Any]


class ExtenderRequestError(ValueError):
    """A request body the protocol does not allow."""


def _field(obj: Obj, name: str) -> Any:
    """A field of a Go-marshalled struct, whatever the case of its name (Go decodes so)."""
    if name in obj:
        return obj[name]
    lowered = name.lower()
    return next((value for key, value in obj.items() if key.lower() == lowered), None)


def _node_names(args: Obj) -> list[str]:
    names = _field(args, "NodeNames")
    if isinstance(names, list):
        return [str(n) for n in names]
    nodes = _field(args, "Nodes")
    if isinstance(nodes, Mapping):
        return [str((item.get("metadata") or {}).get("name") or "") for item in nodes.get("items") or ()]
    raise ExtenderRequestError("ExtenderArgs: neither NodeNames nor Nodes given")


async def _body(request: web.Request) -> Obj:
    if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
        raise ExtenderRequestError(f"request body over {MAX_BODY_BYTES} bytes")
    raw = await request.read()
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as err:
        raise ExtenderRequestError(f"request body is not JSON: {err}") from None
    if not isinstance(body, Mapping):
        raise ExtenderRequestError("request body is not a JSON object")
    return body


def _answer(body: Any) -> web.Response:
    return web.Response(body=orjson.dumps(body), content_type="application/json")


class Extender:
    """The protocol's verbs over one scheduler's cluster and its first profile."""

    def __init__(self, scheduler: Scheduler, client: ApiClient) -> None:
        self.scheduler = scheduler
        self.client = client
        self.framework: Framework = next(iter(scheduler.frameworks.values()))

    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY_BYTES)
        app.router.add_post("/filter", self.filter)
        app.router.add_post("/prioritize", self.prioritize)
        app.router.add_post("/bind", self.bind)
        app.router.add_post("/preempt", self.preempt)
        return app

    def _pod(self, args: Obj) -> Any:
        pod = _field(args, "Pod")
        if not isinstance(pod, Mapping):
            raise ExtenderRequestError("ExtenderArgs: no Pod")
        try:
            return pod_info(pod)
        except ValueError as err:
            raise ExtenderRequestError(f"Pod: {err}") from None

    async def filter(self, request: web.Request) -> web.Response:
        try:
            args = await _body(request)
            pod, names = self._pod(args), _node_names(args)
        except ExtenderRequestError as err:
            return _answer({"Error": str(err)})
        passing, failed, unresolvable = self.framework.extender_filter(pod, names)
        result: dict[str, Any] = {
            "FailedNodes": failed,
            "FailedAndUnresolvableNodes": unresolvable,
            "Error": "",
        }
        if isinstance(_field(args, "NodeNames"), list):
            result["NodeNames"] = passing
        else:
            nodes = _field(args, "Nodes") or {}
            kept = set(passing)
            result["Nodes"] = {
                **nodes,
                "items": [
                    n for n in nodes.get("items") or () if (n.get("metadata") or {}).get("name") in kept
                ],
            }
        return _answer(result)

    async def prioritize(self, request: web.Request) -> web.Response:
        try:
            args = await _body(request)
            pod, names = self._pod(args), _node_names(args)
        except ExtenderRequestError as err:
            log.warning("prioritize: %s", err)
            return _answer([])
        scores = self.framework.extender_scores(pod, names)
        return _answer(
            [{"Host": name, "Score": scores[name] * MAX_EXTENDER_PRIORITY // 100} for name in names]
        )

    async def bind(self, request: web.Request) -> web.Response:
        try:
            args = await _body(request)
            name, namespace = str(_field(args, "PodName") or ""), str(_field(args, "PodNamespace") or "")
            uid, node = str(_field(args, "PodUID") or ""), str(_field(args, "Node") or "")
            if not name or not node:
                raise ExtenderRequestError("ExtenderBindingArgs: PodName and Node are required")
        except ExtenderRequestError as err:
            return _answer({"Error": str(err)})
        return _answer({"Error": await self._bind(namespace or "default", name, uid, node)})

    async def _bind(self, namespace: str, name: str, uid: str, node: str) -> str:
        """Assume, Reserve, Permit, PreBind and Bind the pod; "" or why it was not bound."""
        try:
            obj = await self.client.get(res.PODS, name, namespace)
        except KubeError as err:
            return f"pod {namespace}/{name}: {err}"
        pod = pod_info(obj)
        if uid and pod.uid != uid:
            return f"pod {namespace}/{name}: UID {pod.uid} is not {uid} (deleted and created again)"
        points = self.framework.points
        cluster = self.scheduler.cluster
        state: CycleState = {}
        cluster.place(pod, node)
        refused, permit = points.reserve_and_permit(state, pod, node)
        if refused is None and permit.waits:
            points.unreserve(state, pod, node)
            refused = PointError(next(iter(permit.waits)), "Permit waits are not served through the extender")
        if refused is not None:
            cluster.unplace(pod.key)
            return f"{refused.plugin}: {refused.message}"
        try:
            await points.pre_bind(self.client, state, pod, node)
            await points.bind(self.client, state, pod, node)
        except (KubeError, PointError) as err:
            points.unreserve(state, pod, node)
            cluster.unplace(pod.key)
            return str(err)
        points.post_bind(state, pod, node)
        return ""

    async def preempt(self, request: web.Request) -> web.Response:
        try:
            args = await _body(request)
        except ExtenderRequestError as err:
            return _answer({"Error": str(err)})
        victims = _field(args, "NodeNameToMetaVictims")
        if not isinstance(victims, Mapping):
            victims = {
                node: {
                    "Pods": [{"UID": (p.get("metadata") or {}).get("uid")} for p in _field(v, "Pods") or ()],
                    "NumPDBViolations": _field(v, "NumPDBViolations") or 0,
                }
                for node, v in (_field(args, "NodeNameToVictims") or {}).items()
            }
        return _answer({"NodeNameToMetaVictims": victims})


async def serve(
    client: ApiClient, config: SchedulerConfig, host: str, port: int, *, sync_timeout_s: float = 120.0
) -> None:
    """Sync the informers, then answer kube-scheduler on ``host:port`` until cancelled."""
    factory = InformerFactory(client)
    scheduler = Scheduler(client, config)
    scheduler.attach(factory)
    factory.start()
    site = None
    try:
        async with asyncio.timeout(sync_timeout_s):
            await factory.wait_for_sync()
        site = await start_site(Extender(scheduler, client).app(), host, port)
        log.info("extender serving on %s:%d", host or "*", site.port)
        await asyncio.Event().wait()
    finally:
        if site is not None:
            await site.stop()
        await factory.stop()
