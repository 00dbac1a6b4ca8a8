"""``koord-manager admit``: run the admission chain offline, exactly as the server would.

For checking ClusterColocationProfiles and quota trees in CI, and for tests::

    koord-manager admit --objects cluster.yaml --review pod.yaml --path /mutate-pod --random 42

* ``--objects FILE`` (repeatable): YAML streams of the cluster objects the webhooks read
  (Namespaces, PriorityClasses, ClusterColocationProfiles, ElasticQuotas,
  ElasticQuotaProfiles, Nodes, ConfigMaps, Pods); ``-`` reads stdin.
* ``--review FILE``: an AdmissionReview (JSON or YAML), or a bare object, which is
  wrapped in a ``v1`` review as a CREATE in its namespace.
* ``--path``: the webhook to call; default: the mutating webhook of the object's kind
  (``/mutate-pod`` for pods).
* ``--random N``: the number the ClusterColocationProfile probability draw returns
  (0-99), for reproducible runs; without it the draw is random, as in the server.
* ``--output text|json|yaml``: ``json``/``yaml`` print ``{"review": <the AdmissionReview
  with its response>, "object": <the object after the patch, or null>}``; ``text`` prints
  the decision and the patched object.

The same :class:`AdmissionDispatcher` and handlers as the server answer the review. The
exit status is 0 when the request is allowed, 1 when it is refused, 2 for usage errors.
"""

from __future__ import annotations

import asyncio
import base64
import sys
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

import orjson
import yaml

from controlplane.manager.webhooks.cluster import ObjectsError, StaticCluster, quota_topology_of
from controlplane.manager.webhooks.context import WebhookContext, WebhookOptions
from controlplane.manager.webhooks.dispatch import AdmissionDispatcher, UnknownPathError
from koordinator.api.features import FeatureGates
from koordinator.kube.patches import PatchError, json_patch

__all__ = ["AdmitError", "admit", "load_objects", "review_for"]

Obj = dict[str, Any]

EXIT_ALLOWED = 0
EXIT_REFUSED = 1

#: kind -> (resource plural, group, version, default path)
KINDS: dict[str, tuple[str, str, str, str]] = {
    "Pod": ("pods", "", "v1", "/mutate-pod"),
    "Node": ("nodes", "", "v1", "/validate-node"),
    "ConfigMap": ("configmaps", "", "v1", "/validate-configmap"),
    "ElasticQuota": (
        "elasticquotas",
        "scheduling.sigs.k8s.io",
        "v1alpha1",
        "/mutate-scheduling-sigs-k8s-io-v1alpha1-elasticquota",
    ),
    "Reservation": ("reservations", "scheduling.koordinator.sh", "v1alpha1", "/mutate-reservation"),
}


class AdmitError(ValueError):
    """Input the offline admission cannot use (exit status 2)."""


def _load_documents(text: str, source: str) -> list[Any]:
    try:
        return [doc for doc in yaml.safe_load_all(text) if doc is not None]
    except yaml.YAMLError as exc:
        raise AdmitError(f"{source}: not valid YAML/JSON: {exc}") from None


def _read(path: str, stdin: TextIO | None) -> str:
    if path == "-":
        return (stdin or sys.stdin).read()
    try:
        return Path(path).read_text()
    except OSError as exc:
        raise AdmitError(f"cannot read {path}: {exc.strerror or exc}") from None


def load_objects(paths: Sequence[str], stdin: TextIO | None = None) -> StaticCluster:
    cluster = StaticCluster()
    for path in paths:
        for index, doc in enumerate(_load_documents(_read(path, stdin), path)):
            if not isinstance(doc, dict):
                raise AdmitError(f"{path}: document {index + 1} is not an object")
            try:
                cluster.add(doc)
            except ObjectsError as exc:
                raise AdmitError(f"{path}: document {index + 1}: {exc}") from None
    return cluster


