"""Koordinator's API vocabulary: labels, annotations, resources, QoS, CRD models, feature gates."""
