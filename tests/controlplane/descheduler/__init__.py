"""koord-descheduler tests."""
