"""Tests for koordlet device discovery (GPU via NVML, RDMA, PCI topology)."""
