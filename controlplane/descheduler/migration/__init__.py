"""MigrationController: the Evict and Filter plug-in that turns evictions into
PodMigrationJobs, and the controller that carries each job out (upstream's
``pkg/descheduler/controllers/migration``).

:mod:`.args` parses MigrationControllerArgs; :mod:`.gates` holds the per-pod eviction gates;
:mod:`.workloads` finds a pod's workload and its expected replicas; :mod:`.arbitration`
orders and admits waiting jobs under the migration limits; :mod:`.reservation` builds the
Reservation a job reserves the pod's new place with; :mod:`.evictor` applies the eviction
policy; :mod:`.controller` runs the job lifecycle.
"""
