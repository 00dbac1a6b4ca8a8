"""Host tier: real cgroup v1 directories under a test-owned parent."""

from __future__ import annotations

import pytest

from koordlet.system.cgroup import io
from koordlet.system.errors import InvalidValueError, UnsupportedResourceError

pytestmark = pytest.mark.host


def test_write_and_read_back_a_knob(host_cgroup_parent, backend):
    parent = host_cgroup_parent("cpu")
    pod = parent / "pod-test"
    pod.mkdir()
    io.write_file(pod, "cpu.shares", "512")
    assert io.read_file(pod, "cpu.shares") == b"512\n"
    io.write_file(pod, "cpu.cfs_quota_us", "50000")
    rows = io.read_raw([parent, pod], ["cpu.cfs_quota_us"])
    assert rows == [[b"-1\n"], [b"50000\n"]]


def test_kernel_refusals_are_domain_errors(host_cgroup_parent):
    parent = host_cgroup_parent("cpu")
    with pytest.raises(InvalidValueError):
        io.write_file(parent, "cpu.cfs_quota_us", "not-a-number")
    with pytest.raises(UnsupportedResourceError):
        io.write_file(parent, "cpu.no_such_knob", "1")
