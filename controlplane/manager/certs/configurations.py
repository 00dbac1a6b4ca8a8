"""The webhook configurations: ``caBundle`` and ``clientConfig`` of every webhook.

Upstream's ``pkg/webhook/util/configuration``: :func:`ensure_webhook_configurations` writes
the CA into every webhook of ``koordinator-mutating-webhook-configuration`` and
``koordinator-validating-webhook-configuration``, keeping the original list in the
``template`` annotation and dropping the webhooks whose path is not served (their gate is
off), and points them at ``https://WEBHOOK_HOST:PORT/path`` when a host is set
(:class:`ClientConfigTarget`).
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from controlplane.manager.certs.keys import CertError
from koordinator.api.jsonutil import JSONError, marshal, unmarshal
from koordinator.kube import resources as res
from koordinator.kube.client import ApiClient
from koordinator.kube.errors import ApiConnectionError, ApiError, ConflictError, NotFoundError

log = logging.getLogger(__name__)

MUTATING_CONFIGURATION = "koordinator-mutating-webhook-configuration"
VALIDATING_CONFIGURATION = "koordinator-validating-webhook-configuration"
TEMPLATE_ANNOTATION = "template"
_CONFLICT_RETRIES = 5


def _client_config_path(config: Mapping[str, Any]) -> str:
    service = config.get("service")
    if isinstance(service, Mapping):
        return str(service.get("path") or "")
    url = config.get("url")
    if isinstance(url, str):
        return urlsplit(url).path
    return ""


@dataclass(frozen=True)
class ClientConfigTarget:
    """Where the apiserver should call the webhooks."""

    namespace: str
    service: str
    #: ``WEBHOOK_HOST``: when set, webhooks are called at ``https://host:port/path``.
    host: str = ""
    port: int = 9876


def _template(configuration: dict[str, Any]) -> list[dict[str, Any]]:
    meta = configuration.get("metadata")
    if not isinstance(meta, dict):
        meta = {}
        configuration["metadata"] = meta
    annotations = meta.get("annotations")
    if not isinstance(annotations, dict):
        annotations = {}
        meta["annotations"] = annotations
    raw = annotations.get(TEMPLATE_ANNOTATION)
    if raw:
        try:
            template = unmarshal(raw)
        except JSONError as exc:
            raise CertError(f"{meta.get('name')}: unreadable template annotation: {exc}") from None
        if not isinstance(template, list) or not all(isinstance(item, dict) for item in template):
            raise CertError(f"{meta.get('name')}: the template annotation must be a JSON list of webhooks")
        return template
    webhooks = configuration.get("webhooks") or []
    annotations[TEMPLATE_ANNOTATION] = marshal(webhooks)
    return [dict(item) for item in webhooks]


def render_webhooks(
    template: list[dict[str, Any]], ca_bundle: bytes, served: Collection[str], target: ClientConfigTarget
) -> list[dict[str, Any]]:
    """The webhooks of a configuration: served paths only, with the CA bundle and client config set."""
    rendered = []
    encoded = base64.b64encode(ca_bundle).decode("ascii")
    for original in template:
        webhook = dict(original)
        config = dict(webhook.get("clientConfig") or {})
        path = _client_config_path(config)
        if path not in served:
            continue
        config["caBundle"] = encoded
        service = config.get("service")
        if isinstance(service, dict):
            service = {**service, "namespace": target.namespace, "name": target.service}
            config["service"] = service
            if target.host:
                config.pop("service")
                config["url"] = f"https://{target.host}:{target.port}{path}"
        webhook["clientConfig"] = config
        rendered.append(webhook)
    return rendered


async def _ensure_configuration(
    client: ApiClient,
    resource: res.Resource,
    name: str,
    ca_bundle: bytes,
    served: Collection[str],
    target: ClientConfigTarget,
) -> bool:
    for _ in range(_CONFLICT_RETRIES):
        try:
            configuration = await client.get(resource, name)
        except NotFoundError:
            raise CertError(f"not found {resource.kind} {name}") from None
        except (ApiError, ApiConnectionError) as exc:
            raise CertError(f"cannot read {resource.kind} {name}: {exc}") from exc
        before = marshal(configuration)
        template = _template(configuration)
        configuration["webhooks"] = render_webhooks(template, ca_bundle, served, target)
        if marshal(configuration) == before:
            return False
        kept = {str(w.get("name")) for w in configuration["webhooks"]}
        dropped = [str(w.get("name")) for w in template if str(w.get("name")) not in kept]
        if dropped:
            log.warning("%s %s: leaving out %s (path not served)", resource.kind, name, ", ".join(dropped))
        try:
            await client.replace(resource, configuration)
        except ConflictError:
            continue  # another replica or a helm upgrade wrote it: read it again
        except (ApiError, ApiConnectionError) as exc:
            raise CertError(f"failed to update {name}: {exc}") from exc
        log.info("updated %s %s", resource.kind, name)
        return True
    raise CertError(f"failed to update {name}: it kept changing ({_CONFLICT_RETRIES} conflicts)")


async def ensure_webhook_configurations(
    client: ApiClient,
    ca_bundle: bytes,
    served: Collection[str],
    target: ClientConfigTarget,
    *,
    mutating_name: str = MUTATING_CONFIGURATION,
    validating_name: str = VALIDATING_CONFIGURATION,
) -> bool:
    """Patch both configurations (re-read on write conflicts); returns whether anything was written."""
    changed = False
    for resource, name in (
        (res.MUTATING_WEBHOOK_CONFIGURATIONS, mutating_name),
        (res.VALIDATING_WEBHOOK_CONFIGURATIONS, validating_name),
    ):
        changed = await _ensure_configuration(client, resource, name, ca_bundle, served, target) or changed
    return changed
