"""koord-device-daemon: detects heterogeneous accelerators and writes device-info files for the koordlet."""
