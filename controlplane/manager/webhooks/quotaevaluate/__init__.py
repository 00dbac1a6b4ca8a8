"""Quota admission: pods charged against an ElasticQuota's admission limit when they are created.

Upstream's ``pkg/webhook/quotaevaluate``. :mod:`.usage` holds the pure rules (what a pod
counts, the admission limit, the rejection text), :mod:`.accessor` the way quotas are read
and written back, :mod:`.evaluator` the batching evaluator that checks concurrent pods of
one quota together and persists their sum into the quota's ``child-request`` annotation.
The ``/validate-pod`` step that calls it is :mod:`controlplane.manager.webhooks.pod.evaluate_quota`.
"""
