"""The QoS manager: strategies that keep latency-sensitive pods safe from best-effort ones
(suppressing, bursting and evicting), planned from metrics and applied by the executor."""
