"""Runtime hooks: each pod's QoS put into its cgroups (batch resources, cpuset, group
identity, OOM score, resctrl, network QoS), by the reconciler transport."""
