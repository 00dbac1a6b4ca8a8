"""Kubernetes access shared by every process: async API client, informer, Lease leader election."""
