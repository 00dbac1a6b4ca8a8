"""Chooses between the compiled extensions and their pure-Python twins.

``KOORDLET_NO_EXTENSIONS=1`` forces the twins (for comparison and for hosts where the
extensions cannot load). A missing or broken extension also falls back, once, with a
warning that says why; the agent never crashes over it.
"""

from __future__ import annotations

import importlib
import logging
import os
from functools import cache
from types import ModuleType

NO_EXTENSIONS_ENV = "KOORDLET_NO_EXTENSIONS"

#: name of each compiled module -> what it accelerates or provides
EXTENSIONS = {
    "_cgroupfs": "Cython batch reader for cgroup and procfs files",
    "_perf": "cffi binding of perf_event_open",
}

log = logging.getLogger(__name__)


def extensions_disabled() -> bool:
    return os.environ.get(NO_EXTENSIONS_ENV, "").strip().lower() in ("1", "true", "yes", "on")


@cache
def load(name: str) -> ModuleType | None:
    """The compiled module ``koordlet._native.<name>``, or None when the twin must be used."""
    if name not in EXTENSIONS:
        raise KeyError(f"unknown native extension {name!r}")
    if extensions_disabled():
        return None
    try:
        return importlib.import_module(f"koordlet._native.{name}")
    except ImportError as err:
        log.warning("native extension %s unavailable (%s); using its Python twin", name, err)
        return None


def backend_report() -> dict[str, str]:
    """For ``--version`` and logs: which implementation serves each extension point."""
    report = {}
    for name in EXTENSIONS:
        if extensions_disabled():
            report[name] = f"python ({NO_EXTENSIONS_ENV}=1)"
        elif load(name) is None:
            report[name] = "python (extension not built)"
        else:
            report[name] = "native"
    return report


def backend_name() -> str:
    """``native`` when every extension is loaded, ``python`` when none is, else ``mixed``."""
    kinds = {value.split()[0] for value in backend_report().values()}
    return kinds.pop() if len(kinds) == 1 else "mixed"
