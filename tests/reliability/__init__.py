"""Reliability tests: faults and attacks reproduced against real processes on loopback."""
