"""koord-manager's admission webhooks: one table of paths, one dispatcher, one handler per path.

:data:`WEBHOOKS` lists every path upstream serves, with its feature gate and the upstream
webhook names (the names the Mutating/ValidatingWebhookConfigurations use). Only paths
whose gate is on are served (:func:`enabled_webhooks`); the TLS controller drops the
configuration entries of the others, as upstream does. The table is the single
registration point (no import-time side effects); :func:`enabled_webhooks` checks that
paths are unique.

The handlers live in ``pod/``, ``elasticquota/``, ``node/``, ``configmap/`` and
``reservation/``; :mod:`.review` is the AdmissionReview wire format, :mod:`.dispatch`
turns request bodies into answers, :mod:`.context` carries what handlers may read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from controlplane.manager.webhooks.configmap.validating import ConfigMapValidatingHandler
from controlplane.manager.webhooks.context import Handler, WebhookContext
from controlplane.manager.webhooks.elasticquota.mutating import ElasticQuotaMutatingHandler
from controlplane.manager.webhooks.elasticquota.validating import ElasticQuotaValidatingHandler
from controlplane.manager.webhooks.node.mutating import NodeMutatingHandler
from controlplane.manager.webhooks.node.validating import NodeValidatingHandler
from controlplane.manager.webhooks.pod.binding_admission import BindingAdmissionHandler
from controlplane.manager.webhooks.pod.mutating import PodMutatingHandler
from controlplane.manager.webhooks.pod.validating import PodValidatingHandler
from controlplane.manager.webhooks.reservation.mutating import ReservationMutatingHandler

__all__ = ["WEBHOOKS", "WebhookPath", "build_handlers", "enabled_webhooks"]

MUTATING = "mutating"
VALIDATING = "validating"


@dataclass(frozen=True)
class WebhookPath:
    """One served path."""

    path: str
    gate: str
    kind: str  # "mutating" | "validating"
    #: Upstream webhook names served by this path.
    names: tuple[str, ...]
    factory: Callable[[WebhookContext], Handler]
    #: AdmissionReview versions upstream registers (``/validate-configmap`` only ``v1beta1``).
    review_versions: tuple[str, ...] = ("v1", "v1beta1")


WEBHOOKS: tuple[WebhookPath, ...] = (
    WebhookPath(
        "/mutate-pod",
        "PodMutatingWebhook",
        MUTATING,
        ("mpod-create.koordinator.sh", "mpod-update.koordinator.sh"),
        PodMutatingHandler,
    ),
    WebhookPath(
        "/validate-pod", "PodValidatingWebhook", VALIDATING, ("vpod.koordinator.sh",), PodValidatingHandler
    ),
    WebhookPath(
        "/validate-pod-binding",
        "PodValidatingWebhook",
        VALIDATING,
        ("vpodbinding.koordinator.sh",),
        BindingAdmissionHandler,
    ),
    WebhookPath(
        "/mutate-node-status",
        "NodeMutatingWebhook",
        MUTATING,
        ("mnode-status.koordinator.sh",),
        NodeMutatingHandler,
    ),
    WebhookPath(
        "/validate-node",
        "NodeValidatingWebhook",
        VALIDATING,
        ("vnode.koordinator.sh",),
        NodeValidatingHandler,
    ),
    WebhookPath(
        "/mutate-scheduling-sigs-k8s-io-v1alpha1-elasticquota",
        "ElasticMutatingWebhook",
        MUTATING,
        ("melasticquota.koordinator.sh",),
        ElasticQuotaMutatingHandler,
    ),
    WebhookPath(
        "/validate-scheduling-sigs-k8s-io-v1alpha1-elasticquota",
        "ElasticValidatingWebhook",
        VALIDATING,
        ("velasticquota.koordinator.sh",),
        ElasticQuotaValidatingHandler,
    ),
    WebhookPath(
        "/validate-configmap",
        "ConfigMapValidatingWebhook",
        VALIDATING,
        ("vconfigmap.koordinator.sh",),
        ConfigMapValidatingHandler,
        review_versions=("v1beta1",),
    ),
    WebhookPath(
        "/mutate-reservation",
        "ReservationMutatingWebhook",
        MUTATING,
        ("mreservation-create.koordinator.sh",),
        ReservationMutatingHandler,
    ),
)


def enabled_webhooks(ctx: WebhookContext, table: tuple[WebhookPath, ...] = WEBHOOKS) -> list[WebhookPath]:
    """The paths whose gate is on; raises ``ValueError`` when a path is registered twice."""
    seen: set[str] = set()
    for webhook in table:
        if webhook.path in seen:
            raise ValueError(f"webhook path {webhook.path} registered twice")
        seen.add(webhook.path)
    return [webhook for webhook in table if ctx.enabled(webhook.gate)]


def build_handlers(ctx: WebhookContext) -> dict[str, Handler]:
    """Path -> handler for every enabled webhook."""
    return {webhook.path: webhook.factory(ctx) for webhook in enabled_webhooks(ctx)}
