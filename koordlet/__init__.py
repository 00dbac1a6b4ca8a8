"""koordlet: Koordinator's node agent (a privileged DaemonSet on every Linux node)."""
