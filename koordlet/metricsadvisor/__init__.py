"""The metrics advisor: periodic collectors that turn host counters into samples in the
metric cache (node, pods, containers, system, BE, host applications, PSI, node info)."""
