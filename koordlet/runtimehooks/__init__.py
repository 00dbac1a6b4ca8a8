"""Runtime hooks: each pod's QoS put into its cgroups (batch resources, cpuset, group
identity, OOM score, resctrl, network QoS, GPU environment), by three transports: the
reconciler, the NRI plug-in and the hook server koord-runtime-proxy calls."""
