"""NodeNUMAResource's algorithm core, as a library: no framework imports and no I/O
(upstream ``pkg/scheduler/plugins/nodenumaresource`` and ``frameworkext/topologymanager``).

Modules, bottom up:

* :mod:`.topology` — a node's CPUs, cores, NUMA nodes and sockets from ``cpu-topology``;
* :mod:`.status` — status codes and upstream's rejection messages;
* :mod:`.options` — per-node inputs from the NRT and the Node: unavailable CPUs, NUMA zones,
  kubelet policy, amplification, node bind / NUMA / allocate-strategy policies;
* :mod:`.accumulator` — choosing CPUs (``takeCPUs``);
* :mod:`.allocation` — per-node bookkeeping of pod allocations;
* :mod:`.hints` — NUMA hints and the BestEffort / Restricted / SingleNUMANode merges;
* :mod:`.scoring` — LeastAllocated / MostAllocated, node-level and NUMA-level scores;
* :mod:`.allocator` — an allocation (per-NUMA split and cpuset) for a given hint;
* :mod:`.admission` — hint generation and NUMA admission on a node;
* :mod:`.podpolicy` — the pod's request (PreFilter) and the node checks (Filter);
* :mod:`.resourcestatus` — the ``resource-status`` annotation, written and read back.
"""
