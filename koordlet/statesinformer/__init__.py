"""The states informer: the koordlet's view of its node (pods from the kubelet; Node,
NodeSLO and NodeMetric from the apiserver), callbacks to consumers, and the NodeMetric
and NodeResourceTopology reporters."""
