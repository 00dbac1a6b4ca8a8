"""koord-descheduler: LowNodeLoad balancing and PodMigrationJob-based migration."""
