"""The ``slo-controller-config`` ConfigMap as the controllers see it: watched, validated, merged.

Every key of the ConfigMap (``colocation-config``, ``resource-threshold-config``, ...) is
parsed and validated on its own (:func:`koordinator.api.sloconfig.parse_config`):

* a key that is absent, or a ConfigMap that does not exist, means upstream's defaults
  (deleting the ConfigMap is how a user asks for them);
* a key that fails to parse or validate keeps its last good value, and the failure is
  logged and told to the user as a Warning Event on the ConfigMap, one per broken key, with
  upstream's reasons (``ColocationCfgUnmarshalFailed`` for ``colocation-config``,
  ``SLOCfgUnmarshalFailed`` for the others) and messages (``failed to unmarshal ThresholdCfg,
  err: ...``), followed by what was done: ``kept the last good value of <key>`` (read from
  the persisted copy, when it was), or ``no good value of <key> known: ... left as it is``.
  Keys whose new value was applied get no such Event;
* ``colocation-config`` must also merge with the defaults into a valid cluster strategy;
* a node entry (``nodeConfigs`` / ``nodeStrategies``) whose ``nodeSelector`` is missing or
  does not parse does not fail its key: as in upstream's controllers it selects no node,
  and the cluster strategy and the other entries apply. It is logged once (again only
  when the ConfigMap changes what is said about it), as is an entry whose empty selector
  selects every node. The ConfigMap webhook, when enabled, refuses both.

**The last good values survive a failover.** The leader keeps a copy of the raw text of
every key's last good value in a companion ConfigMap, ``<name>-last-good``
(``koordinator-system/slo-controller-config-last-good``) -- labelled
``app.kubernetes.io/managed-by: koord-manager``, annotated ``koordinator.sh/last-good-of:
<name>``, owned (``ownerReferences``) by the ConfigMap it copies. The empty string stands
for "the key had no value" (its defaults were the good value); a key missing from the copy
has no known good value. It is written only when a key's good value changes (so once when
a config is first seen, then on each accepted edit), always with the resourceVersion it
was read at (create when missing, replace on that version; a conflict re-reads it), and
only by the leader, while its caches run. A new leader reads it once at start: for a key
that is broken then, the persisted value is used. A key broken with no good value known
at all (a copy that was never written, or written for another ConfigMap) is *unavailable*:
the controllers leave what they derive from it as it is -- the NodeSLO sections of that
key, or for ``colocation-config`` the nodes' batch/mid resources and the NodeMetrics --
instead of resetting the running configuration to defaults because of a parse error.

A companion object rather than annotations on the ConfigMap itself: the ConfigMap belongs
to the user (helm, GitOps and ``kubectl apply`` own its content and would undo or fight
writes to it), every update of it passes the ConfigMap validating webhook and comes back
to this cache as a change, and annotations are limited to 256 KiB in all while a
ConfigMap value may be almost 1 MiB.

When the ConfigMap is deleted, the defaults apply (that is the user's intent) and the
leader deletes the copy; the ``ownerReference`` lets the garbage collector delete it too
when no manager runs, and a copy whose owner uid is not the current ConfigMap's is ignored
(and rewritten), so a ConfigMap deleted and created again never gets stale values.

Listeners registered with :meth:`SLOConfigCache.subscribe` learn which keys changed their
effective value or their availability; the controllers re-enqueue every node then.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from controlplane.reactor import cancel_and_wait
from koordinator.api.schema.errors import FieldError
from koordinator.api.sloconfig.config import (
    COLOCATION_CONFIG_KEY,
    CONFIG_KEYS,
    SLOControllerConfig,
    cluster_colocation_strategy,
    invalid_key_event,
    kept_outcome,
    parse_config,
    unavailable_outcome,
)
from koordinator.kube import resources as res
from koordinator.kube.client import ApiClient, Preconditions
from koordinator.kube.errors import ApiConnectionError, ApiError, ConflictError, NotFoundError
from koordinator.kube.events import WARNING, EventRecorder
from koordinator.kube.informer import Informer, InformerFactory, Tombstone

__all__ = [
    "LAST_GOOD_ANNOTATION",
    "LAST_GOOD_SUFFIX",
    "MANAGED_BY",
    "MANAGED_BY_LABEL",
    "LastGood",
    "ParsedConfig",
    "SLOConfigCache",
    "last_good_record",
    "parse_slo_config",
    "restore_last_good",
]

log = logging.getLogger(__name__)

Obj = dict[str, Any]

#: the companion ConfigMap holding the last good values is named ``<config name>`` + this
LAST_GOOD_SUFFIX = "-last-good"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "koord-manager"
#: on the companion: the name of the ConfigMap whose last good values it holds
LAST_GOOD_ANNOTATION = "koordinator.sh/last-good-of"
#: retries of a failed write of the companion back off up to this many seconds
_PERSIST_MAX_DELAY_S = 60.0


@dataclass
class ParsedConfig:
    """A parse of the ConfigMap data against the previous good config."""

    config: SLOControllerConfig
    #: key -> its errors (those keys kept their previous value)
    errors: dict[str, list[FieldError]] = field(default_factory=dict)
    #: key -> its node entries that select no node (no usable selector) or every node (``{}``)
    notes: dict[str, list[FieldError]] = field(default_factory=dict)

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
    notes: list[FieldError] = []
    config, errors = parse_config(data, previous, require_names=require_names, notes=notes)
    by_key: dict[str, list[FieldError]] = {}
    for error in errors:
        by_key.setdefault(_key_of(error), []).append(error)
    notes_by_key: dict[str, list[FieldError]] = {}
    for note in notes:
        notes_by_key.setdefault(_key_of(note), []).append(note)
    invalid = cluster_colocation_strategy(config).invalid_fields()
    if COLOCATION_CONFIG_KEY not in by_key and invalid:
        by_key[COLOCATION_CONFIG_KEY] = [
            FieldError.invalid(
                COLOCATION_CONFIG_KEY,
                (data or {}).get(COLOCATION_CONFIG_KEY),
                "the cluster strategy merged with the defaults is not valid: "
                f"{', '.join(invalid)} out of range",
            )
        ]
        notes_by_key.pop(COLOCATION_CONFIG_KEY, None)
        config.colocation = previous.colocation if previous is not None else SLOControllerConfig().colocation
    return ParsedConfig(config, by_key, notes_by_key)


@dataclass(frozen=True)
class LastGood:
    """The companion ConfigMap as its informer shows it: the persisted last good values."""

    data: dict[str, str]
    resource_version: str = ""
    #: uid of the ConfigMap the values were taken from
    owner_uid: str = ""


def last_good_record(obj: Obj) -> LastGood:
    meta = obj.get("metadata") or {}
    owners = [
        str(ref.get("uid") or "")
        for ref in meta.get("ownerReferences") or ()
        if isinstance(ref, Mapping) and ref.get("kind") == "ConfigMap"
    ]
    data = obj.get("data")
    return LastGood(
        {str(k): str(v) for k, v in data.items()} if isinstance(data, Mapping) else {},
        str(meta.get("resourceVersion") or ""),
        owners[0] if owners else "",
    )


def restore_last_good(
    persisted: LastGood, *, require_names: bool = False
) -> tuple[ParsedConfig, dict[str, str]]:
    """The persisted copy parsed: the config it gives (invalid stored keys: defaults) and
    key -> raw text of each stored key that is valid."""
    stored = {key: text for key, text in persisted.data.items() if key in CONFIG_KEYS}
    parsed = parse_slo_config(stored, require_names=require_names)
    return parsed, {key: text for key, text in stored.items() if key not in parsed.errors}


def _uid(configmap: Obj | None) -> str:
    return str(((configmap or {}).get("metadata") or {}).get("uid") or "")


Listener = Callable[[set[str]], None]


class SLOConfigCache:
    """The effective config, fed by an informer on the one ConfigMap (and one on its persisted copy)."""

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
        #: the last good config: a broken key holds its last good value (its defaults when none is known)
        self.config = SLOControllerConfig()
        #: key -> errors of the ConfigMap's current value of that key
        self.errors: dict[str, list[FieldError]] = {}
        #: broken keys with no good value known: what is derived from them is left as it is
        self.unavailable: frozenset[str] = frozenset()
        #: key -> its node entries that select no node or every node (logged once)
        self.notes: dict[str, list[FieldError]] = {}
        self.synced = False
        self._configmap: Obj | None = None
        #: key -> raw text of its last good value ("" = no value: the defaults); absent = none known
        self._raw_good: dict[str, str] = {}
        #: keys whose last good value came from the persisted copy, not from this process
        self._restored: set[str] = set()
        self._evaluated = False
        self._listeners: list[Listener] = []
        self._background: set[asyncio.Task[Any]] = set()
        self._client: ApiClient | None = None
        self._last_good_informer: Informer | None = None
        self._persisted: LastGood | None = None
        self._persister: asyncio.Task[None] | None = None

    @property
    def last_good_name(self) -> str:
        """Name of the companion ConfigMap holding the last good values."""
        return f"{self.name}{LAST_GOOD_SUFFIX}"

    # --- wiring ------------------------------------------------------------------------------

    def watch(self, factory: InformerFactory) -> None:
        """Register the informer consumers (call :meth:`mark_synced` after the sync).

        The persisted copy is written through the factory's client while its informer runs.
        """
        factory.informer(
            res.CONFIG_MAPS, namespace=self.namespace, field_selector=f"metadata.name={self.name}"
        ).add_consumer(
            name="slo-controller-config",
            on_add=self._changed,
            on_update=lambda _old, new: self._changed(new),
            on_delete=self._deleted,
        )
        informer = factory.informer(
            res.CONFIG_MAPS, namespace=self.namespace, field_selector=f"metadata.name={self.last_good_name}"
        )
        informer.add_consumer(
            last_good_record,
            name="slo-controller-config-last-good",
            on_add=self._persisted_seen,
            on_update=lambda _old, new: self._persisted_seen(new),
            on_delete=self._persisted_gone,
        )
        self._client = factory.client
        self._last_good_informer = informer

    async def close(self) -> None:
        """Stop writing: cancel the copy's writer and the Events still being recorded (end of a term)."""
        tasks = [task for task in (self._persister, *self._background) if task is not None]
        self._persister = None
        await cancel_and_wait(tasks)

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def mark_synced(self) -> None:
        """The informers delivered their first list: evaluate what they hold (no ConfigMap: defaults)."""
        self.synced = True
        self._evaluate()
        self._persist_soon()

    # --- state ---------------------------------------------------------------------------------

    @property
    def colocation_available(self) -> bool:
        """``colocation-config`` is absent or valid, or was at some point (its last good value is known)."""
        return self.synced and COLOCATION_CONFIG_KEY in self._raw_good

    def in_error(self, key: str) -> bool:
        """The ConfigMap's current ``key`` is broken (its last good value is in use, if one is known)."""
        return key in self.errors

    def is_unavailable(self, key: str) -> bool:
        """``key`` is broken and no good value of it is known: leave what depends on it as it is."""
        return key in self.unavailable

    def last_good(self) -> dict[str, str]:
        """Key -> raw text of its last good value (``""``: the defaults); keys without one are absent."""
        return dict(self._raw_good)

    # --- updates -----------------------------------------------------------------------------

    def _changed(self, obj: Obj) -> None:
        self.apply(obj)

    def _deleted(self, _obj: Obj | Tombstone[Obj]) -> None:
        log.warning("ConfigMap %s/%s was deleted: using the defaults", self.namespace, self.name)
        self.apply(None)

    def apply(self, configmap: Obj | None) -> set[str]:
        """Take a new version of the ConfigMap (``None``: it does not exist); returns the changed keys.

        Before :meth:`mark_synced` the version is only kept: the first evaluation waits until
        the persisted last good values are known too.
        """
        self._configmap = configmap
        if not self.synced:
            return set()
        changed = self._evaluate()
        self._persist_soon()
        return changed

    def _restore(self, configmap: Obj) -> None:
        """Take the persisted last good values, when they were written for this ConfigMap."""
        persisted = self._persisted
        if persisted is None:
            return
        if persisted.owner_uid != _uid(configmap):
            log.warning(
                "ConfigMap %s/%s holds the last good values of another %s (uid %s, now %s): ignoring it",
                self.namespace,
                self.last_good_name,
                self.name,
                persisted.owner_uid or "none",
                _uid(configmap) or "none",
            )
            return
        parsed, good = restore_last_good(persisted, require_names=self.require_names)
        for key, errors in sorted(parsed.errors.items()):
            log.warning(
                "ConfigMap %s/%s: the persisted value of %s is not valid (%s): ignoring it",
                self.namespace,
                self.last_good_name,
                key,
                "; ".join(map(str, errors)),
            )
        self.config = parsed.config
        self._raw_good.update(good)
        self._restored = set(good)

    def _evaluate(self) -> set[str]:
        configmap = self._configmap
        raw = configmap.get("data") if configmap is not None else None
        data: Mapping[str, str] = raw if isinstance(raw, Mapping) else {}
        before = self.config.by_key()
        if not self._evaluated and configmap is not None:
            self._restore(configmap)
        parsed = parse_slo_config(data, self.config, require_names=self.require_names)
        for key in CONFIG_KEYS:
            if key not in parsed.errors:
                self._raw_good[key] = str(data.get(key) or "")
                self._restored.discard(key)
        unavailable = frozenset(parsed.errors) - set(self._raw_good)
        after = parsed.config.by_key()
        changed = {key for key in CONFIG_KEYS if before[key].to_dict() != after[key].to_dict()}
        changed |= self.unavailable ^ unavailable
        first = not self._evaluated
        self._evaluated = True
        self._log_notes(parsed.notes)
        self.config = parsed.config
        self.errors = parsed.errors
        self.unavailable = unavailable
        for key, errors in sorted(parsed.errors.items()):
            outcome = self._outcome(key)
            log.error(
                "ConfigMap %s/%s: %s is not valid: %s; %s",
                self.namespace,
                self.name,
                key,
                "; ".join(map(str, errors)),
                outcome,
            )
            if configmap is not None:
                self._record(configmap, *invalid_key_event(key, errors, outcome))
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

    def _log_notes(self, notes: Mapping[str, list[FieldError]]) -> None:
        """Log each node entry that selects no node or every node once, not on every evaluation."""
        logged = {str(note) for notes_of_key in self.notes.values() for note in notes_of_key}
        for _, notes_of_key in sorted(notes.items()):
            for note in notes_of_key:
                if str(note) not in logged:
                    log.warning("ConfigMap %s/%s: %s", self.namespace, self.name, note)
        self.notes = {key: list(notes_of_key) for key, notes_of_key in notes.items()}

    def _outcome(self, key: str) -> str:
        """What was done about the broken ``key``, in the words of its Event."""
        if key not in self._raw_good:
            return unavailable_outcome(key)
        source = f"ConfigMap {self.namespace}/{self.last_good_name}" if key in self._restored else ""
        return kept_outcome(key, self._raw_good[key], source)

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

    # --- the persisted copy --------------------------------------------------------------------

    def _persisted_seen(self, record: LastGood) -> None:
        self._persisted = record
        if self.synced:
            self._persist_soon()

    def _persisted_gone(self, _record: LastGood | Tombstone[LastGood]) -> None:
        self._persisted = None
        if self.synced:
            self._persist_soon()

    def _wanted(self) -> LastGood | None:
        """What the copy should hold (``None``: no copy, the ConfigMap does not exist)."""
        if self._configmap is None:
            return None
        return LastGood(dict(sorted(self._raw_good.items())), owner_uid=_uid(self._configmap))

    def _up_to_date(self) -> bool:
        wanted, persisted = self._wanted(), self._persisted
        if wanted is None or persisted is None:
            return wanted is persisted
        return wanted.data == persisted.data and wanted.owner_uid == persisted.owner_uid

    def _leading(self) -> bool:
        informer = self._last_good_informer
        return self._client is not None and informer is not None and informer.running

    def _persist_soon(self) -> None:
        """Start bringing the copy up to date, unless that is under way or nothing is to be done."""
        if not self._leading() or self._up_to_date():
            return
        if self._persister is not None and not self._persister.done():
            return  # it looks at the wanted state again after each write
        self._persister = asyncio.get_running_loop().create_task(
            self._persist(), name=f"persist {self.namespace}/{self.last_good_name}"
        )

    def _body(self, wanted: LastGood, resource_version: str) -> Obj:
        metadata: Obj = {
            "name": self.last_good_name,
            "namespace": self.namespace,
            "labels": {MANAGED_BY_LABEL: MANAGED_BY},
            "annotations": {LAST_GOOD_ANNOTATION: self.name},
        }
        if wanted.owner_uid:
            metadata["ownerReferences"] = [
                {"apiVersion": "v1", "kind": "ConfigMap", "name": self.name, "uid": wanted.owner_uid}
            ]
        if resource_version:
            metadata["resourceVersion"] = resource_version
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": dict(wanted.data)}

    async def _persist(self) -> None:
        """Write (or delete) the copy until it holds the wanted values, while this replica leads."""
        client = self._client
        assert client is not None
        delay = 0.5
        while self._leading() and not self._up_to_date():
            wanted, persisted = self._wanted(), self._persisted
            where = f"{self.namespace}/{self.last_good_name}"
            try:
                if wanted is None:
                    assert persisted is not None
                    await client.delete(
                        res.CONFIG_MAPS,
                        self.last_good_name,
                        self.namespace,
                        preconditions=Preconditions(resource_version=persisted.resource_version or None),
                    )
                    self._persisted = None
                    log.info("deleted ConfigMap %s (%s/%s is gone)", where, self.namespace, self.name)
                elif persisted is None:
                    created = await client.create(res.CONFIG_MAPS, self._body(wanted, ""), self.namespace)
                    self._persisted = last_good_record(created)
                    log.info("ConfigMap %s: persisted the last good values", where)
                else:
                    replaced = await client.replace(
                        res.CONFIG_MAPS, self._body(wanted, persisted.resource_version)
                    )
                    self._persisted = last_good_record(replaced)
                    log.info("ConfigMap %s: persisted the last good values", where)
                delay = 0.5
                continue
            except NotFoundError:
                self._persisted = None  # gone already: create it (or nothing left to delete)
                continue
            except ConflictError:
                # written by someone else (or created meanwhile): read it again, then retry
                try:
                    self._persisted = last_good_record(
                        await client.get(res.CONFIG_MAPS, self.last_good_name, self.namespace)
                    )
                except NotFoundError:
                    self._persisted = None
                except (ApiError, ApiConnectionError) as exc:
                    log.warning("ConfigMap %s: cannot read it: %s", where, exc)
            except (ApiError, ApiConnectionError) as exc:
                log.warning("ConfigMap %s: cannot persist the last good values: %s", where, exc)
            await asyncio.sleep(delay)
            delay = min(delay * 2, _PERSIST_MAX_DELAY_S)
