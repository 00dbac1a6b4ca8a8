"""Small helpers on stored objects shared by the fake apiserver's modules."""

from __future__ import annotations

from typing import Any

import orjson

from testsupport.fake import status as st

Obj = dict[str, Any]


def meta_of(obj: Obj) -> Obj:
    """``obj.metadata``, or 400 BadRequest when it is missing."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        raise st.bad_request("Object 'metadata' is missing or not an object")
    return meta


def copy_obj(obj: Obj) -> Obj:
    """A deep copy (JSON round trip: stored objects are plain JSON values)."""
    copied: Obj = orjson.loads(orjson.dumps(obj))
    return copied
