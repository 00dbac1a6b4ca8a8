"""AdmissionReview wire format: versions echoed, malformed bodies answered with error reviews."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controlplane.manager.webhooks import review as review_module
from controlplane.manager.webhooks.dispatch import MAX_REQUEST_BYTES, UnknownPathError
from tests.controlplane.manager.builders import Admission, make_pod, review


@pytest.mark.parametrize("api_version", ["admission.k8s.io/v1", "admission.k8s.io/v1beta1"])
async def test_answer_uses_the_version_received(api_version):
    body = review(make_pod().build(), api_version=api_version, uid="abc")
    answer = orjson.loads(await Admission().dispatcher.review("/mutate-pod", orjson.dumps(body)))
    assert answer == {
        "apiVersion": api_version,
        "kind": "AdmissionReview",
        "response": {"uid": "abc", "allowed": True, "status": {"metadata": {}, "code": 200}},
    }


GOOD = review(make_pod().build(), uid="u-1")


@pytest.mark.parametrize(
    ("body", "content_type", "version", "uid", "message"),
    [
        pytest.param(b"", "application/json", "admission.k8s.io/v1", "", "request body is empty", id="empty"),
        pytest.param(
            b"{",
            "application/json",
            "admission.k8s.io/v1",
            "",
            "couldn't decode the AdmissionReview",
            id="truncated-json",
        ),
        pytest.param(
            b"[]",
            "application/json",
            "admission.k8s.io/v1",
            "",
            "expected a JSON object, got array",
            id="array",
        ),
        pytest.param(
            b'{"kind":"AdmissionReview"}',
            "application/json",
            "admission.k8s.io/v1",
            "",
            "couldn't get version/kind",
            id="no-api-version",
        ),
        pytest.param(
            b'{"apiVersion":"admission.k8s.io/v2","kind":"AdmissionReview","request":{}}',
            "application/json",
            "admission.k8s.io/v1",
            "",
            "unsupported review admission.k8s.io/v2",
            id="unknown-version",
        ),
        pytest.param(
            b'{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview"}',
            "application/json",
            "admission.k8s.io/v1beta1",
            "",
            "got an empty AdmissionRequest",
            id="no-request",
        ),
        pytest.param(
            orjson.dumps({**GOOD, "request": {**GOOD["request"], "operation": "PATCH"}}),
            "application/json",
            "admission.k8s.io/v1",
            "u-1",
            "request.operation: unsupported value 'PATCH'",
            id="unknown-operation",
        ),
        pytest.param(
            orjson.dumps({**GOOD, "request": {**GOOD["request"], "object": "pod"}}),
            "application/json",
            "admission.k8s.io/v1",
            "u-1",
            "request.object: expected a JSON object, got string",
            id="object-not-an-object",
        ),
        pytest.param(
            orjson.dumps(GOOD),
            "text/plain",
            "admission.k8s.io/v1",
            "",
            "contentType=text/plain, expected application/json",
            id="content-type",
        ),
        pytest.param(
            b" " * (MAX_REQUEST_BYTES + 1),
            "application/json",
            "admission.k8s.io/v1",
            "",
            "request entity is too large",
            id="too-large",
        ),
    ],
)
async def test_malformed_bodies_get_error_reviews(body, content_type, version, uid, message):
    answer = orjson.loads(await Admission().dispatcher.review("/validate-pod", body, content_type))
    assert answer["apiVersion"] == version
    assert answer["kind"] == "AdmissionReview"
    response = answer["response"]
    assert response["uid"] == uid
    assert response["allowed"] is False
    assert response["status"]["code"] == 400
    assert message in response["status"]["message"]


async def test_content_type_parameters_are_accepted():
    answer = orjson.loads(
        await Admission().dispatcher.review(
            "/validate-pod", orjson.dumps(GOOD), "application/json; charset=utf-8"
        )
    )
    assert answer["response"]["allowed"] is True


async def test_handler_crash_becomes_500():
    admission = Admission()

    class Exploding:
        async def handle(self, request):
            raise KeyError("boom")

    admission.dispatcher.handlers["/validate-pod"] = Exploding()
    answer = orjson.loads(await admission.dispatcher.review("/validate-pod", orjson.dumps(GOOD)))
    assert answer["response"]["status"] == {
        "metadata": {},
        "message": "internal error in webhook /validate-pod: KeyError: 'boom'",
        "code": 500,
    }


async def test_slow_handler_times_out_with_500():
    import asyncio

    admission = Admission()
    admission.dispatcher.timeout = 0.05

    class Slow:
        async def handle(self, request):
            await asyncio.sleep(10)

    admission.dispatcher.handlers["/validate-pod"] = Slow()
    answer = orjson.loads(await admission.dispatcher.review("/validate-pod", orjson.dumps(GOOD)))
    assert answer["response"]["status"]["code"] == 500
    assert "timed out" in answer["response"]["status"]["message"]


async def test_handler_that_waits_gets_what_it_waited_for():
    import asyncio

    admission = Admission()

    class Waiting:
        async def handle(self, request):
            loop = asyncio.get_running_loop()
            future = loop.create_future()
            loop.call_soon(future.set_result, "from the future")
            await asyncio.sleep(0)
            message = await future
            from controlplane.manager.webhooks.review import allowed

            return allowed(message)

    admission.dispatcher.handlers["/validate-pod"] = Waiting()
    answer = orjson.loads(await admission.dispatcher.review("/validate-pod", orjson.dumps(GOOD)))
    assert answer["response"]["allowed"] is True
    assert answer["response"]["status"] == {"metadata": {}, "message": "from the future", "code": 200}


async def test_handler_crash_after_waiting_becomes_500():
    import asyncio

    admission = Admission()

    class ExplodingLater:
        async def handle(self, request):
            await asyncio.sleep(0)
            raise KeyError("later")

    admission.dispatcher.handlers["/validate-pod"] = ExplodingLater()
    answer = orjson.loads(await admission.dispatcher.review("/validate-pod", orjson.dumps(GOOD)))
    assert answer["response"]["status"] == {
        "metadata": {},
        "message": "internal error in webhook /validate-pod: KeyError: 'later'",
        "code": 500,
    }


async def test_handler_that_waits_sees_cancellation_and_cleans_up():
    import asyncio

    admission = Admission()
    admission.dispatcher.timeout = 0.05
    cleaned: list[str] = []

    class Slow:
        async def handle(self, request):
            try:
                await asyncio.sleep(10)
            finally:
                cleaned.append("yes")

    admission.dispatcher.handlers["/validate-pod"] = Slow()
    answer = orjson.loads(await admission.dispatcher.review("/validate-pod", orjson.dumps(GOOD)))
    assert answer["response"]["status"]["code"] == 500
    assert "timed out after" in answer["response"]["status"]["message"]
    assert cleaned == ["yes"]


async def test_cancelling_the_caller_cancels_a_waiting_handler():
    import asyncio

    admission = Admission()
    started = asyncio.Event()
    cancelled: list[str] = []

    class Waiting:
        async def handle(self, request):
            started.set()
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                cancelled.append("yes")
                raise

    admission.dispatcher.handlers["/validate-pod"] = Waiting()
    task = asyncio.create_task(admission.dispatcher.review("/validate-pod", orjson.dumps(GOOD)))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cancelled == ["yes"]


@pytest.mark.parametrize(
    ("gates", "served"),
    [
        pytest.param(
            "",
            [
                "/mutate-pod",
                "/mutate-scheduling-sigs-k8s-io-v1alpha1-elasticquota",
                "/validate-pod",
                "/validate-pod-binding",
                "/validate-scheduling-sigs-k8s-io-v1alpha1-elasticquota",
            ],
            id="defaults",
        ),
        pytest.param(
            "PodMutatingWebhook=false,PodValidatingWebhook=false,ElasticMutatingWebhook=false,"
            "ElasticValidatingWebhook=false,ConfigMapValidatingWebhook=true",
            ["/validate-configmap"],
            id="only-configmap",
        ),
        pytest.param(
            "AllAlpha=true",
            [
                "/mutate-node-status",
                "/mutate-pod",
                "/mutate-reservation",
                "/mutate-scheduling-sigs-k8s-io-v1alpha1-elasticquota",
                "/validate-configmap",
                "/validate-node",
                "/validate-pod",
                "/validate-pod-binding",
                "/validate-scheduling-sigs-k8s-io-v1alpha1-elasticquota",
            ],
            id="all-alpha",
        ),
    ],
)
def test_feature_gates_decide_the_served_paths(gates, served):
    assert Admission(feature_gates=gates).dispatcher.paths == served


async def test_unserved_path_is_an_error_for_the_caller():
    with pytest.raises(UnknownPathError):
        await Admission().dispatcher.review("/validate-node", orjson.dumps(GOOD))


NULLABLE_OBJECTS: dict[str, dict[str, Any]] = {
    "Pod": {
        "kind": "Pod",
        "metadata": {"name": "p", "labels": None, "annotations": None},
        "spec": {"containers": None},
    },
    "ElasticQuota": {"kind": "ElasticQuota", "metadata": {"name": "q"}, "spec": {"min": None, "max": None}},
    "Node": {
        "kind": "Node",
        "metadata": {
            "name": "n",
            "annotations": {"node.koordinator.sh/resource-amplification-ratio": '{"cpu":2}'},
        },
        "status": None,
    },
    "ConfigMap": {
        "kind": "ConfigMap",
        "metadata": {"name": "slo-controller-config", "namespace": "koordinator-system"},
        "data": None,
    },
    "Reservation": {"kind": "Reservation", "metadata": {"name": "r"}, "spec": {"template": None}},
}


@pytest.mark.parametrize("kind", sorted(NULLABLE_OBJECTS))
@pytest.mark.parametrize("field", ["metadata", "spec", "status", "data", None])
@pytest.mark.parametrize("sub_resource", ["", "status"])
async def test_null_fields_never_cause_internal_errors(kind, field, sub_resource):
    """Go decodes null into the zero value; so must the handlers (found by the fuzzer: metadata: null)."""
    admission = Admission(feature_gates="AllAlpha=true")
    obj = dict(NULLABLE_OBJECTS[kind])
    if field is not None:
        obj[field] = None
    for path in admission.dispatcher.paths:
        for operation in ("CREATE", "UPDATE", "DELETE"):
            body = review(obj, kind=kind, operation=operation, old=obj, sub_resource=sub_resource)
            response = await admission.call(path, body)
            assert response["status"]["code"] != 500, (path, operation, response["status"])


async def test_null_list_elements_are_refused_not_crashed_on():
    pod = make_pod().build()
    pod["spec"]["containers"] = [None]
    response = await Admission().call("/validate-pod", review(pod))
    assert response["status"] == {
        "metadata": {},
        "message": "cannot decode pod: spec.containers[0]: cannot decode null as an object",
        "code": 400,
    }


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-5, 5)
    | st.text(max_size=3)
    | st.sampled_from(["CREATE", "pods"]),
    lambda inner: (
        st.lists(inner, max_size=2) | st.dictionaries(st.sampled_from(["group", "kind", "x"]), inner)
    ),
    max_leaves=4,
)
GOOD_FIELDS: dict[str, list[Any]] = {
    "uid": ["u-1", ""],
    "operation": ["CREATE", "UPDATE", "DELETE", "CONNECT", "PATCH"],
    "subResource": ["", "status"],
    "name": ["p"],
    "namespace": ["default"],
    "userInfo": [{"username": "u"}, {}],
    "dryRun": [True, False],
    "object": [{"kind": "Pod"}, {}],
    "oldObject": [{"kind": "Pod"}],
    "options": [{}],
    "kind": [{"group": "", "version": "v1", "kind": "Pod"}, {"kind": 1}, {}],
    "resource": [{"group": "", "version": "v1", "resource": "pods", "x": [1]}, {}],
}
#: Mostly good values, so that one wrong field at a time is common (the operation is always there).
request_fields = st.fixed_dictionaries(
    {"operation": st.sampled_from(["CREATE", "UPDATE", "DELETE", "CONNECT"]) | json_values},
    optional={
        key: st.one_of(st.sampled_from(good), st.sampled_from(good), st.sampled_from(good), json_values)
        for key, good in GOOD_FIELDS.items()
        if key != "operation"
    },
)


@settings(max_examples=500, deadline=None, database=None)
@given(request_fields)
def test_well_typed_requests_decode_as_the_field_checks_decode_them(request: dict[str, Any]):
    fast = review_module._well_typed(request, "admission.k8s.io/v1")
    try:
        checked = review_module._checked_request(request, "admission.k8s.io/v1")
    except review_module.ReviewError:
        assert fast is None
    else:
        assert fast == checked


async def test_handler_returning_another_awaitable_is_awaited():
    import asyncio

    from controlplane.manager.webhooks.review import allowed

    admission = Admission()

    class FutureHandler:
        def handle(self, request):
            future = asyncio.get_running_loop().create_future()
            future.set_result(allowed("from a future"))
            return future

    admission.dispatcher.handlers["/validate-pod"] = FutureHandler()
    answer = orjson.loads(await admission.dispatcher.review("/validate-pod", orjson.dumps(GOOD)))
    assert answer["response"]["status"] == {"metadata": {}, "message": "from a future", "code": 200}
