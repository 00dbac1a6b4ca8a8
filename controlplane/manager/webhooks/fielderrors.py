"""Joining validation errors the way ``utilerrors.NewAggregate(...).Error()`` does.

One error prints as itself; several print as ``[first, second]``, duplicates removed with
the first occurrence kept. Rejections of the validating webhooks carry this text as the
status message, which the apiserver shows after ``admission webhook "..." denied the
request:``.
"""

from __future__ import annotations

from collections.abc import Iterable

from koordinator.api.schema.errors import FieldError

__all__ = ["FieldError", "aggregate"]


def aggregate(errors: Iterable[FieldError | str]) -> str:
    """The aggregate message; empty when there is no error."""
    messages = list(dict.fromkeys(str(error) for error in errors))
    if not messages:
        return ""
    if len(messages) == 1:
        return messages[0]
    return "[" + ", ".join(messages) + "]"
