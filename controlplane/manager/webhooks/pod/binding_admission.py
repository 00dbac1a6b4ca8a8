"""``/validate-pod-binding``: who may bind pods (gate ``BindingAdmissionWebhook``).

Used while moving pods to koord-scheduler: a ``pods/binding`` CREATE is allowed when the
requesting user name contains one of ``--binding-admission-user-name``. Everything else is
allowed too unless all of these hold: the namespace is not excluded
(``--binding-admission-exclude-namespaces``, default ``kube-system``), it is in scope
(``--binding-admission-namespaces``: a list, or ``*`` for all; empty means no enforcement),
and the pod does not carry ``koordinator.sh/binding-admission-bypass=true`` (a pod that
cannot be read is allowed: the check fails open). ``--binding-admission-dry-run`` allows
would-be denials and only counts them. Each decision is counted in
``koord_manager_webhook_binding_admission_decisions_total``. Denials are 403 Forbidden.
"""

from __future__ import annotations

import logging

from controlplane.manager.webhooks import metrics
from controlplane.manager.webhooks.context import ClusterError, PluginStep, WebhookContext
from controlplane.manager.webhooks.review import AdmissionRequest, AdmissionResponse, allowed, denied
from koordinator.api.extension.annotations import labels_of
from koordinator.api.extension.constants import LABEL_BINDING_ADMISSION_BYPASS

__all__ = ["BindingAdmissionHandler"]

log = logging.getLogger(__name__)

NAME = "BindingAdmission"
DENIED_MESSAGE = "binding denied: username is not in the allowed list"


class BindingAdmissionHandler:
    def __init__(self, ctx: WebhookContext) -> None:
        self.ctx = ctx

    def _decide(self, decision: str) -> None:
        self.ctx.metrics.binding_decisions.labels(decision).inc()

    async def handle(self, request: AdmissionRequest) -> AdmissionResponse:
        options = self.ctx.options
        if not self.ctx.enabled("BindingAdmissionWebhook") or not options.binding_admission_user_names:
            return allowed()
        if (
            request.resource_name != "pods"
            or request.sub_resource != "binding"
            or request.operation != "CREATE"
        ):
            return allowed()
        with PluginStep(self.ctx, metrics.VALIDATING, metrics.POD, request.operation, NAME) as step:
            username = request.username
            if any(name in username for name in options.binding_admission_user_names):
                self._decide("allowed")
                return allowed()
            namespace = request.namespace
            if namespace in options.binding_admission_excluded_namespaces:
                self._decide("excluded")
                return allowed()
            scope = options.binding_admission_namespaces
            if "*" not in scope:
                if not scope:
                    return allowed()
                if namespace not in scope:
                    self._decide("out_of_scope")
                    return allowed()
            try:
                pod = await self.ctx.cluster.pod(namespace, request.name)
            except ClusterError as exc:
                log.info(
                    "binding admission: cannot read pod %s/%s, allowing: %s", namespace, request.name, exc
                )
                return allowed()
            if pod is None:
                return allowed()
            if labels_of(pod).get(LABEL_BINDING_ADMISSION_BYPASS) == "true":
                self._decide("bypass_label")
                return allowed()
            if options.binding_admission_dry_run:
                log.info(
                    "binding admission [dry run]: would deny pod %s/%s bound by %r",
                    namespace,
                    request.name,
                    username,
                )
                self._decide("dry_run")
                return allowed()
            log.info("binding admission denied: pod %s/%s bound by %r", namespace, request.name, username)
            self._decide("denied")
            step.reject()
            return denied(DENIED_MESSAGE)
