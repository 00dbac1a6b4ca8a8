"""``/mutate-reservation``: ClusterColocationProfiles on new Reservations (``ReservationMutatingWebhook``).

The pod algorithm on the Reservation object: labels, annotations, mappings and suffixes
go on the Reservation, ``schedulerName`` and the PriorityClass fields on
``spec.template.spec`` (only when the reservation has a template), the ``patch`` is a
strategic merge against the Reservation. Namespace selectors do not apply (Reservations
are cluster-scoped) and resources are not replaced.
"""

from __future__ import annotations

from controlplane.manager.webhooks import metrics
from controlplane.manager.webhooks.colocation import (
    ProfileError,
    ProfileTarget,
    apply_profile,
    matching_profiles,
    should_skip,
)
from controlplane.manager.webhooks.context import ClusterError, PluginStep, WebhookContext
from controlplane.manager.webhooks.jsonpatch import create_patch, json_copy
from controlplane.manager.webhooks.objects import RESERVATION, ObjectError, check
from controlplane.manager.webhooks.review import (
    AdmissionRequest,
    AdmissionResponse,
    allowed,
    errored,
    patched,
)
from controlplane.manager.webhooks.strategicmerge import RESERVATION_RULES
from koordinator.api.extension.annotations import labels_of

__all__ = ["ReservationMutatingHandler"]

NAME = "ClusterColocationProfile"
RESERVATION_TARGET = ProfileTarget(
    "Reservation", ("spec", "template", "spec"), RESERVATION_RULES, RESERVATION
)


class ReservationMutatingHandler:
    def __init__(self, ctx: WebhookContext) -> None:
        self.ctx = ctx

    async def handle(self, request: AdmissionRequest) -> AdmissionResponse:
        if request.sub_resource or request.resource_name != "reservations" or request.operation != "CREATE":
            return allowed()
        try:
            original = check(request.object, RESERVATION, "reservation")
        except ObjectError as exc:
            return errored(400, str(exc))
        reservation = json_copy(original)
        warnings: list[str] = []
        with PluginStep(self.ctx, metrics.MUTATING, metrics.RESERVATION, request.operation, NAME) as step:
            try:
                matched = await matching_profiles(
                    self.ctx.cluster.colocation_profiles(), labels_of(reservation), None, warnings
                )
                for profile in matched:
                    if should_skip(profile, self.ctx.rand_intn):
                        continue
                    reservation = await apply_profile(
                        reservation, profile, RESERVATION_TARGET, self.ctx.cluster.priority_class
                    )
            except (ProfileError, ClusterError) as exc:
                step.reject()
                return errored(500, str(exc))
        return patched(create_patch(original, reservation), warnings)
