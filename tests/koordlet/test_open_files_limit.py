"""The koordlet raises its soft open files limit (RLIMIT_NOFILE) to the hard limit at start,
as Go programs do, logs both, and starts all the same when it cannot."""

from __future__ import annotations

import errno
import logging
import resource
import socket
import subprocess
import sys

import pytest

from koordlet.__main__ import raise_open_files_limit
from tests.fakes.host import FakeHost

NOFILE = resource.RLIMIT_NOFILE


class Limits:
    """A process's limits, as getrlimit/setrlimit see them; ``refuse`` makes setrlimit fail."""

    def __init__(self, soft: int, hard: int, refuse: OSError | None = None) -> None:
        self.values = {NOFILE: (soft, hard)}
        self.refuse = refuse

    def get(self, which: int) -> tuple[int, int]:
        return self.values[which]

    def set(self, which: int, limits: tuple[int, int]) -> None:
        if self.refuse is not None:
            raise self.refuse
        self.values[which] = limits


def _messages(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "koordlet.__main__"]


def test_the_soft_limit_is_raised_to_the_hard_one(caplog):
    caplog.set_level(logging.INFO)
    limits = Limits(1024, 1_048_576)
    raise_open_files_limit(limits.get, limits.set)
    assert limits.values[NOFILE] == (1_048_576, 1_048_576)
    assert _messages(caplog) == [
        (logging.INFO, "open files limit (RLIMIT_NOFILE) raised from 1024 to the hard limit 1048576")
    ]


def test_a_soft_limit_already_at_the_hard_one_is_left_alone(caplog):
    caplog.set_level(logging.INFO)
    limits = Limits(65536, 65536, refuse=OSError(errno.EPERM, "must not be called"))
    raise_open_files_limit(limits.get, limits.set)
    assert limits.values[NOFILE] == (65536, 65536)
    assert _messages(caplog) == [(logging.INFO, "open files limit (RLIMIT_NOFILE): 65536, the hard limit")]


def test_a_limit_that_cannot_be_raised_is_logged_and_the_agent_goes_on(caplog):
    limits = Limits(1024, 4096, refuse=OSError(errno.EPERM, "Operation not permitted"))
    raise_open_files_limit(limits.get, limits.set)
    assert limits.values[NOFILE] == (1024, 4096)
    [(level, message)] = _messages(caplog)
    assert level == logging.WARNING
    assert message.startswith(
        "cannot raise the open files limit (RLIMIT_NOFILE) from 1024 to the hard limit 4096: "
        "[Errno 1] Operation not permitted"
    )


def test_a_limit_that_cannot_be_read_is_logged(caplog):
    def unreadable(which: int) -> tuple[int, int]:
        raise OSError(errno.EINVAL, "Invalid argument")

    raise_open_files_limit(unreadable, Limits(0, 0).set)
    assert _messages(caplog) == [
        (logging.WARNING, "cannot read the open files limit (RLIMIT_NOFILE): [Errno 22] Invalid argument")
    ]


def test_the_agent_raises_its_limit_when_it_starts(tmp_path):
    _soft, hard = resource.getrlimit(NOFILE)
    if hard != resource.RLIM_INFINITY and hard <= 256:
        pytest.skip(f"the hard open files limit here is {hard}: nothing to raise a 256 soft limit to")
    host = FakeHost(tmp_path, "v1")
    roots = [
        f"--cgroup-root-dir={host.paths.cgroup_root}",
        f"--proc-root-dir={host.paths.proc_root}",
        f"--sys-root-dir={host.paths.sys_root}",
        f"--tsdb-path={tmp_path / 'metric-data'}",
    ]
    with socket.socket() as taken:  # the agent stops right after start-up: its port is taken
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [
                *("sh", "-c", 'ulimit -Sn 256 && exec "$@"', "sh"),
                *(sys.executable, "-m", "koordlet", *roots, "--standalone", f"--addr=127.0.0.1:{port}"),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 1, done.stderr
    shown = "unlimited" if hard == resource.RLIM_INFINITY else str(hard)
    assert f"open files limit (RLIMIT_NOFILE) raised from 256 to the hard limit {shown}" in done.stderr
