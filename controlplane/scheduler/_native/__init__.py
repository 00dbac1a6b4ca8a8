"""The scheduler's compiled modules (from native/schedkernel), loaded by its kernel package."""
