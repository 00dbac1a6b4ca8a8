"""Collector test fixtures: a collect context over a fake host and fake states."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from koordinator.api.features import KOORDLET_FEATURES, FeatureGates
from koordinator.api.sloconfig.nodeslo import merge_node_slo_spec
from koordinator.api.types.slo import NodeSLOSpec
from koordlet.metriccache import KVStore, MetricCache
from koordlet.metrics import KoordletMetrics
from koordlet.metricsadvisor.framework import CollectContext, CollectorConfig
from koordlet.statesinformer.podmeta import PodMeta, pod_meta
from koordlet.system.cgroup.cgroupfs import CgroupFS
from tests.fakes.host import FakeHost


class FakeStates:
    def __init__(self, host: FakeHost) -> None:
        self.host = host
        self.pods: list[PodMeta] = []
        self.node: Mapping[str, Any] | None = None
        self.slo = merge_node_slo_spec(None)

    def add(self, pod: dict[str, Any]) -> PodMeta:
        meta = pod_meta(pod, self.host.layout)
        assert meta is not None
        self.pods.append(meta)
        return meta

    def get_all_pods(self) -> list[PodMeta]:
        return list(self.pods)

    def get_node(self) -> Mapping[str, Any] | None:
        return self.node

    def get_node_slo(self) -> NodeSLOSpec:
        return self.slo


def make_context(
    host: FakeHost, states: FakeStates, gates: Mapping[str, bool] | None = None, **config: Any
) -> CollectContext:
    return CollectContext(
        paths=host.paths,
        cgroups=CgroupFS.detect(host.paths),
        cache=MetricCache(),
        kv=KVStore(),
        states=states,
        metrics=KoordletMetrics(CollectorRegistry(), "node-1"),
        gates=FeatureGates(KOORDLET_FEATURES, dict(gates or {})),
        config=CollectorConfig(**config),
    )


@pytest.fixture
def states(fake_host: FakeHost) -> FakeStates:
    return FakeStates(fake_host)
