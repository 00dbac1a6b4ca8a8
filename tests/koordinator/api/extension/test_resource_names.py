"""Extended resource names, deprecated aliases and the priority -> resource mapping."""

from __future__ import annotations

import pytest

from koordinator.api.extension import resources as r
from koordinator.api.extension.priority import PriorityClass
from koordinator.api.quantity import parse_quantity


@pytest.mark.parametrize(
    ("priority", "name", "translated"),
    [
        (PriorityClass.BATCH, "cpu", "kubernetes.io/batch-cpu"),
        (PriorityClass.BATCH, "memory", "kubernetes.io/batch-memory"),
        (PriorityClass.MID, "cpu", "kubernetes.io/mid-cpu"),
        (PriorityClass.MID, "memory", "kubernetes.io/mid-memory"),
        (PriorityClass.BATCH, "nvidia.com/gpu", "nvidia.com/gpu"),
        (PriorityClass.PROD, "cpu", "cpu"),
        (PriorityClass.NONE, "memory", "memory"),
        (PriorityClass.FREE, "cpu", "cpu"),
    ],
)
def test_translate_resource_name(priority, name, translated):
    assert r.translate_resource_name(priority, name) == translated


def test_free_has_no_mapping():
    assert PriorityClass.FREE not in r.RESOURCE_NAME_MAP


@pytest.mark.parametrize(
    ("deprecated", "current"),
    [
        ("koordinator.sh/batch-cpu", "kubernetes.io/batch-cpu"),
        ("koordinator.sh/batch-memory", "kubernetes.io/batch-memory"),
        ("kubernetes.io/gpu", "koordinator.sh/gpu"),
        ("kubernetes.io/gpu-core", "koordinator.sh/gpu-core"),
        ("kubernetes.io/gpu-memory", "koordinator.sh/gpu-memory"),
        ("kubernetes.io/gpu-memory-ratio", "koordinator.sh/gpu-memory-ratio"),
        ("kubernetes.io/rdma", "koordinator.sh/rdma"),
        ("kubernetes.io/fpga", "koordinator.sh/fpga"),
        ("cpu", "cpu"),
    ],
)
def test_deprecated_aliases(deprecated, current):
    assert r.normalize_resource_name(deprecated) == current


def test_cpu_becomes_integer_milli_cores():
    assert str(r.extended_quantity("cpu", parse_quantity("500m"))) == "500"
    assert str(r.extended_quantity("cpu", parse_quantity("4"))) == "4k"
    assert r.extended_quantity("cpu", parse_quantity("4")).value() == 4000
    assert str(r.extended_quantity("memory", parse_quantity("1Gi"))) == "1Gi"


def test_extended_resource_spec_annotation_round_trip():
    text = (
        '{"containers":{"main":{"limits":{"kubernetes.io/batch-cpu":"1k","kubernetes.io/batch-memory":"1Gi"},'
        '"requests":{"kubernetes.io/batch-cpu":"500","kubernetes.io/batch-memory":"512Mi"}}}}'
    )
    spec = r.get_extended_resource_spec({r.ANNOTATION_EXTENDED_RESOURCE_SPEC: text})
    assert spec is not None
    assert spec.containers["main"].requests[r.BATCH_CPU].value() == 500
    assert spec.to_json() == text
