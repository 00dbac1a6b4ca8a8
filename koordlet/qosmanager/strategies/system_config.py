"""SystemConfig: node-wide memory and scheduler settings from the NodeSLO ``systemStrategy``
(gate SystemConfig). Every field is unset by default, and an unset field is left alone.

* ``minFreeKbytesFactor`` -> ``/proc/sys/vm/min_free_kbytes`` = ``capacity KiB * factor /
  10000``, within 10 MiB..10 GiB;
* ``watermarkScaleFactor`` -> ``/proc/sys/vm/watermark_scale_factor``, 10..400;
* ``memcgReapBackGround`` -> ``/sys/kernel/mm/memcg_reaper/reap_background``, 0/1 (Anolis);
* ``schedGroupIdentityEnabled`` -> ``/proc/sys/kernel/sched_group_identity_enabled``, 0/1 (Anolis);
* ``schedIdleSaverWmark`` -> ``/proc/sys/kernel/sched_idle_saver_wmark``, ns (Anolis);
* ``pageCacheLimitEnabled`` -> ``/sys/kernel/mm/pagecache_limit/enabled``, 0/1 (Anolis);
* ``schedFeatures`` -> ``/sys/kernel/debug/sched_features``, ``NAME`` or ``NO_NAME``.

Paths are under the host's proc and sys roots. A value outside its range is skipped (with a
note), as is a file this kernel does not have. ``schedFeatures`` writes one ``NAME`` or
``NO_NAME`` per feature whose current state (read from the file) differs; names the kernel
does not list are skipped. The executor validates the range again and writes only values
that differ from the file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from koordinator.api.types.slo import SystemStrategy
from koordlet.executor import FileUpdate
from koordlet.qosmanager.framework import GatedStrategy, Plan, Snapshot
from koordlet.system.paths import HostPaths

NAME = "SystemConfig"
GATE = "SystemConfig"
MIN_FREE_KBYTES = (10 * 1024, 10 * 1024 * 1024)
WATERMARK_SCALE_FACTOR = (10, 400)
BOOLEAN = (0, 1)
NANOSECONDS = (0, (1 << 63) - 1)


@dataclass(frozen=True)
class Setting:
    field: str
    path: Path
    value: int | None
    low: int
    high: int


def sched_features_path(paths: HostPaths) -> Path:
    return paths.sys("kernel", "debug", "sched_features")


def read_sched_features(path: Path) -> dict[str, bool]:
    """``NAME`` (on) and ``NO_NAME`` (off) tokens of the sched_features file."""
    state: dict[str, bool] = {}
    for token in path.read_text().split():
        if token.startswith("NO_"):
            state[token[3:]] = False
        else:
            state[token] = True
    return state


def settings(strategy: SystemStrategy, paths: HostPaths, memory_bytes: int | None) -> list[Setting]:
    min_free: int | None = None
    if strategy.min_free_kbytes_factor is not None and memory_bytes is not None and memory_bytes > 0:
        min_free = memory_bytes // 1024 * strategy.min_free_kbytes_factor // 10000
    return [
        Setting(
            "minFreeKbytesFactor", paths.proc("sys", "vm", "min_free_kbytes"), min_free, *MIN_FREE_KBYTES
        ),
        Setting(
            "watermarkScaleFactor",
            paths.proc("sys", "vm", "watermark_scale_factor"),
            strategy.watermark_scale_factor,
            *WATERMARK_SCALE_FACTOR,
        ),
        Setting(
            "memcgReapBackGround",
            paths.sys("kernel", "mm", "memcg_reaper", "reap_background"),
            strategy.memcg_reap_background,
            *BOOLEAN,
        ),
        Setting(
            "schedGroupIdentityEnabled",
            paths.proc("sys", "kernel", "sched_group_identity_enabled"),
            strategy.sched_group_identity_enabled,
            *BOOLEAN,
        ),
        Setting(
            "schedIdleSaverWmark",
            paths.proc("sys", "kernel", "sched_idle_saver_wmark"),
            strategy.sched_idle_saver_wmark,
            *NANOSECONDS,
        ),
        Setting(
            "pageCacheLimitEnabled",
            paths.sys("kernel", "mm", "pagecache_limit", "enabled"),
            strategy.page_cache_limit_enabled,
            *BOOLEAN,
        ),
    ]


class SystemConfig(GatedStrategy):
    NAME = NAME
    GATE = GATE

    def plan(self, snapshot: Snapshot) -> Plan:
        plan = Plan(NAME)
        strategy = snapshot.node_slo.system_strategy
        if strategy is None:
            return plan.note("no systemStrategy in the NodeSLO")
        paths = snapshot.host_paths
        memory = snapshot.node.capacity.get("memory")
        if strategy.min_free_kbytes_factor is not None and not memory:
            plan.note("minFreeKbytesFactor: node memory capacity unknown")
        for setting in settings(strategy, paths, memory):
            if setting.value is None:
                continue
            if not setting.low <= setting.value <= setting.high:
                plan.note(
                    f"{setting.field}: {setting.value} outside [{setting.low}, {setting.high}], not set"
                )
                continue
            if not setting.path.is_file():
                plan.note(f"{setting.field}: {setting.path} not provided by this kernel")
                continue
            plan.updates.append(FileUpdate(setting.path, str(setting.value), setting.low, setting.high, NAME))
        if strategy.sched_features:
            self._sched_features(plan, strategy.sched_features, sched_features_path(paths))
        return plan

    @staticmethod
    def _sched_features(plan: Plan, wanted: dict[str, bool], path: Path) -> None:
        try:
            state = read_sched_features(path)
        except OSError:
            plan.note(f"schedFeatures: {path} not readable (debugfs not mounted?)")
            return
        for name, enable in sorted(wanted.items()):
            if name not in state:
                plan.note(f"schedFeatures: {name} is not a feature of this kernel")
            elif state[name] != enable:
                plan.updates.append(FileUpdate(path, name if enable else f"NO_{name}", owner=NAME))
