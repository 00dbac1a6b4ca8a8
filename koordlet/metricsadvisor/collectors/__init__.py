"""Collectors, one module each, named after upstream's; registered explicitly in
:data:`koordlet.metricsadvisor.registry.COLLECTORS`."""
