"""Hooks, one module each, registered in :mod:`koordlet.runtimehooks.registry`."""
