"""``koord-manager admit``: run the admission chain offline, exactly as the apiserver would.

For checking ClusterColocationProfiles and quota trees in CI, and for tests::

    koord-manager admit --objects cluster.yaml --review pod.yaml --random 42

* ``--objects FILE`` (repeatable): YAML streams of the cluster objects the webhooks read
  (Namespaces, PriorityClasses, ClusterColocationProfiles, ElasticQuotas,
  ElasticQuotaProfiles, Nodes, ConfigMaps, Pods); ``-`` reads stdin.
* ``--review FILE``: an AdmissionReview (JSON or YAML), or a bare object, which is
  wrapped in a ``v1`` review as a CREATE in its namespace.
* ``--path``: call this one webhook only. By default the whole chain the apiserver runs
  for the object's kind and operation: the mutating webhooks, each on the previous one's
  result, then the validating webhooks on the final object (``/mutate-pod`` then
  ``/validate-pod`` for a pod CREATE). Webhooks whose gate is off are left out, as their
  configuration would be; the first refusal ends the chain.
* ``--random N``: the number the ClusterColocationProfile probability draw returns
  (0-99), for reproducible runs; without it the draw is random, as in the server.
* ``--output text|json|yaml``: ``json``/``yaml`` print ``{"review": <the AdmissionReview
  with the deciding response: the refusal, else the last webhook's>, "object": <the object
  after every patch, or null when refused>, "steps": [{"path", "response"}, ...]}``;
  ``text`` prints each webhook's decision and the patched object.

The same :class:`AdmissionDispatcher` and handlers as the server answer the review. Quota
admission (``EnableQuotaAdmission``) charges the pod to the quota given in ``--objects``
and keeps that charge in memory: nothing is written anywhere. The
exit status is 0 when the request is allowed, 1 when it is refused, 2 for usage errors.
"""

from __future__ import annotations

import asyncio
import base64
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

import orjson
import yaml

from controlplane.manager.webhooks.cluster import ObjectsError, StaticCluster, quota_topology_of
from controlplane.manager.webhooks.context import WebhookContext, WebhookOptions
from controlplane.manager.webhooks.dispatch import AdmissionDispatcher, UnknownPathError
from controlplane.manager.webhooks.quotaevaluate.accessor import StaticQuotaAccessor
from controlplane.manager.webhooks.quotaevaluate.evaluator import QuotaEvaluator
from koordinator.api.features import FeatureGates
from koordinator.cli import read_documents
from koordinator.kube.patches import PatchError, json_patch

__all__ = ["AdmitError", "admit", "chain_for", "dispatcher_for", "load_objects", "review_for"]

Obj = dict[str, Any]

EXIT_ALLOWED = 0
EXIT_REFUSED = 1

QUOTA_GROUP = "scheduling.sigs.k8s.io"
#: kind -> (resource plural, group, version)
KINDS: dict[str, tuple[str, str, str]] = {
    "Pod": ("pods", "", "v1"),
    "Node": ("nodes", "", "v1"),
    "ConfigMap": ("configmaps", "", "v1"),
    "ElasticQuota": ("elasticquotas", QUOTA_GROUP, "v1alpha1"),
    "Reservation": ("reservations", "scheduling.koordinator.sh", "v1alpha1"),
}
CREATE, UPDATE, DELETE = "CREATE", "UPDATE", "DELETE"
#: kind -> the webhooks the apiserver calls for it, in order (mutating first), with the
#: operations each is registered for (upstream's webhook configurations)
CHAINS: dict[str, tuple[tuple[str, frozenset[str]], ...]] = {
    "Pod": (("/mutate-pod", frozenset({CREATE})), ("/validate-pod", frozenset({CREATE, UPDATE}))),
    "Node": (("/validate-node", frozenset({CREATE, UPDATE})),),
    "ConfigMap": (("/validate-configmap", frozenset({CREATE, UPDATE, DELETE})),),
    "ElasticQuota": (
        ("/mutate-scheduling-sigs-k8s-io-v1alpha1-elasticquota", frozenset({CREATE})),
        ("/validate-scheduling-sigs-k8s-io-v1alpha1-elasticquota", frozenset({CREATE, UPDATE, DELETE})),
    ),
    "Reservation": (("/mutate-reservation", frozenset({CREATE})),),
}


class AdmitError(ValueError):
    """Input the offline admission cannot use (exit status 2)."""


def _documents(path: str, stdin: TextIO | None) -> list[Any]:
    try:
        return read_documents(path, stdin)
    except ValueError as exc:
        raise AdmitError(str(exc)) from None


def load_objects(paths: Sequence[str], stdin: TextIO | None = None) -> StaticCluster:
    cluster = StaticCluster()
    for path in paths:
        for index, doc in enumerate(_documents(path, stdin)):
            if not isinstance(doc, dict):
                raise AdmitError(f"{path}: document {index + 1} is not an object")
            try:
                cluster.add(doc)
            except ObjectsError as exc:
                raise AdmitError(f"{path}: document {index + 1}: {exc}") from None
    return cluster


