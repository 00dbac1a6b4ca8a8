"""Compiled extensions built from native/ (private; imported only by koordlet.system)."""
