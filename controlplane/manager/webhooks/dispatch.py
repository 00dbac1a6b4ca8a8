"""From request body to AdmissionReview answer: the entry point shared by server, CLI and tests.

:meth:`AdmissionDispatcher.review` takes the raw body the apiserver POSTed and always
returns an encoded AdmissionReview: malformed input (not JSON, not an AdmissionReview,
wrong field types, an object that does not decode, an oversized body, a wrong content
type) is answered with ``allowed: false`` and status code 400, in the review version
received when it can be read. A handler that raises or runs past ``timeout`` seconds is
answered with 500; the error is logged with its traceback. Nothing a client sends can
crash the server or leave a request unanswered.

Bodies above :data:`OFFLOAD_BYTES` (the apiserver's 99th percentile of object sizes) are
decoded in a worker thread of their own, one at a time, so the event loop goes on
answering probes and small reviews while a large one is read. orjson does not release the
GIL, so the loop still waits for each ``orjson.loads`` (about 30 ms for 7 MiB), but not for
the nesting check, the field checks or the next large body.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import types
from collections.abc import Coroutine, Generator, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import orjson

from controlplane.manager.webhooks import build_handlers
from controlplane.manager.webhooks.context import Handler, WebhookContext
from controlplane.manager.webhooks.review import (
    V1,
    AdmissionRequest,
    AdmissionResponse,
    ReviewError,
    decode_review,
    encode_review,
    errored,
    review_dict,
)

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "MAX_REQUEST_BYTES",
    "OFFLOAD_BYTES",
    "AdmissionDispatcher",
    "UnknownPathError",
    "body_too_large",
    "oversized_body",
]

log = logging.getLogger(__name__)

_T = TypeVar("_T")

#: controller-runtime refuses bodies above 7 MiB.
MAX_REQUEST_BYTES = 7 * 1024 * 1024
#: Below the apiserver's 30 s maximum webhook timeout, so the apiserver gets our answer.
DEFAULT_TIMEOUT_S = 25.0
#: Bodies above this are decoded off the event loop (the kube-apiserver's figure: 99% of
#: serialized objects in surveyed clusters are smaller).
OFFLOAD_BYTES = 256 * 1024


def body_too_large(limit: int) -> str:
    """The one refusal message for a request body above ``limit`` bytes."""
    return f"request entity is too large; limit is {limit} bytes"


def oversized_body(size: int | None, limit: int = MAX_REQUEST_BYTES) -> str | None:
    """The refusal of a request body of ``size`` bytes above ``limit``; ``None`` when it fits
    or its size is not known yet.

    The one body-size check of the webhook path: the server asks it from ``Content-Length``
    before reading, :meth:`AdmissionDispatcher.review` from the body it is given.
    """
    if size is None or size <= limit:
        return None
    return body_too_large(limit)


_decoder: ThreadPoolExecutor | None = None
_decoder_lock = threading.Lock()


def _large_body_decoder() -> ThreadPoolExecutor:
    """The one worker thread that decodes large bodies (started on first use)."""
    global _decoder
    with _decoder_lock:
        if _decoder is None:
            _decoder = ThreadPoolExecutor(max_workers=1, thread_name_prefix="review-decoder")
        return _decoder


class UnknownPathError(LookupError):
    """No webhook is served at this path (its gate is off, or it does not exist)."""


def _content_type_ok(content_type: str | None) -> bool:
    if content_type is None:
        return False
    return content_type.split(";", 1)[0].strip().lower() == "application/json"


@types.coroutine
def _finish(coro: Coroutine[Any, Any, _T], waiting: Any) -> Generator[Any, Any, _T]:
    """The rest of ``coro``, whose first step yielded ``waiting``, as ``await coro`` would run it.

    What the task sends or throws in goes to ``coro``, what ``coro`` yields goes to the task
    (so cancellation and the futures it waits on behave as under ``await``).
    """
    while True:
        try:
            sent = yield waiting
        except GeneratorExit:
            coro.close()
            raise
        except BaseException as exc:  # delivered to the coroutine, as await does
            try:
                waiting = coro.throw(exc)
            except StopIteration as done:
                result: _T = done.value
                return result
        else:
            try:
                waiting = coro.send(sent)
            except StopIteration as done:
                result = done.value
                return result


class AdmissionDispatcher:
    def __init__(
        self,
        ctx: WebhookContext,
        handlers: Mapping[str, Handler] | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        self.ctx = ctx
        self.handlers: dict[str, Handler] = dict(handlers) if handlers is not None else build_handlers(ctx)
        self.timeout = timeout

    @property
    def paths(self) -> list[str]:
        return sorted(self.handlers)

    def _handler(self, path: str) -> Handler:
        try:
            return self.handlers[path]
        except KeyError:
            raise UnknownPathError(f"no webhook is served at {path}") from None

    async def respond(self, path: str, request: AdmissionRequest) -> AdmissionResponse:
        """The handler's answer to a decoded request; failures become 500 answers.

        Most answers come from the caches without waiting for anything: the handler's first
        step runs to its end, and no timer is armed for it (a timer costs more than such an
        answer's metrics). A handler that waits (an API lookup) finishes under the timeout,
        counted from the start.
        """
        handler = self._handler(path)
        started = asyncio.get_running_loop().time()
        try:
            coro = handler.handle(request)
            if not isinstance(coro, types.CoroutineType):  # another kind of awaitable
                async with asyncio.timeout_at(started + self.timeout):
                    return await coro
            try:
                waiting = coro.send(None)
            except StopIteration as done:
                response: AdmissionResponse = done.value
                return response
            async with asyncio.timeout_at(started + self.timeout):
                return await _finish(coro, waiting)
        except TimeoutError:
            log.error("webhook %s: request %s timed out after %.0fs", path, request.uid, self.timeout)
            return errored(500, f"webhook {path} timed out after {self.timeout:.0f}s")
        except Exception as exc:
            log.exception("webhook %s: request %s failed", path, request.uid)
            return errored(500, f"internal error in webhook {path}: {type(exc).__name__}: {exc}")

    async def review(
        self, path: str, body: bytes | bytearray, content_type: str | None = "application/json"
    ) -> bytes:
        """Answer a raw request body; raises :class:`UnknownPathError` only for unserved paths."""
        self._handler(path)
        try:
            too_large = oversized_body(len(body))
            if too_large is not None:
                raise ReviewError(too_large)
            if not _content_type_ok(content_type):
                raise ReviewError(f"contentType={content_type or ''}, expected application/json")
            if len(body) > OFFLOAD_BYTES:
                loop = asyncio.get_running_loop()
                request = await loop.run_in_executor(_large_body_decoder(), decode_review, body)
            else:
                request = decode_review(body)
        except ReviewError as exc:
            return encode_review(exc.api_version, exc.uid, errored(400, str(exc)))
        response = await self.respond(path, request)
        try:
            return encode_review(request.api_version, request.uid, response)
        except orjson.JSONEncodeError as exc:  # a patch orjson cannot write
            log.exception("webhook %s: request %s: cannot encode the answer", path, request.uid)
            return encode_review(
                request.api_version, request.uid, errored(500, f"cannot encode the answer of {path}: {exc}")
            )

    async def admit(self, path: str, review: Mapping[str, Any]) -> dict[str, Any]:
        """Answer a decoded AdmissionReview dict (``koord-manager admit``)."""
        try:
            request = decode_review(orjson.dumps(review))
        except ReviewError as exc:
            self._handler(path)
            return review_dict(exc.api_version or V1, exc.uid, errored(400, str(exc)))
        except orjson.JSONEncodeError as exc:  # nested deeper than orjson writes
            self._handler(path)
            return review_dict(V1, "", errored(400, f"couldn't encode the AdmissionReview: {exc}"))
        response = await self.respond(path, request)
        return review_dict(request.api_version, request.uid, response)
