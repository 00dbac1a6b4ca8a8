"""The descheduler configuration shipped with koord-descheduler: :data:`KOORDINATOR` is
upstream's ``koord-descheduler-config`` (MigrationController as the evictor, LowNodeLoad's
args set with Koordinator's thresholds), the file a deployment passes as ``--config``.
LowNodeLoad is configured there but, as upstream ships it, not enabled: enabling it under
``plugins.balance`` turns on load balancing."""

from __future__ import annotations

from pathlib import Path

KOORDINATOR = Path(__file__).with_name("koord-descheduler.yaml")
