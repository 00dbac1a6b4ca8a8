"""The ``slo-controller-config`` ConfigMap as the controllers see it: watched, validated, merged.

Every key of the ConfigMap (``colocation-config``, ``resource-threshold-config``, ...) is
parsed and validated on its own (:func:`koordinator.api.sloconfig.parse_config`):

* a key that is absent, or a ConfigMap that does not exist, means upstream's defaults;
* a key that fails to parse or validate keeps its last good value, and the failure is
  logged and told to the user as a Warning Event on the ConfigMap, one per key, with
  upstream's reasons (``ColocationCfgUnmarshalFailed`` for ``colocation-config``,
  ``SLOCfgUnmarshalFailed`` for the others) and messages (``failed to unmarshal ThresholdCfg,
  err: ...``);
* ``colocation-config`` must also merge with the defaults into a valid cluster strategy.
  Until it has been good once (a manager started while it is broken) the colocation
  config is *unavailable*: the noderesource and nodemetric controllers then leave nodes
  as they are instead of acting on defaults the user did not ask for.

Listeners registered with :meth:`SLOConfigCache.subscribe` learn which keys changed their
effective value; the controllers re-enqueue every node then.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from koordinator.api.schema.errors import FieldError
from koordinator.api.sloconfig.config import (
    COLOCATION_CONFIG_KEY,
    CONFIG_KEYS,
    SLOControllerConfig,
    cluster_colocation_strategy,
    invalid_key_event,
    parse_config,
)
from koordinator.kube import resources as res
from koordinator.kube.events import WARNING, EventRecorder
from koordinator.kube.informer import InformerFactory, Tombstone

__all__ = ["ParsedConfig", "SLOConfigCache", "parse_slo_config"]

log = logging.getLogger(__name__)

Obj = dict[str, Any]


@dataclass
class ParsedConfig:
    """A parse of the ConfigMap data against the previous good config."""

    config: SLOControllerConfig
    #: key -> its errors (those keys kept their previous value)
    errors: dict[str, list[FieldError]] = field(default_factory=dict)

    def messages(self) -> list[str]:
        return [str(error) for errors in self.errors.values() for error in errors]


def _key_of(error: FieldError) -> str:
    head = error.field.split(".", 1)[0].split("[", 1)[0]
    return head if head in CONFIG_KEYS else COLOCATION_CONFIG_KEY


def parse_slo_config(
    data: Mapping[str, str] | None,
    previous: SLOControllerConfig | None = None,
    *,
    require_names: bool = False,
) -> ParsedConfig:
    """Parse ConfigMap ``data``; keys that fail keep their value from ``previous``."""
    config, errors = parse_config(data, previous, require_names=require_names)
    by_key: dict[str, list[FieldError]] = {}
    for error in errors:
        by_key.setdefault(_key_of(error), []).append(error)
    if COLOCATION_CONFIG_KEY not in by_key and not cluster_colocation_strategy(config).is_valid():
        by_key[COLOCATION_CONFIG_KEY] = [
            FieldError.invalid(
                COLOCATION_CONFIG_KEY,
                (data or {}).get(COLOCATION_CONFIG_KEY),
                "the cluster strategy merged with the defaults is not valid (durations, thresholds and "
                "resourceDiffThreshold must be positive)",
            )
        ]
        config.colocation = previous.colocation if previous is not None else SLOControllerConfig().colocation
    return ParsedConfig(config, by_key)


Listener = Callable[[set[str]], None]


class SLOConfigCache:
    """The effective config, fed by an informer on the one ConfigMap."""

    def __init__(
        self,
        namespace: str,
        name: str,
        *,
        require_names: bool = False,
        recorder: EventRecorder | None = None,
    ) -> None:
        self.namespace = namespace
        self.name = name
        self.require_names = require_names
        self.recorder = recorder
        self.config = SLOControllerConfig()
        self.errors: dict[str, list[FieldError]] = {}
        self.synced = False
        self._seen = False
        self._good: set[str] = set()
        self._listeners: list[Listener] = []
        self._background: set[asyncio.Task[Any]] = set()

    # --- wiring ------------------------------------------------------------------------------

    def watch(self, factory: InformerFactory) -> None:
        """Register the ConfigMap informer consumer (call :meth:`mark_synced` after the sync)."""
        factory.informer(
            res.CONFIG_MAPS, namespace=self.namespace, field_selector=f"metadata.name={self.name}"
        ).add_consumer(
            name="slo-controller-config",
            on_add=self._changed,
            on_update=lambda _old, new: self._changed(new),
            on_delete=self._deleted,
        )

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def mark_synced(self) -> None:
        """The informer delivered its first list: no ConfigMap seen means defaults."""
        if not self._seen:
            self.apply(None)
        self.synced = True

    # --- state ---------------------------------------------------------------------------------

    @property
    def colocation_available(self) -> bool:
        """``colocation-config`` has been absent or valid at least once."""
        return self.synced and COLOCATION_CONFIG_KEY in self._good

    def in_error(self, key: str) -> bool:
        """The ConfigMap's current ``key`` is broken (its last good value is in use)."""
        return key in self.errors

    # --- updates -----------------------------------------------------------------------------

    def _changed(self, obj: Obj) -> None:
        self.apply(obj)

    def _deleted(self, _obj: Obj | Tombstone[Obj]) -> None:
        log.warning("ConfigMap %s/%s was deleted: using the defaults", self.namespace, self.name)
        self.apply(None)

    def apply(self, configmap: Obj | None) -> set[str]:
        """Take a new version of the ConfigMap (``None``: it does not exist); returns the changed keys."""
        self._seen = configmap is not None
        data = (configmap or {}).get("data") if configmap is not None else None
        parsed = parse_slo_config(
            data if isinstance(data, Mapping) else None, self.config, require_names=self.require_names
        )
        before = self.config.by_key()
        after = parsed.config.by_key()
        changed = {key for key in CONFIG_KEYS if before[key].to_dict() != after[key].to_dict()}
        first = not self._good
        self.config = parsed.config
        self.errors = parsed.errors
        self._good |= set(CONFIG_KEYS) - set(parsed.errors)
        if parsed.errors:
            message = "; ".join(parsed.messages())
            log.error(
                "ConfigMap %s/%s: keeping the last good value of %s: %s",
                self.namespace,
                self.name,
                ", ".join(sorted(parsed.errors)),
                message,
            )
            if configmap is not None:
                for key, errors in sorted(parsed.errors.items()):
                    self._record(configmap, *invalid_key_event(key, errors))
        if changed or first:
            log.info(
                "ConfigMap %s/%s: effective config changed (%s)",
                self.namespace,
                self.name,
                ", ".join(sorted(changed)) or "initial",
            )
        if changed:
            for listener in self._listeners:
                try:
                    listener(changed)
                except Exception:
                    log.exception("slo-controller-config listener failed")
        return changed

    def _record(self, configmap: Obj, reason: str, message: str) -> None:
        """Write the Warning Event in the background (handlers run synchronously on the loop)."""
        recorder = self.recorder
        if recorder is None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        task = loop.create_task(recorder.record(configmap, WARNING, reason, message, kind="ConfigMap"))
        self._background.add(task)
        task.add_done_callback(self._background.discard)
