"""Scheduler plug-ins, one module each, named after the upstream plug-in; registered in
:mod:`controlplane.scheduler.registry`."""
