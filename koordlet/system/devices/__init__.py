"""Device discovery on the host: NVIDIA GPUs through NVML, RDMA devices through sysfs."""
