"""Koordinator's API vocabulary: labels, annotations, resources, QoS, CRD models, feature gates.

Pure functions and data types, no I/O; every component builds on them.

* :mod:`.quantity`, :mod:`.resourcelist`, :mod:`.selectors`, :mod:`.cpuset`, :mod:`.kubeqos`,
  :mod:`.goparse`, :mod:`.jsonutil` — Kubernetes and Go value semantics (quantities,
  ResourceList arithmetic, label/node selectors, CPU lists, pod QoS class, Go parsing and
  JSON text).
* :mod:`.extension` — the label/annotation protocol (QoS, priority, extended resources,
  scheduling, devices, reservations, gangs, quotas, node and topology annotations).
* :mod:`.model` and :mod:`.types` — typed CRD models; :mod:`.openapi` derives their schemas,
  :mod:`.crdgen` writes ``crds/``, :mod:`.schema` validates objects like the apiserver.
* :mod:`.sloconfig` — NodeSLO defaults and the ``slo-controller-config`` ConfigMap.
* :mod:`.features` — feature-gate tables of every component.

See ``docs/api.md`` for the public API.
"""
