"""DeviceShare's pure core: device requests, node device inventory, allocation and scoring.

Nothing here imports the scheduler framework. ``requests`` validates and normalizes a pod's
device requests, ``claims`` adds the pod's hint and joint-allocation annotations,
``inventory`` keeps one node's devices and what pods hold on them, ``allocator`` (with
``gpu_topology``) picks devices, and ``scoring`` ranks devices and nodes. Device amounts are
read with :func:`koordinator.api.devices.to_ints`, shared with koord-manager, which derives
the node's extended resources from the same ``Device`` object.
"""
