"""Koordinator's pod/node/reservation protocol: label and annotation keys, values and JSON shapes.

One module per area, each with the exact upstream strings and typed helpers over plain
object dicts: :mod:`.constants` (domains and miscellaneous pod keys), :mod:`.qos`,
:mod:`.priority`, :mod:`.resources` (extended resource names and per-priority mapping),
:mod:`.numa` (resource-spec/status, CPU bind and NUMA policies), :mod:`.device`,
:mod:`.reservation`, :mod:`.scheduling` (load-aware and other scheduler annotations),
:mod:`.gang`, :mod:`.quota`, :mod:`.node` (node labels/annotations), :mod:`.topology`
(NodeResourceTopology annotations), :mod:`.podqos` (per-pod QoS overrides) and
:mod:`.colocation`. :mod:`.annotations` holds the
shared read/write machinery and :class:`AnnotationError`.
"""
