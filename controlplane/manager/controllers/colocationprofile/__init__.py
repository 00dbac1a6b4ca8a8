"""The colocationprofile controller: ClusterColocationProfiles re-applied to pending pods.

:mod:`.settings` holds its flags and the profile rules the manager lends it (the webhook's
matching and application code: controllers may not import the webhooks), :mod:`.controller`
the reconcile loop.
"""
