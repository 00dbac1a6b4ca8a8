"""Tests of the reactor: work queue and controllers."""
