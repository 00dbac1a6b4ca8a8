"""Scheduler configurations shipped with koord-scheduler: :data:`KOORDINATOR` is upstream's
``koord-scheduler-config`` (Koordinator's profile: its plug-ins, their order, weights and
args), the file a deployment passes as ``--config``."""

from __future__ import annotations

from pathlib import Path

KOORDINATOR = Path(__file__).with_name("koord-scheduler.yaml")
