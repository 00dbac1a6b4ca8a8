"""MigrationController (PodMigrationJob) tests."""
