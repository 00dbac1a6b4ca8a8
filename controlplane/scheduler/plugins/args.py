"""The one error a plug-in's args parser raises: its message names the field, and the
configuration loader turns it into a ConfigError (exit 2)."""

from __future__ import annotations


class ArgsError(ValueError):
    """Plug-in args upstream's validation would refuse."""
