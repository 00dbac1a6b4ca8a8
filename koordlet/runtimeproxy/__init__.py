"""koord-runtime-proxy: a CRI proxy between the kubelet and the container runtime that runs
the hook servers' hooks (the koordlet's) around the calls that create and resize pods."""
