"""Tests of the slo-controller, leader election and explain-node."""
