"""A ControllerSet with the recommendation or colocationprofile controller on the fake apiserver."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from controlplane.manager.controllers.colocationprofile.settings import ColocationProfileSettings
from controlplane.manager.controllers.recommendation.settings import RecommendationSettings
from controlplane.manager.controllers.running import ControllerSet, ControllerSettings
from controlplane.manager.profilerules import existing_pod_rules
from koordinator.api.features import CONTROL_PLANE_FEATURES, FeatureGates
from koordinator.kube.client import ApiClient
from koordinator.kube.timeutil import parse_time
from tests.controlplane.manager.controllers.harness import controller_set
from tests.controlplane.manager.controllers.objects import CONFIG_NAMESPACE
from testsupport.fake import FakeClock

Obj = dict[str, Any]


@contextlib.asynccontextmanager
async def controllers(
    client: ApiClient,
    names: tuple[str, ...],
    now: str,
    *,
    recommendation: RecommendationSettings | None = None,
    colocation: ColocationProfileSettings | None = None,
    gates: dict[str, bool] | None = None,
) -> AsyncIterator[ControllerSet]:
    settings = ControllerSettings(
        controllers=names,
        config_namespace=CONFIG_NAMESPACE,
        workers=2,
        gates=FeatureGates(CONTROL_PLANE_FEATURES, gates),
        colocation_profile=colocation or ColocationProfileSettings(),
        profile_rules=existing_pod_rules(),
        recommendation=recommendation or RecommendationSettings(),
    )
    async with controller_set(
        client, names, settings=settings, clock=FakeClock(epoch=parse_time(now))
    ) as running:
        yield running
