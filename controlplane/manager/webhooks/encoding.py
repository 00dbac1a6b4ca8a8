"""Go-compatible JSON text on the hot path: orjson when its output is Go's, else the exact encoder.

Annotation values are compared as text, so they must be written byte for byte as Go's
``json.Marshal`` writes them (:func:`koordinator.api.jsonutil.marshal`). For the values the
webhooks write on every request (quantities, label-like names) orjson produces the same
text in a fraction of the time; :func:`go_json` uses it unless the text contains something
the two encoders write differently (HTML characters, U+2028/U+2029, ``\\b``/``\\f``
escapes, floats), in which case it falls back to the exact encoder.
"""

from __future__ import annotations

from typing import Any

import orjson

from koordinator.api.jsonutil import marshal

__all__ = ["go_json"]

_DIFFERENT = ("<", ">", "&", "\u2028", "\u2029", "\\b", "\\f")


def _has_float(value: Any) -> bool:
    if isinstance(value, float):
        return True
    if isinstance(value, dict):
        return any(_has_float(item) for item in value.values())
    if isinstance(value, list | tuple):
        return any(_has_float(item) for item in value)
    return False


def go_json(value: Any, *, floats: bool = True) -> str:
    """The text Go's ``json.Marshal`` writes for ``value`` (dict order kept, as ``marshal``).

    ``floats=False`` says the value holds no float (maps and strings only), which spares
    looking for one.
    """
    if not floats or not _has_float(value):
        try:
            text = orjson.dumps(value).decode()
        except (TypeError, orjson.JSONEncodeError):
            return marshal(value)
        for marker in _DIFFERENT:  # a loop: any() over a generator costs more
            if marker in text:
                break
        else:
            return text
    return marshal(value)
