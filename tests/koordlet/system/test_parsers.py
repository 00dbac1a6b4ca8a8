"""The C parsers and their Python twins: one test body per backend, and a property test
that both give the same answer (value or refusal) for any input."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from koordlet.system import native
from koordlet.system.cgroup import io, pyio
from koordlet.system.errors import MalformedContentError


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        pytest.param(b"123\n", 123, id="plain"),
        pytest.param(b"max\n", -1, id="max-is-unlimited"),
        pytest.param(b"  -1\n", -1, id="leading-space-negative"),
        pytest.param(b"100000 100000\n", 100000, id="first-token-of-cpu.max"),
        pytest.param(b"9223372036854775807", (1 << 63) - 1, id="int64-max"),
        pytest.param(b"-9223372036854775808", -(1 << 63), id="int64-min"),
    ],
)
def test_parse_int(backend, data, expected):
    assert io.parse_int(data) == expected


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"", id="empty"),
        pytest.param(b"abc\n", id="word"),
        pytest.param(b"1.5\n", id="fraction"),
        pytest.param(b"12abc", id="trailing-garbage"),
        pytest.param(b"9223372036854775808", id="overflow"),
        pytest.param(b"maximum", id="max-prefix"),
        pytest.param(b"+5", id="plus-sign"),
    ],
)
def test_parse_int_refuses(backend, data):
    with pytest.raises(MalformedContentError):
        io.parse_int(data, "cpu.shares")


MEMORY_STAT_V1 = b"cache 4096\nrss 8192\ntotal_cache 40960\ntotal_rss 81920\ntotal_inactive_anon 100\n"


def test_parse_keys_takes_first_occurrence_and_reports_absent(backend):
    assert io.parse_keys(MEMORY_STAT_V1, (b"total_rss", b"rss", b"total_swap")) == (81920, 8192, None)
    assert io.parse_keys(b"key\t7\n", (b"key",)) == (7,)
    assert io.parse_keys(b"MemTotal:       16384 kB\n", (b"MemTotal:",)) == (16384,)


def test_parse_keys_ignores_broken_lines_of_other_keys(backend):
    assert io.parse_keys(b"junk line here\nnr_periods 5\n", (b"nr_periods",)) == (5,)


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"nr_periods abc\n", id="non-numeric"),
        pytest.param(b"nr_periods\n", id="missing-value"),
        pytest.param(b"nr_periods 12x\n", id="trailing-garbage"),
    ],
)
def test_parse_keys_refuses_a_wanted_key_without_a_number(backend, data):
    with pytest.raises(MalformedContentError):
        io.parse_keys(data, (b"nr_periods",))


PSI_FULL = b"some avg10=1.25 avg60=0.50 avg300=0.10 total=123\nfull avg10=2.129 avg60=0 avg300=0.1 total=5\n"


def test_parse_psi(backend):
    assert io.parse_psi(PSI_FULL) == (125, 50, 10, 123, 212, 0, 10, 5)
    some_only = b"some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
    assert io.parse_psi(some_only) == (0, 0, 0, 0, None, None, None, None)
    newer_kernel = b"some avg10=1.00 avg60=1.00 avg300=1.00 total=1 future=3\n"
    assert io.parse_psi(newer_kernel)[:4] == (100, 100, 100, 1)


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"", id="empty"),
        pytest.param(b"full avg10=1 avg60=1 avg300=1 total=1\n", id="no-some-line"),
        pytest.param(b"some avg10=1.00 avg60=0.50 total=1\n", id="missing-field"),
        pytest.param(b"some avg10=x avg60=0.50 avg300=0.10 total=1\n", id="non-numeric"),
        pytest.param(b"some avg10=1. avg60=0.50 avg300=0.10 total=1\n", id="bare-point"),
        pytest.param(b"some avg10=1.00 avg60=0.50 avg300=0.10 total=-1\n", id="negative-total"),
        pytest.param(b"some avg10=1.00 avg60=0.50 avg300=0.10 tot", id="truncated"),
    ],
)
def test_parse_psi_refuses(backend, data):
    with pytest.raises(MalformedContentError):
        io.parse_psi(data)


NUMA_STAT_V1 = (
    b"total=3 N0=1 N1=2\nfile=0 N0=0 N1=0\nhierarchical_total=300 N0=100 N1=200\n"
    b"hierarchical_file=0 N0=0 N1=0\n"
)


def test_parse_nodes(backend):
    keys = (b"hierarchical_total=", b"total=", b"hierarchical_anon=")
    assert io.parse_nodes(NUMA_STAT_V1, keys) == (((0, 100), (1, 200)), ((0, 1), (1, 2)), None)
    v2 = b"anon N0=4096 N2=8192\nanon_thp N0=1 N2=1\nfile\tN0=1\tN2=0\n"
    assert io.parse_nodes(v2, (b"anon ", b"file")) == (((0, 4096), (2, 8192)), ((0, 1), (2, 0)))
    assert io.parse_nodes(b"total=0\n", (b"total=",)) == ((),)  # a node-less line


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"total=3 N0=x\n", id="non-numeric"),
        pytest.param(b"total=3 N0=-1\n", id="negative"),
        pytest.param(b"total=3 0=1\n", id="no-N"),
        pytest.param(b"total=3 N=1\n", id="no-node"),
        pytest.param(b"total=3 N0 1\n", id="no-equals"),
        pytest.param(b"total=3 " + b" ".join(b"N%d=1" % n for n in range(65)) + b"\n", id="65-nodes"),
    ],
)
def test_parse_nodes_refuses(backend, data):
    with pytest.raises(MalformedContentError):
        io.parse_nodes(data, (b"total=",))


def _outcome(fn: Callable[..., object], *args: object) -> object:
    try:
        return fn(*args)
    except OSError as err:
        return ("refused", err.errno)


_TEXT = st.binary(max_size=80) | st.text(alphabet="0123456789 -.\tmaxsomefulavg=total\n", max_size=80).map(
    str.encode
)


def _compiled() -> Any:
    module = native.load("_cgroupfs")
    if module is None:
        pytest.fail("the native extension is not built; run `make install`")
    return module


@settings(max_examples=400, deadline=None)
@given(_TEXT)
def test_native_and_twin_agree_on_integers_and_psi(data):
    module = _compiled()
    assert _outcome(module.parse_int, data) == _outcome(pyio.parse_int, data)
    assert _outcome(module.parse_psi, data) == _outcome(pyio.parse_psi, data)


@settings(max_examples=400, deadline=None)
@given(_TEXT, st.lists(st.sampled_from([b"max", b"some", b"total", b"a", b"10"]), unique=True, max_size=4))
def test_native_and_twin_agree_on_key_value_files(data, keys):
    module = _compiled()
    assert _outcome(module.parse_keys, data, tuple(keys)) == _outcome(pyio.parse_keys, data, tuple(keys))


@settings(max_examples=400, deadline=None)
@given(
    st.binary(max_size=80) | st.text(alphabet="N0123456789 =-\ttotalanofie\n", max_size=80).map(str.encode),
    st.lists(st.sampled_from([b"total=", b"anon ", b"file", b"N", b"t"]), unique=True, max_size=3),
)
def test_native_and_twin_agree_on_numa_stat_lines(data, keys):
    module = _compiled()
    assert _outcome(module.parse_nodes, data, tuple(keys)) == _outcome(pyio.parse_nodes, data, tuple(keys))
