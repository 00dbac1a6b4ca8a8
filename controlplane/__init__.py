"""Koordinator's control plane: koord-manager, koord-scheduler and koord-descheduler (aiohttp)."""