def review_for(document: Mapping[str, Any]) -> tuple[Obj, str | None]:
    """The AdmissionReview to send and the default path for it (``None`` when unknown)."""
    if document.get("kind") == "AdmissionReview":
        request = document.get("request")
        kinds = request.get("kind") if isinstance(request, dict) else None
        kind = kinds.get("kind") if isinstance(kinds, dict) else None
        return dict(document), KINDS.get(str(kind), (None, None, None, None))[3]
    kind = document.get("kind")
    if not isinstance(kind, str) or kind not in KINDS:
        raise AdmitError(
            f"cannot wrap a {kind or 'kind-less'} object in a review; give an AdmissionReview or one of "
            f"{', '.join(sorted(KINDS))}"
        )
    plural, group, version, path = KINDS[kind]
    meta = document.get("metadata") or {}
    namespace = meta.get("namespace", "") if isinstance(meta, dict) else ""
    name = meta.get("name", "") if isinstance(meta, dict) else ""
    review: Obj = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": group, "version": version, "kind": kind},
            "resource": {"group": group, "version": version, "resource": plural},
            "name": name,
            "namespace": namespace,
            "operation": "CREATE",
            "userInfo": {"username": "koord-manager-admit"},
            "object": dict(document),
            "dryRun": True,
        },
    }
    return review, path


def _fixed_draw(value: int) -> Any:
    def draw(_: int) -> int:
        return value

    return draw


async def admit(
    review: Mapping[str, Any],
    path: str,
    cluster: StaticCluster,
    gates: FeatureGates,
    *,
    random_value: int | None = None,
    options: WebhookOptions | None = None,
) -> dict[str, Any]:
    """``{"review": ..., "object": ...}`` for one review."""
    ctx = WebhookContext(cluster=cluster, gates=gates, options=options or WebhookOptions())
    quota_topology_of(cluster, ctx.quotas)
    if random_value is not None:
        ctx.rand_intn = _fixed_draw(random_value)
    dispatcher = AdmissionDispatcher(ctx)
    try:
        answered = await dispatcher.admit(path, review)
    except UnknownPathError:
        served = ", ".join(dispatcher.paths)
        raise AdmitError(
            f"no webhook is served at {path} with these feature gates (served: {served})"
        ) from None
    response = answered["response"]
    request = review.get("request") if isinstance(review.get("request"), dict) else None
    original = request.get("object") if request is not None else None
    patched: Any = None
    if response.get("allowed") and original is not None:
        patch = response.get("patch")
        operations = orjson.loads(base64.b64decode(patch)) if patch else []
        try:
            patched = json_patch(original, operations)
        except PatchError as exc:
            raise AdmitError(f"the webhook's patch does not apply to the object: {exc}") from exc
    return {"review": {**dict(review), "response": response}, "object": patched}


def run(
    review_path: str,
    object_paths: Sequence[str],
    path: str | None,
    gates: FeatureGates,
    random_value: int | None,
    output: str,
    out: TextIO,
    stdin: TextIO | None = None,
) -> int:
    """The command: read, admit, print; returns the exit status."""
    if random_value is not None and not 0 <= random_value < 100:
        raise AdmitError(f"--random must be in [0, 100), got {random_value}")
    documents = _load_documents(_read(review_path, stdin), review_path)
    if len(documents) != 1 or not isinstance(documents[0], dict):
        raise AdmitError(f"{review_path}: expected exactly one AdmissionReview or object")
    review, default_path = review_for(documents[0])
    target = path or default_path
    if not target:
        raise AdmitError("cannot tell which webhook to call; give --path")
    cluster = load_objects(object_paths, stdin)
    result = asyncio.run(admit(review, target, cluster, gates, random_value=random_value))
    response = result["review"]["response"]
    if output == "json":
        out.write(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode() + "\n")
    elif output == "yaml":
        out.write(yaml.safe_dump(result, sort_keys=False))
    else:
        status = response.get("status") or {}
        decision = "allowed" if response.get("allowed") else "refused"
        out.write(f"{target}: {decision} (code {status.get('code')})\n")
        if status.get("message"):
            out.write(f"message: {status['message']}\n")
        for warning in response.get("warnings") or ():
            out.write(f"warning: {warning}\n")
        if result["object"] is not None:
            out.write("---\n" + yaml.safe_dump(result["object"], sort_keys=False))
    return EXIT_ALLOWED if response.get("allowed") else EXIT_REFUSED
