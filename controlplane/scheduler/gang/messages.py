"""The Coscheduling plug-in's status and rejection messages, worded as upstream's
``fmt`` calls word them (``%q`` quoting, ``%v`` of a string slice), so events and pod
conditions read the same as koord-scheduler's."""

from __future__ import annotations

from collections.abc import Iterable

__all__ = [
    "GANG_NOT_FOUND",
    "basic_check_failed",
    "cannot_find_gang",
    "gang_not_initialized",
    "go_list",
    "go_quote",
    "pod_missing_gang",
    "post_filter_rejected",
    "post_filter_status",
    "unreserve_rejected",
]

#: Permit's answer for a pod whose gang is not in the cache (Unschedulable)
GANG_NOT_FOUND = "Gang not found"

_ESCAPES = {"\a": r"\a", "\b": r"\b", "\f": r"\f", "\n": r"\n", "\r": r"\r", "\t": r"\t", "\v": r"\v"}


def go_quote(text: str) -> str:
    """Go's ``%q`` (``strconv.Quote``): double quotes, printable characters kept as they are."""
    out = ['"']
    for ch in text:
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ch.isprintable():
            out.append(ch)
        elif ord(ch) < 0x80:
            out.append(f"\\x{ord(ch):02x}")
        elif ord(ch) < 0x10000:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(f"\\U{ord(ch):08x}")
    out.append('"')
    return "".join(out)


def go_list(items: Iterable[str]) -> str:
    """Go's ``%v`` of a ``[]string``: ``[a b]``."""
    return "[" + " ".join(items) + "]"


def cannot_find_gang(gang_id: str, pod_key: str) -> str:
    return f"can't find gang, gangName: {gang_id}, podName: {pod_key}"


def gang_not_initialized(gang_id: str, pod_key: str) -> str:
    return f"gang has not init, gangName: {gang_id}, podName: {pod_key}"


def basic_check_failed(
    group: Iterable[str],
    missing: list[str],
    uninitialized: list[str],
    short: list[str],
    gang_id: str,
    pod_key: str,
) -> str | None:
    """The gang-group basic check's rejection (None when every member gang passes)."""
    failed: list[str] = []
    if missing:
        failed.append(f"memberGangs {go_list(missing)} doesn't exists")
    if uninitialized:
        failed.append(f"memberGangs {go_list(uninitialized)} has not init")
    if short:
        failed.append(f"memberGangs {go_list(short)} child pod not collect enough")
    if not failed:
        return None
    return (
        f"gangGroup {go_list(group)} basic check: {', '.join(failed)}, "
        f"current gang: {gang_id}, podName: {pod_key}"
    )


def pod_missing_gang(pod_key: str, gang_name: str) -> str:
    """PostFilter's status for a pod whose gang is gone."""
    return f"Pod {go_quote(pod_key)} cannot find Gang {go_quote(gang_name)}"


def post_filter_rejected(gang_id: str, pod_name: str, fit_error: str, waiting: int) -> str:
    """What the waiting members of the group are rejected with when one member fits nowhere."""
    return (
        f"Gang {go_quote(gang_id)} gets rejected due to member Pod {go_quote(pod_name)} is "
        f"unschedulable with reason {go_quote(fit_error)}, alreadyWaitForBound: {waiting}"
    )


def post_filter_status(gang_id: str) -> str:
    """PostFilter's own status message after rejecting a Strict gang group."""
    return f"Gang {go_quote(gang_id)} gets rejected due to pod is unschedulable"


def unreserve_rejected(gang_id: str, pod_name: str) -> str:
    return f"Gang {go_quote(gang_id)} gets rejected due to Pod {go_quote(pod_name)} in Unreserve"
