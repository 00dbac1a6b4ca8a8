"""Reservation webhook: ClusterColocationProfiles applied to new Reservations."""
