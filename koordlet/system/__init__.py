"""The host abstraction: every read and write of /proc, /sys, cgroups and resctrl.

Nothing here imports Kubernetes or HTTP code; all paths come from an injected
:class:`~koordlet.system.paths.HostPaths`, and only this package imports the compiled
modules in ``koordlet._native``.
"""
