"""cgroup access: hierarchy detection, batch file I/O and (later) the resource registry."""
