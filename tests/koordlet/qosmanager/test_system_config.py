"""SystemConfig plans: sysctls with ranges, only for files the kernel has, and sched_features."""

from __future__ import annotations

from typing import Any

import pytest

from koordlet.executor import FileUpdate, ResourceUpdateExecutor
from koordlet.qosmanager.strategies.system_config import SystemConfig
from koordlet.system.cgroup.cgroupfs import CgroupFS
from tests.fakes.host import FakeHost
from tests.koordlet.qosmanager.strategy_env import build_snapshot, node_obj

FILES = {
    "min_free": "proc/sys/vm/min_free_kbytes",
    "watermark": "proc/sys/vm/watermark_scale_factor",
    "reaper": "sys/kernel/mm/memcg_reaper/reap_background",
    "identity": "proc/sys/kernel/sched_group_identity_enabled",
    "idle_saver": "proc/sys/kernel/sched_idle_saver_wmark",
    "pagecache": "sys/kernel/mm/pagecache_limit/enabled",
    "features": "sys/kernel/debug/sched_features",
}
MAINLINE = ("min_free", "watermark", "features")


def make_host(fake_host: FakeHost, files=tuple(FILES)) -> FakeHost:
    defaults = {"features": "GENTLE_FAIR_SLEEPERS NO_NEXT_BUDDY WAKEUP_PREEMPTION\n"}
    for name in files:
        fake_host.write(FILES[name], defaults.get(name, "0\n"))
    return fake_host


def system(**fields: Any) -> dict[str, Any]:
    return {"systemStrategy": fields}


def writes(host: FakeHost, plan) -> list[tuple[str, str, int | None, int | None]]:
    return [
        (str(u.path.relative_to(host.root)), u.value, u.low, u.high)
        for u in plan.updates
        if isinstance(u, FileUpdate)
    ]


@pytest.mark.parametrize(
    ("case", "fields", "expected", "note"),
    [
        # 16Gi = 16777216 KiB * 100 / 10000
        (
            "min_free_kbytes",
            {"minFreeKbytesFactor": 100},
            [(FILES["min_free"], "167772", 10240, 10485760)],
            None,
        ),
        # 1677 KiB is under 10 MiB
        (
            "min_free too low",
            {"minFreeKbytesFactor": 1},
            [],
            "minFreeKbytesFactor: 1677 outside [10240, 10485760], not set",
        ),
        (
            "min_free too high",
            {"minFreeKbytesFactor": 10000},
            [],
            "minFreeKbytesFactor: 16777216 outside [10240, 10485760], not set",
        ),
        ("watermark", {"watermarkScaleFactor": 150}, [(FILES["watermark"], "150", 10, 400)], None),
        (
            "watermark too low",
            {"watermarkScaleFactor": 5},
            [],
            "watermarkScaleFactor: 5 outside [10, 400], not set",
        ),
        ("reaper", {"memcgReapBackGround": 1}, [(FILES["reaper"], "1", 0, 1)], None),
        ("group identity", {"schedGroupIdentityEnabled": 1}, [(FILES["identity"], "1", 0, 1)], None),
        (
            "idle saver",
            {"schedIdleSaverWmark": 1_000_000},
            [(FILES["idle_saver"], "1000000", 0, (1 << 63) - 1)],
            None,
        ),
        ("page cache limit", {"pageCacheLimitEnabled": 1}, [(FILES["pagecache"], "1", 0, 1)], None),
        (
            "sched features",
            {"schedFeatures": {"NEXT_BUDDY": True, "WAKEUP_PREEMPTION": True, "GENTLE_FAIR_SLEEPERS": False}},
            [
                (FILES["features"], "NO_GENTLE_FAIR_SLEEPERS", None, None),
                (FILES["features"], "NEXT_BUDDY", None, None),
            ],
            None,
        ),
        (
            "unknown sched feature",
            {"schedFeatures": {"NO_SUCH": True}},
            [],
            "schedFeatures: NO_SUCH is not a feature of this kernel",
        ),
        ("nothing set (the default)", {}, [], None),
    ],
)
def test_settings(fake_host, case, fields, expected, note):
    host = make_host(fake_host)
    plan = SystemConfig().plan(build_snapshot(host, slo=system(**fields)))
    assert writes(host, plan) == expected, case
    if note is not None:
        assert note in plan.notes
    assert plan.leveled == []


def test_no_nodeslo_sets_nothing(fake_host):
    host = make_host(fake_host)
    assert SystemConfig().plan(build_snapshot(host)).empty


def test_files_this_kernel_lacks_are_skipped(fake_host):
    host = make_host(fake_host, MAINLINE)
    fields = {"minFreeKbytesFactor": 100, "memcgReapBackGround": 1, "schedGroupIdentityEnabled": 1}
    plan = SystemConfig().plan(build_snapshot(host, slo=system(**fields)))
    assert writes(host, plan) == [(FILES["min_free"], "167772", 10240, 10485760)]
    assert f"memcgReapBackGround: {host.root / FILES['reaper']} not provided by this kernel" in plan.notes


def test_sched_features_without_debugfs(fake_host):
    host = make_host(fake_host, ("min_free",))
    plan = SystemConfig().plan(build_snapshot(host, slo=system(schedFeatures={"NEXT_BUDDY": True})))
    assert plan.empty
    assert any(n.startswith("schedFeatures:") and "not readable" in n for n in plan.notes)


def test_memory_capacity_unknown(fake_host):
    host = make_host(fake_host)
    node = {"metadata": {"name": "node-1"}, "status": {"capacity": {"cpu": "8"}}}
    plan = SystemConfig().plan(build_snapshot(host, node=node, slo=system(minFreeKbytesFactor=100)))
    assert plan.empty
    assert "minFreeKbytesFactor: node memory capacity unknown" in plan.notes


def test_capacity_scales_min_free(fake_host):
    host = make_host(fake_host)
    plan = SystemConfig().plan(
        build_snapshot(host, node=node_obj(memory="64Gi"), slo=system(minFreeKbytesFactor=100))
    )
    assert writes(host, plan) == [(FILES["min_free"], "671088", 10240, 10485760)]


def test_the_plan_applies(fake_host):
    host = make_host(fake_host)
    plan = SystemConfig().plan(
        build_snapshot(host, slo=system(minFreeKbytesFactor=100, watermarkScaleFactor=150))
    )
    executor = ResourceUpdateExecutor(CgroupFS.detect(host.paths))
    assert [o.error for o in executor.update_batch(plan.updates)] == [None, None]
    assert host.read(FILES["min_free"]).strip() == "167772"
    assert host.read(FILES["watermark"]).strip() == "150"


def test_gate(fake_host):
    assert SystemConfig().enabled(build_snapshot(fake_host)) == (False, "feature gate SystemConfig is off")
    assert SystemConfig().enabled(build_snapshot(fake_host, gates={"SystemConfig": True})) == (True, "")
