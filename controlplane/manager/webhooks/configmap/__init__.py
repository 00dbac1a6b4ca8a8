"""ConfigMap webhook: validation of the slo-controller-config ConfigMap."""
