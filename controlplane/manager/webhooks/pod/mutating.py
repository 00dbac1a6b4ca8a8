"""``/mutate-pod``: the pod mutating webhook (``mpod-create`` / ``mpod-update``).

Only CREATE changes anything; UPDATE requests (sent for pods labelled
``pod.koordinator.sh/mutating-update=true``) are decoded and allowed unchanged. The steps,
in upstream order, each timed in the webhook duration metric:

1. ``ClusterColocationProfile`` -- profiles, then batch/mid resource replacement;
2. ``ExtendedResourceSpec`` -- the extended-resource-spec annotation (unless
   ``DisableExtendedResourceSpec``);
3. ``MultiQuotaTree`` -- node affinity of multi-tree quotas (gate ``MultiQuotaTree``);
4. ``DeviceResourceSpec`` -- GPU resource normalisation (unless ``DisableDeviceResourceSpec``).

A pod created without ``metadata.namespace`` is evaluated in the request's namespace, which
is not written back. The answer is a JSON patch from the pod as received to the mutated
pod, or a plain allow when nothing changed. A pod that does not decode is refused with 400;
a failing step (a missing PriorityClass, a broken profile patch) with 500.

The steps write into :func:`writable_copy` of the pod: a copy of only the containers the
steps write into (the pod, ``metadata`` with its labels and annotations, ``spec``, each
init and regular container with its ``resources`` and their requests and limits,
``overhead``, and the whole ``affinity``); everything else (env, volumes, probes, owner
references ...) stays shared with the request. The patch is the difference between the
two, and :func:`~controlplane.manager.webhooks.jsonpatch.create_patch` passes over a
shared subtree by identity, so building it costs what the steps touched, not the size of
the pod. A step that writes anywhere else must be added to :func:`writable_copy` (the
recorded corpus test checks that the request's object is left as it was sent).
"""

from __future__ import annotations

from typing import Any

from controlplane.manager.webhooks import metrics
from controlplane.manager.webhooks.colocation import ProfileError
from controlplane.manager.webhooks.context import ClusterError, PluginStep, WebhookContext
from controlplane.manager.webhooks.jsonpatch import create_patch, json_copy
from controlplane.manager.webhooks.metrics import StepSeries
from controlplane.manager.webhooks.objects import POD, ObjectError, check
from controlplane.manager.webhooks.pod import (
    cluster_colocation_profile,
    device_resource_spec,
    extended_resource_spec,
    multi_quota_tree,
)
from controlplane.manager.webhooks.review import (
    AdmissionRequest,
    AdmissionResponse,
    allowed,
    errored,
    patched,
)

__all__ = ["PodMutatingHandler"]


def _shallow(value: Any) -> Any:
    return dict(value) if isinstance(value, dict) else value


def _copy_with(value: dict[str, Any], field: str, keys: tuple[str, ...]) -> None:
    """Give ``value`` (already a copy) its own copy of ``value[field]`` and of that field's ``keys``."""
    inner = value.get(field)
    if isinstance(inner, dict):
        inner = dict(inner)
        for key in keys:
            if key in inner:
                inner[key] = _shallow(inner[key])
        value[field] = inner


def _writable_container(container: Any) -> Any:
    if not isinstance(container, dict):
        return container
    copy = dict(container)
    _copy_with(copy, "resources", ("requests", "limits"))
    return copy


def writable_copy(pod: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``pod`` the mutating steps may write into, sharing what they never write."""
    copy = dict(pod)
    _copy_with(copy, "metadata", ("labels", "annotations"))
    spec = copy.get("spec")
    if isinstance(spec, dict):
        spec = dict(spec)
        for key in ("initContainers", "containers"):
            containers = spec.get(key)
            if isinstance(containers, list):
                spec[key] = [_writable_container(container) for container in containers]
        if "overhead" in spec:
            spec["overhead"] = _shallow(spec["overhead"])
        affinity = spec.get("affinity")
        if isinstance(affinity, dict):
            spec["affinity"] = json_copy(affinity)
        copy["spec"] = spec
    return copy


def object_namespace(obj: dict[str, Any], request: AdmissionRequest) -> str:
    namespace = (obj.get("metadata") or {}).get("namespace")
    return namespace if isinstance(namespace, str) and namespace else request.namespace


_STEPS = (
    cluster_colocation_profile.NAME,
    extended_resource_spec.NAME,
    multi_quota_tree.NAME,
    device_resource_spec.NAME,
)


class PodMutatingHandler:
    def __init__(self, ctx: WebhookContext) -> None:
        self.ctx = ctx
        self._series: dict[str, tuple[StepSeries, ...]] = {}

    def _steps(self, operation: str) -> tuple[StepSeries, ...]:
        """The duration series of the four steps for ``operation`` (looked up once)."""
        series = self._series.get(operation)
        if series is None:
            step = self.ctx.metrics.step
            series = tuple(step(metrics.MUTATING, metrics.POD, operation, plugin) for plugin in _STEPS)
            self._series[operation] = series
        return series

    async def handle(self, request: AdmissionRequest) -> AdmissionResponse:
        if request.sub_resource or request.resource_name != "pods":
            return allowed()
        if request.operation not in ("CREATE", "UPDATE"):
            return allowed()
        try:
            original = check(request.object, POD, "pod")
        except ObjectError as exc:
            return errored(400, str(exc))
        if request.operation != "CREATE":
            return allowed()
        pod = writable_copy(original)
        namespace = object_namespace(pod, request)
        warnings: list[str] = []
        ctx = self.ctx
        profiles, extended, quota_tree, device = self._steps(request.operation)
        try:
            with PluginStep.of(profiles):
                pod = await cluster_colocation_profile.mutate_pod_by_profiles(ctx, pod, namespace, warnings)
            if not ctx.enabled("DisableExtendedResourceSpec"):
                with PluginStep.of(extended):
                    extended_resource_spec.mutate_extended_resource_spec(pod, warnings)
            if ctx.enabled("MultiQuotaTree"):
                with PluginStep.of(quota_tree):
                    multi_quota_tree.mutate_multi_quota_tree_affinity(ctx, pod, namespace)
            if not ctx.enabled("DisableDeviceResourceSpec"):
                with PluginStep.of(device):
                    device_resource_spec.mutate_device_resource_spec(pod)
        except (ProfileError, ClusterError) as exc:
            return errored(500, str(exc))
        return patched(create_patch(original, pod), warnings)
