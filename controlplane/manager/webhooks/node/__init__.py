"""Node webhooks: resource amplification of node status, node labels against slo-controller-config."""
