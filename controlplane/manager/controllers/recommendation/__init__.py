"""The recommendation controller: recommended container requests for Recommendation objects.

:mod:`.histogram` holds the decaying histograms, :mod:`.state` one Recommendation's
histograms with its checkpoint and the pod-to-container split, :mod:`.targets` resolves
the target to a pod selector, :mod:`.controller` is the reconcile loop.
"""
