"""What every webhook handler is given: the cluster view, gates, metrics, quota tree, options,
and the quota evaluator.

Handlers never talk to the API directly. They read through a :class:`ClusterReader`: the
running manager backs it with informers (falling back to a GET for a namespace or a
PriorityClass the cache has not seen yet), ``koord-manager admit`` with the objects of a
YAML file (:class:`~controlplane.manager.webhooks.cluster.StaticCluster`). Both go through
the same handlers, so the offline answer is the server's answer.

:class:`PluginStep` times one plug-in step of a handler and records it in
``koord_manager_webhook_webhook_duration_milliseconds``.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Protocol

from controlplane.manager.webhooks.elasticquota.topology import QuotaTopology
from controlplane.manager.webhooks.metrics import StepSeries, WebhookMetrics
from controlplane.manager.webhooks.quotaevaluate.evaluator import QuotaEvaluator
from controlplane.manager.webhooks.review import AdmissionRequest, AdmissionResponse
from koordinator.api.features import CONTROL_PLANE_FEATURES, FeatureGates
from koordinator.api.sloconfig.config import CONFIG_NAME, CONFIG_NAMESPACE

__all__ = [
    "ClusterError",
    "ClusterReader",
    "Handler",
    "PluginStep",
    "WebhookContext",
    "WebhookOptions",
]

Obj = dict[str, Any]


class ClusterError(RuntimeError):
    """A lookup the webhook needs failed (the request is answered with status code 500)."""


class ClusterReader(Protocol):
    """Read access to the objects the webhooks consult."""

    async def namespace(self, name: str) -> Obj | None:
        """The Namespace, or ``None`` when it does not exist."""

    async def priority_class(self, name: str) -> Obj | None:
        """The ``scheduling.k8s.io/v1`` PriorityClass, or ``None`` when it does not exist."""

    def colocation_profiles(self) -> Sequence[Obj]:
        """Every ClusterColocationProfile."""

    def elastic_quota_profiles(self) -> Sequence[Obj]:
        """Every ElasticQuotaProfile."""

    def nodes(self) -> Sequence[Obj]:
        """Every Node (their labels decide which slo-controller-config entry applies)."""

    def config_map(self, namespace: str, name: str) -> Obj | None:
        """One ConfigMap (the webhooks read only ``slo-controller-config``)."""

    async def pods(self, namespace: str | None = None, labels: Mapping[str, str] | None = None) -> list[Obj]:
        """Pods in ``namespace`` (``None``: all) carrying every label in ``labels``."""

    async def pod(self, namespace: str, name: str) -> Obj | None:
        """One Pod, or ``None`` when it does not exist."""


@dataclass(frozen=True)
class WebhookOptions:
    """Settings of the webhooks that come from flags rather than feature gates."""

    config_namespace: str = CONFIG_NAMESPACE
    slo_config_name: str = CONFIG_NAME
    #: ``--node-strategy-name-need-check``: node strategies need unique, non-empty names.
    node_strategy_name_need_check: bool = False
    #: ``--binding-admission-user-name``: substrings of the user names that may bind pods (empty: everybody).
    binding_admission_user_names: tuple[str, ...] = ()
    #: ``--binding-admission-namespaces``: namespaces checked (empty: none, ``("*",)``: all).
    binding_admission_namespaces: tuple[str, ...] = ()
    #: ``--binding-admission-exclude-namespaces``: namespaces never checked.
    binding_admission_excluded_namespaces: tuple[str, ...] = ("kube-system",)
    #: ``--binding-admission-dry-run``: log and count would-be denials, allow everything.
    binding_admission_dry_run: bool = False


@dataclass
class WebhookContext:
    cluster: ClusterReader
    gates: FeatureGates = field(default_factory=lambda: FeatureGates(CONTROL_PLANE_FEATURES))
    metrics: WebhookMetrics = field(default_factory=WebhookMetrics)
    quotas: QuotaTopology = field(default_factory=QuotaTopology)
    options: WebhookOptions = field(default_factory=WebhookOptions)
    #: charges pods to ElasticQuotas (``EnableQuotaAdmission``); ``None`` where none is set up
    quota_evaluator: QuotaEvaluator | None = None
    #: ``rand.Intn``: the ClusterColocationProfile probability draw (``koord-manager admit --random``).
    rand_intn: Callable[[int], int] = random.randrange

    def enabled(self, gate: str) -> bool:
        return self.gates.enabled(gate)


class Handler(Protocol):
    """One webhook path."""

    async def handle(self, request: AdmissionRequest) -> AdmissionResponse: ...


class PluginStep:
    """``with PluginStep(ctx, "mutate", "pod", "CREATE", "ClusterColocationProfile") as step:``.

    The step counts as rejected when the block raises or calls :meth:`reject`.
    """

    __slots__ = ("_series", "_start", "rejected")

    def __init__(
        self, ctx: WebhookContext, webhook_type: str, object_type: str, operation: str, plugin: str
    ) -> None:
        self._series = ctx.metrics.step(webhook_type, object_type, operation, plugin)
        self._start = 0.0
        self.rejected = False

    @classmethod
    def of(cls, series: StepSeries) -> PluginStep:
        """A step recorded in ``series`` (from :meth:`WebhookMetrics.step`, kept by a hot handler)."""
        step = cls.__new__(cls)
        step._series = series
        step._start = 0.0
        step.rejected = False
        return step

    def reject(self) -> None:
        self.rejected = True

    def __enter__(self) -> PluginStep:
        self._start = time.perf_counter()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._series.observe(self.rejected or exc is not None, time.perf_counter() - self._start)
