"""A koord-scheduler configuration for a plug-in's tests: kube-scheduler's default plug-ins
with ``plugin`` added everywhere it serves, and ``plugin`` the only score plug-in (its score
alone decides among the nodes that pass)."""

from __future__ import annotations

from typing import Any

from controlplane.scheduler.config import SchedulerConfig, parse


def only_scoring(
    plugin: str, *, weight: int = 1, args: dict[str, Any] | None = None, binds: bool = False
) -> SchedulerConfig:
    """``binds``: ``plugin`` binds before DefaultBinder (the plug-in owning reservations)."""
    plugins: dict[str, Any] = {
        "multiPoint": {"enabled": [{"name": plugin}]},
        "score": {"disabled": [{"name": "*"}], "enabled": [{"name": plugin, "weight": weight}]},
    }
    if binds:
        plugins["bind"] = {
            "disabled": [{"name": "*"}],
            "enabled": [{"name": plugin}, {"name": "DefaultBinder"}],
        }
    return parse(
        {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "profiles": [
                {
                    "schedulerName": "koord-scheduler",
                    "plugins": plugins,
                    "pluginConfig": [{"name": plugin, "args": args}] if args else [],
                }
            ],
        }
    )
