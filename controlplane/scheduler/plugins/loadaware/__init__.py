"""LoadAwareScheduling: place pods by the nodes' real usage (the koordlet's NodeMetric), not
only by their requests. ``args`` reads the plug-in's configuration, ``estimate`` what a pod
will use, ``usage`` keeps each node's estimated usage and ``plugin`` filters and scores."""
