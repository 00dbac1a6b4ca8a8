"""The ``slo-controller-config`` ConfigMap and NodeSLO defaults: models, merge rules, validation.

* :mod:`.merge` — Go's "marshal the override, unmarshal it onto a copy of the base" overlay.
* :mod:`.nodeslo` — upstream NodeSLO defaults and the koordlet's merge of a NodeSLO onto them
  (section by section, disabled QoS classes reset to the "none" config).
* :mod:`.types` — the models of the eight ConfigMap keys.
* :mod:`.config` — parsing and validating the ConfigMap, and the effective per-node values
  (defaults ⊕ cluster strategy, ⊕ the first matching node entry, ⊕ node annotation/label
  overrides) from which the slo-controller builds NodeSLO and NodeMetric specs.
"""
