"""Scheduler configurations shipped with koord-scheduler: :data:`KOORDINATOR` is upstream's
``koord-scheduler-config`` (Koordinator's profile: its plug-ins, their order, weights and
args), the file a deployment passes as ``--config``; :data:`EXTENDER` is what
``koord-scheduler extender`` runs for a stock kube-scheduler (Koordinator's plug-ins only)."""

from __future__ import annotations

from pathlib import Path

KOORDINATOR = Path(__file__).with_name("koord-scheduler.yaml")
EXTENDER = Path(__file__).with_name("koord-extender.yaml")