def review_for(document: Mapping[str, Any]) -> tuple[Obj, str | None]:
    """The AdmissionReview to send and the kind of object it carries (``None`` when unknown)."""
    if document.get("kind") == "AdmissionReview":
        request = document.get("request")
        kinds = request.get("kind") if isinstance(request, dict) else None
        kind = kinds.get("kind") if isinstance(kinds, dict) else None
        return dict(document), str(kind) if kind in CHAINS else None
    kind = document.get("kind")
    if not isinstance(kind, str) or kind not in KINDS:
        raise AdmitError(
            f"cannot wrap a {kind or 'kind-less'} object in a review; give an AdmissionReview or one of "
            f"{', '.join(sorted(KINDS))}"
        )
    plural, group, version = KINDS[kind]
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
    return review, kind


def chain_for(review: Mapping[str, Any], kind: str, served: Sequence[str]) -> list[str]:
    """The served webhooks the apiserver would call for this review, in order."""
    request = review.get("request")
    operation = request.get("operation") if isinstance(request, dict) else None
    return [path for path, operations in CHAINS[kind] if operation in operations and path in served]


def _fixed_draw(value: int) -> Any:
    def draw(_: int) -> int:
        return value

    return draw


def dispatcher_for(
    cluster: StaticCluster,
    gates: FeatureGates,
    *,
    random_value: int | None = None,
    options: WebhookOptions | None = None,
) -> AdmissionDispatcher:
    """The server's dispatcher over a static cluster (and a fixed probability draw, if given)."""
    ctx = WebhookContext(
        cluster=cluster,
        gates=gates,
        options=options or WebhookOptions(),
        quota_evaluator=QuotaEvaluator(StaticQuotaAccessor(cluster.objects("ElasticQuota"))),
    )
    quota_topology_of(cluster, ctx.quotas)
    if random_value is not None:
        ctx.rand_intn = _fixed_draw(random_value)
    return AdmissionDispatcher(ctx)


async def admit(dispatcher: AdmissionDispatcher, review: Mapping[str, Any], paths: Sequence[str]) -> Obj:
    """``{"review": ..., "object": ..., "steps": [...]}`` for one review sent along ``paths``.

    Each webhook sees the object as the previous ones patched it; the first refusal ends the chain.
    """
    request = review.get("request") if isinstance(review.get("request"), dict) else None
    current = request.get("object") if request is not None else None
    steps: list[Obj] = []
    sent: Obj = dict(review)
    response: Obj = {}
    for path in paths:
        if request is not None and steps:
            sent = {**dict(review), "request": {**request, "object": current}}
        try:
            answered = await dispatcher.admit(path, sent)
        except UnknownPathError:
            served = ", ".join(dispatcher.paths)
            raise AdmitError(
                f"no webhook is served at {path} with these feature gates (served: {served})"
            ) from None
        response = answered["response"]
        steps.append({"path": path, "response": response})
        if not response.get("allowed"):
            return {"review": {**sent, "response": response}, "object": None, "steps": steps}
        patch = response.get("patch")
        if patch and current is not None:
            try:
                current = json_patch(current, orjson.loads(base64.b64decode(patch)))
            except PatchError as exc:
                raise AdmitError(f"the patch of {path} does not apply to the object: {exc}") from exc
    return {"review": {**sent, "response": response}, "object": current, "steps": steps}


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
    documents = _documents(review_path, stdin)
    if len(documents) != 1 or not isinstance(documents[0], dict):
        raise AdmitError(f"{review_path}: expected exactly one AdmissionReview or object")
    review, kind = review_for(documents[0])
    cluster = load_objects(object_paths, stdin)
    dispatcher = dispatcher_for(cluster, gates, random_value=random_value)
    if path:
        paths = [path]
    elif kind is None:
        raise AdmitError("cannot tell which webhooks to call; give --path")
    else:
        paths = chain_for(review, kind, dispatcher.paths)
        if not paths:
            operation = (review.get("request") or {}).get("operation")
            registered = [p for p, operations in CHAINS[kind] if operation in operations]
            if not registered:
                raise AdmitError(
                    f"the apiserver calls no webhook of this project for {operation} of a {kind}"
                )
            raise AdmitError(
                f"none of {', '.join(registered)} is served with these feature gates "
                f"(served: {', '.join(dispatcher.paths)})"
            )
    result = asyncio.run(admit(dispatcher, review, paths))
    response = result["review"]["response"]
    if output == "json":
        out.write(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode() + "\n")
    elif output == "yaml":
        out.write(yaml.safe_dump(result, sort_keys=False))
    else:
        for step in result["steps"]:
            answer = step["response"]
            status = answer.get("status") or {}
            decision = "allowed" if answer.get("allowed") else "refused"
            out.write(f"{step['path']}: {decision} (code {status.get('code')})\n")
            if status.get("message"):
                out.write(f"message: {status['message']}\n")
            for warning in answer.get("warnings") or ():
                out.write(f"warning: {warning}\n")
        if result["object"] is not None:
            out.write("---\n" + yaml.safe_dump(result["object"], sort_keys=False))
    return EXIT_ALLOWED if response.get("allowed") else EXIT_REFUSED
